"""report: DIR/index.html, one self-contained page (styles inline, figures embedded as data URIs,
nothing fetched) over whatever DIR holds: validate*.json tables, every PNG, links to the JSON
files and merged traces."""
import base64
import datetime
import html
import json
import os
import re

from .common import InputError, fmt, write_text
from .validate import read_validate

PAGE_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px auto; max-width: 1320px;
       padding: 0 20px; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0.1em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
.meta { color: #666; font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.pick td { background: #fff4e5; } tr.best td:first-child { font-weight: bold; } td:first-child { white-space: nowrap; }
.figures figure { margin: 1em 0; } .figures img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; } .bad { color: #b00; } .good { color: #070; }
dl.kv { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; font-size: 0.92em; }
dl.kv dt { color: #555; } dl.kv dd { margin: 0; }
.figures-summary { display: flex; gap: 28px; flex-wrap: wrap; margin: 0.5em 0; }
.figure-box { background: #f7f7f7; border: 1px solid #e3e3e3; padding: 8px 14px; border-radius: 4px; }
.figure-box b { display: block; font-size: 1.35em; }
code { background: #f3f3f3; padding: 0 3px; }
"""


def esc(x):
    return html.escape(str(x), quote=True)


def link(href, text=None):
    return f'<a href="{esc(href)}">{esc(text if text is not None else href)}</a>'


def is_chrome_trace(path):
    # The key is looked for near the start (sax writes keys in sorted order: "displayTimeUnit",
    # "otherData", then "traceEvents"), so that a large trace is not parsed whole to list it.
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(1 << 20)
    except OSError:
        return False
    return '"traceEvents"' in head or head.lstrip().startswith("[")


def json_kind(path):
    """What a JSON file of sax's is, for the page's list of files (a small file is read whole;
    a large one is named by its start)."""
    if is_chrome_trace(path):
        return "Chrome trace: open it in chrome://tracing (Load) or at ui.perfetto.dev (Open trace file)"
    try:
        if os.path.getsize(path) > (16 << 20):
            return "JSON"
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return "JSON (not readable as JSON)"
    if not isinstance(doc, dict):
        return "JSON"
    if doc.get("kind") == "calibration" or ("provenance" in doc and "links" in doc):
        return "calibration (sax calibrate)"
    if doc.get("version") == 2 and isinstance(doc.get("results"), list) and "timing" in doc:
        return "collective sweep (sax bench coll --json)"
    return "JSON"


def summary_boxes(v):
    s = v["summary"]
    err_class = "good" if s["mape_pct"] is not None and s["mape_pct"] <= 10 else "bad"
    nc = s["non_compute_mape_pct"]
    nc_class = "good" if nc is not None and nc <= 10 else "bad"
    step = (("step MAPE", fmt(s["mape_pct"], ".1f") + " %", err_class),)
    non_compute = (("not compute: MAPE", fmt(nc, ".1f") + " %", nc_class),)
    # Paced, compute matches by construction: what is not compute (the model's own part) first.
    head = non_compute + step if s["compute"] == "paced" else step + non_compute
    out = ['<div class="figures-summary">']
    # Over a handful of layouts Kendall τ says little (two ranked in order give 1.00): said beside it.
    tau = fmt(s["kendall_tau"], ".2f") + (f" (over {s['layouts']} layouts: says little)"
                                         if s.get("kendall_tau_layouts_few") else "")
    for name, value, cls in head + (("Kendall τ", tau, ""),
                             ("top-1 regret", fmt(s["top1_regret_pct"], ".1f") + " %", ""),
                             ("explorer's pick", s["explorer_pick"] or "n/a", ""),
                             ("best measured", s["best_measured"] or "n/a", ""),
                             ("layouts measured", fmt(s["layouts"], ".0f", str(len(v["layouts"]))), ""),
                             ("runs failed", fmt(s["failed"], ".0f"), "bad" if s["failed"] else "")):
        if name == "runs failed" and not s["failed"]:
            continue
        out.append(f'<div class="figure-box">{esc(name)}<b class="{cls}">{esc(value)}</b></div>')
    out.append("</div>")
    return out


def terms_table(v):
    """Each term's MAPE, bias and worst over the layouts where it is at least 2 % of the step."""
    terms = v["summary"].get("terms") or {}
    if not terms:
        return ""
    rows = ['<table class="terms"><tr><th>term</th><th>layouts</th><th>MAPE</th><th>bias</th><th>worst</th></tr>']
    for t, f in terms.items():
        n = f.get("layouts") or 0
        if not n:
            rows.append(f'<tr><td>{esc(t)}</td><td class="num">0</td><td colspan="3">under 2 % of the step '
                        f"wherever it ran</td></tr>")
            continue
        cls = "good" if f["mape_pct"] <= 15 else "bad"
        rows.append(f'<tr><td>{esc(t)}</td><td class="num">{n}</td><td class="num"><span class="{cls}">'
                    f'{f["mape_pct"]:.1f} %</span></td><td class="num">{f["bias_pct"]:+.1f} %</td>'
                    f'<td>{f["worst_pct"]:+.1f} % ({esc(f["worst_layout"])})</td></tr>')
    rows.append("</table>")
    return "\n".join(rows)


def inputs_list(v):
    i = v["inputs"]
    rows = [("cluster", i["cluster"]), ("model", i["model"]), ("costs", i["cost_source"] or (i["calibration"] or "")),
            ("emulation", i["emulation"] + (" — " + i["emulation_note"] if i["emulation_note"] else "")),
            ("network technology", i["technology"] or "the cluster's own"),
            ("compute", "paced: every op held to the declared device's time (the device the explorer prices)"
             if v["summary"]["compute"] == "paced" else "native: the host's own speed"),
            ("not compute", f"{fmt(v['summary']['non_compute_share_pct'], '.1f')} % of the measured step, "
                            f"MAPE {fmt(v['summary']['non_compute_mape_pct'], '.1f')} %"),
            ("steps", f"{fmt(i['steps'], '.0f', '?')} measured after {fmt(i['warmup'], '.0f', '?')} warm-up"),
            ("feasible layouts searched", fmt(v["feasible"], ",.0f"))]
    p = v.get("provenance")
    if p:  # where it came from: which sax, when, on which host, and the input files' hashes
        rows.append(("written by", f"sax {p['sax_version']} on {p['host']} at {p['time_utc']}"))
        rows += [(f"{role} hash", f["hash"]) for role, f in p["inputs"].items()]
    return '<dl class="kv">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(x)}</dd>" for k, x in rows) + "</dl>"


def layout_files(l, base, root):
    files = []
    for key, name in (("run_json", "run"), ("trace_dir", "trace")):
        p = l[key]
        # sax validate writes these paths as given on its command line (relative to where it
        # ran, or absolute); a link is made relative to the page where the file is found.
        at = next((c for c in (os.path.join(root, base, p), os.path.join(root, p), p) if os.path.exists(c)),
                  None) if p else None
        if at:
            files.append(link(os.path.relpath(at, root), name))
        elif p:
            files.append(f"{esc(name)}: {esc(p)}")
    return " ".join(files)


def layout_row(l, s, files):
    m = l["measured"]
    cls = " ".join(c for c, hit in (("pick", l["label"] == s["explorer_pick"]),
                                    ("best", l["label"] == s["best_measured"])) if hit)
    e = l["error_pct"]
    err = "n/a" if e is None else f'<span class="{"good" if abs(e) <= 10 else "bad"}">{e:+.1f} %</span>'
    w = l["worst_term"]
    worst = "" if w is None else f"{esc(w['term'])}: {w['predicted_s']:.4g} / {w['measured_s']:.4g}"
    label = esc(l["label"]) + (" ★" if l["label"] == s["best_measured"] else "")
    return (f'<tr class="{cls}"><td>{label}</td><td class="num">{fmt(l["explorer_rank"], ".0f", "–")}</td>'
            f'<td>{esc(l["picked"])}</td><td>{esc(l["describe"])}</td><td>{esc(l["options"])}</td>'
            f'<td class="num">{l["predicted"]["step_time_s"]:.4f}</td>'
            f'<td class="num">{"not measured" if m is None else format(m["median"], ".4f")}</td>'
            f'<td class="num">{"" if m is None else format(m["min"], ".4f") + " .. " + format(m["max"], ".4f")}</td>'
            f'<td class="num">{err}</td><td>{worst}</td><td>{files}</td></tr>')


def validate_section(v, rel, root):
    out = [f'<h2>Validation: {link(rel)}</h2>'] + summary_boxes(v) + [inputs_list(v), terms_table(v)]
    out.append("<table><tr><th>layout</th><th>explorer rank</th><th>picked</th><th>degrees</th><th>options</th>"
               "<th>predicted (s)</th><th>measured median (s)</th><th>min..max (s)</th><th>error</th>"
               "<th>worst term (predicted / measured s)</th><th>files</th></tr>")
    out += [layout_row(l, v["summary"], layout_files(l, os.path.dirname(rel), root)) for l in v["layouts"]]
    out.append("</table>")
    out.append('<p class="meta">Highlighted: the explorer\'s pick; ★ the best measured. error = (predicted − '
               'measured) / measured. Top-1 regret: how much slower the explorer\'s pick measured than the best '
               'measured layout.</p>')
    return "\n".join(out)


# What the page looks at: DIR and its folders one level down (`sax validate --plots DIR/gpt-tiny`
# puts its figures and merged trace there); deeper folders are runs' own files and per-rank traces,
# reached through the validation table's links instead.
REPORT_DEPTH = 1
FIGURE_ORDER = {"terms.png": 0, "scatter.png": 1, "breakdown.png": 2, "timeline.png": 3, "coll.png": 4}


def report_files(root):
    """(relative path, name) of every visible file in root and its folders down to REPORT_DEPTH."""
    found = []
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        depth = 0 if rel == "." else rel.count(os.sep) + 1
        dirs[:] = sorted(x for x in dirs if not x.startswith(".")) if depth < REPORT_DEPTH else []
        for f in sorted(files):
            if not f.startswith("."):
                found.append(os.path.normpath(os.path.join(rel, f)))
    return found


def figure_block(root, rels):
    out = ['<div class="figures">']
    for rel in sorted(rels, key=lambda r: (os.path.dirname(r), FIGURE_ORDER.get(os.path.basename(r), 9), r)):
        path = os.path.join(root, rel)
        try:
            with open(path, "rb") as f:
                data = base64.b64encode(f.read()).decode("ascii")
        except OSError as e:
            raise InputError(path, "", f"a readable PNG ({e.strerror})")
        out.append(f'<figure><img alt="{esc(rel)}" src="data:image/png;base64,{data}">'
                   f"<figcaption>{link(rel)}</figcaption></figure>")
    out.append("</div>")
    return "\n".join(out)


def own_figures(rel, pngs):
    """The figures of one validation: for validate-NAME.json the folder NAME beside it (as
    scripts/demo.sh passes --json and --plots); for validate.json its own folder's scatter,
    breakdown and timeline (as sax validate --plots DIR writes them without --json)."""
    base, name = os.path.split(rel)
    m = re.fullmatch(r"validate[-_.](.+)\.json", name)
    if m:
        folder = os.path.normpath(os.path.join(base, m.group(1)))
        return [p for p in pngs if os.path.dirname(p) == folder]
    if name == "validate.json":
        return [p for p in pngs if os.path.dirname(p) == base and os.path.basename(p) in FIGURE_ORDER]
    return []


def validation_sections(root, validates, pngs):
    """A section per validate*.json with its own figures; the figures shown in them."""
    sections, shown = [], set()
    for rel in validates:
        figs = [f for f in own_figures(rel, pngs) if f not in shown]
        shown.update(figs)
        sections.append(validate_section(read_validate(os.path.join(root, rel)), rel, root)
                        + (figure_block(root, figs) if figs else ""))
    return sections, shown


def files_list(root, jsons, validates):
    body = ["<h2>Files</h2><ul>"]
    for rel in jsons:
        what = "validation (sax validate --json)" if rel in validates else json_kind(os.path.join(root, rel))
        body.append(f"<li>{link(rel)} — {esc(what)}</li>")
    body.append("</ul>")
    return body


def cmd_report(a):
    root = a.dir
    if not os.path.isdir(root):
        raise InputError(root, "", "a directory of results (validate*.json, *.png, traces)")
    files = report_files(root)
    pngs = [f for f in files if f.lower().endswith(".png")]
    jsons = [f for f in files if f.endswith(".json")]
    validates = [f for f in jsons if re.fullmatch(r"validate.*\.json", os.path.basename(f))]
    sections, shown = validation_sections(root, validates, pngs)
    rest = [f for f in pngs if f not in shown]
    title = a.title or f"sax results: {os.path.basename(os.path.abspath(root))}"
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = [f"<h1>{esc(title)}</h1>", f'<p class="meta">{esc(os.path.abspath(root))} — written {esc(now)} by '
            "scripts/plots.py report</p>"]
    if not (sections or pngs or jsons):
        body.append("<p>Nothing to show: no validate*.json, PNG or JSON file in this directory.</p>")
    body += sections
    if rest:
        body.append("<h2>Figures</h2>" if not sections else "<h2>Other figures</h2>")
        body.append(figure_block(root, rest))
    if jsons:
        body += files_list(root, jsons, validates)
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{PAGE_STYLE}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")
    out = os.path.join(root, "index.html")
    write_text(out, page)
    print(f"# wrote {out}")
