#!/usr/bin/env python3
"""The figures of sax's results, as PNG files drawn by matplotlib, and one HTML page
that shows them.

  plots.py validate VALIDATE_JSON --out DIR     DIR/scatter.png, DIR/breakdown.png (sax validate --json)
  plots.py coll BENCH_JSON... [--calibration K] --out FILE.png
                                                bus bandwidth by size (sax bench coll --json), with
                                                the calibration's alpha-beta line where K is given
  plots.py timeline MERGED_TRACE --out FILE.png [--step N]
                                                one step of a merged trace (sax trace merge), a row
                                                per rank and communication lane
  plots.py codesign CODESIGN_JSON --out FILE.png
                                                the MoE variants of sax codesign --json: tokens/s
                                                (or predicted loss) against total parameters, the
                                                Pareto set joined
  plots.py report DIR [--title T]               DIR/index.html: validate*.json tables, every PNG,
                                                links to the JSON files and merged traces

Exit codes: 0 done; 2 bad input (one line naming the file and what was expected); 3 matplotlib
is not importable (callers such as `sax bench coll --plots` report "plots skipped").
Every file is written whole or not at all (a temporary file beside it, then renamed).
"""
import argparse
import base64
import datetime
import html
import json
import math
import os
import re
import statistics
import textwrap
import sys

PROG = "plots.py"
# Debian's python3-matplotlib lives under /usr/bin/python3; a python3 found first on PATH (pyenv,
# a virtualenv) may lack it.
SYSTEM_PYTHON = "/usr/bin/python3"

# One colour per category, the same in every figure (validate's breakdown, the timeline), so that
# a reader learns them once. Communication dimensions are blues/greens/purples, waiting is grey.
CATEGORY_COLOURS = {
    "compute": "#4c72b0",
    "optimizer": "#8172b3",
    "tp_comm": "#dd8452",
    "cp_comm": "#c44e52",
    "ep_comm": "#937860",
    "dp_comm": "#55a868",
    "pp_comm": "#da8bc3",
    "idle": "#b0b0b0",
    "other": "#ccb974",
}
CATEGORY_ORDER = list(CATEGORY_COLOURS)
CATEGORY_NAMES = {
    "compute": "compute",
    "optimizer": "optimizer",
    "tp_comm": "TP comm",
    "cp_comm": "CP comm",
    "ep_comm": "EP comm",
    "dp_comm": "DP comm",
    "pp_comm": "PP comm",
    "idle": "idle",
    "other": "other",
}


class InputError(Exception):
    """Bad input: becomes one line on stderr and exit 2."""

    def __init__(self, file, path, expected):
        where = file + (": " + path if path else "")
        super().__init__(f"{where}: expected {expected}")


class MatplotlibMissing(Exception):
    pass


def fail(code, message):
    sys.stderr.write(f"{PROG}: {message}\n")
    sys.exit(code)


# ---------------------------------------------------------------------------------------------
# Reading input: every field checked where it is read, so that an error names the file and the
# JSON path (as sax's own InputError does).


def load_json(file, what):
    try:
        with open(file, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise InputError(file, "", what + " (no such file)")
    except IsADirectoryError:
        raise InputError(file, "", what + " (it is a directory)")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(file, "", f"{what} (not JSON: {e})")
    except OSError as e:
        raise InputError(file, "", f"{what} (cannot read: {e.strerror})")


class Reader:
    """A JSON value with its file and path, for reading fields with errors that name them."""

    def __init__(self, value, file, path=""):
        self.value, self.file, self.path = value, file, path

    def fail(self, key, expected):
        raise InputError(self.file, self.at(key), expected)

    def at(self, key):
        return f"{self.path}/{key}"

    def get(self, key, optional=False):
        if not isinstance(self.value, dict):
            raise InputError(self.file, self.path or "/", "an object")
        if key not in self.value:
            if optional:
                return None
            self.fail(key, "a field '" + str(key) + "'")
        return self.value[key]

    def typed(self, key, optional, ok, expected):
        """The value at key where ok(value) holds, else one error naming it; None when optional and absent."""
        v = self.get(key, optional)
        if v is None and optional:
            return None
        if not ok(v):
            self.fail(key, expected)
        return v

    def obj(self, key, optional=False):
        v = self.typed(key, optional, lambda x: isinstance(x, dict), "an object")
        return None if v is None else Reader(v, self.file, self.at(key))

    def array(self, key):
        v = self.typed(key, False, lambda x: isinstance(x, list), "an array")
        return [Reader(x, self.file, f"{self.at(key)}/{i}") for i, x in enumerate(v)]

    def number(self, key, optional=False, minimum=None):
        v = self.typed(key, optional, lambda x: not isinstance(x, bool) and isinstance(x, (int, float))
                       and math.isfinite(x), "a number")
        if v is None:
            return None
        if minimum is not None and v < minimum:
            self.fail(key, f"a number >= {minimum}, got {v}")
        return float(v)

    def string(self, key, optional=False):
        return self.typed(key, optional, lambda x: isinstance(x, str), "a string")


def read_breakdown(r, key):
    b = r.obj(key)
    out = {}
    for k, v in b.value.items():
        out[k] = b.number(k, minimum=0)
    return out


def read_validate(file):
    """A `sax validate --json` document, checked: inputs, layouts, summary."""
    doc = Reader(load_json(file, "a sax validate --json file"), file)
    if not isinstance(doc.value, dict):
        raise InputError(file, "", "a sax validate --json file (a JSON object)")
    if doc.get("version") != 1:
        doc.fail("version", "1 (a sax validate --json file)")
    inputs = doc.obj("inputs")
    v = {
        "file": file,
        "inputs": {
            "cluster": inputs.string("cluster", True) or "",
            "model": inputs.string("model", True) or "",
            "calibration": inputs.string("calibration", True),
            "cost_source": inputs.string("cost_source", True) or "",
            "emulation": inputs.string("emulation"),
            "emulation_note": inputs.string("emulation_note", True) or "",
            "technology": inputs.string("technology", True),
            "steps": inputs.number("steps", True),
            "warmup": inputs.number("warmup", True),
        },
        "feasible": doc.number("feasible", True),
        "layouts": [],
    }
    layouts = doc.array("layouts")
    if not layouts:
        doc.fail("layouts", "at least one layout")
    for lr in layouts:
        lay = {
            "label": lr.string("label"),
            "explorer_rank": lr.number("explorer_rank", True),
            "picked": lr.string("picked", True) or "",
            "describe": lr.string("describe", True) or "",
            "options": lr.string("options", True) or "",
            "error_pct": lr.number("error_pct", True),
            "run_json": lr.string("run_json", True),
            "trace_dir": lr.string("trace_dir", True),
        }
        p = lr.obj("predicted")
        lay["predicted"] = {"step_time_s": p.number("step_time_s", minimum=0), "breakdown_s": read_breakdown(p, "breakdown_s")}
        # A layout whose run failed has no measurement: it is shown as predicted only.
        m = lr.obj("measured", optional=True)
        if m is None:
            lay["measured"] = None
        else:
            st = m.obj("step_time_s")
            lay["measured"] = {
                "median": st.number("median", minimum=0),
                "min": st.number("min", minimum=0),
                "max": st.number("max", minimum=0),
                "breakdown_s": read_breakdown(m, "breakdown_s"),
            }
        w = lr.obj("worst_term", optional=True)
        lay["worst_term"] = None if w is None else {
            "term": w.string("term"), "predicted_s": w.number("predicted_s"), "measured_s": w.number("measured_s")}
        v["layouts"].append(lay)
    s = doc.obj("summary")
    v["summary"] = {
        "layouts": s.number("layouts", True),
        "failed": s.number("failed", True),
        "mape_pct": s.number("mape_pct", True),
        "kendall_tau": s.number("kendall_tau", True),
        "top1_regret_pct": s.number("top1_regret_pct", True),
        "explorer_pick": s.string("explorer_pick", True),
        "best_measured": s.string("best_measured", True),
    }
    return v


# ---------------------------------------------------------------------------------------------
# Writing: whole or not at all.


def import_pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: files only
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise MatplotlibMissing(str(e))
    return plt


def save_figure(fig, file):
    d = os.path.dirname(os.path.abspath(file))
    if not os.path.isdir(d):
        raise InputError(file, "", "a path in an existing directory")
    tmp = os.path.join(d, f".{os.path.basename(file)}.tmp.{os.getpid()}")
    try:
        fig.savefig(tmp, format="png", dpi=110)
        os.replace(tmp, file)
    except OSError as e:
        raise InputError(file, "", f"a writable path ({e.strerror})")
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_text(file, text):
    tmp = os.path.join(os.path.dirname(os.path.abspath(file)), f".{os.path.basename(file)}.tmp.{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, file)
    except OSError as e:
        raise InputError(file, "", f"a writable path ({e.strerror})")
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def out_dir(path):
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise InputError(path, "", f"a directory it can create or write ({e.strerror})")
    if not os.path.isdir(path):
        raise InputError(path, "", "a directory")
    return path


def fmt(x, spec, none="n/a"):
    return none if x is None else format(x, spec)


# ---------------------------------------------------------------------------------------------
# Label placement without extra packages: each label goes to whichever of a few offsets around
# its point overlaps the labels already placed, the points and the axes' edge the least.


def place_labels(ax, fig, points, texts, fontsize=9):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    offsets = [(7, 5), (7, -12), (-7, 5), (-7, -12), (0, 10), (0, -16), (14, 0), (-14, 0), (12, 14), (-12, -20)]
    point_boxes = []
    for x, y in points:
        px, py = ax.transData.transform((x, y))
        point_boxes.append((px - 4, py - 4, px + 4, py + 4))
    axbox = ax.get_window_extent(renderer)
    placed = []

    def overlap(a, b):
        w = min(a[2], b[2]) - max(a[0], b[0])
        h = min(a[3], b[3]) - max(a[1], b[1])
        return w * h if w > 0 and h > 0 else 0.0

    for i, ((x, y), text) in enumerate(zip(points, texts)):
        best = None
        for dx, dy in offsets:
            ha = "left" if dx > 0 else "right" if dx < 0 else "center"
            ann = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize, ha=ha,
                              va="bottom")
            bb = ann.get_window_extent(renderer)
            box = (bb.x0, bb.y0, bb.x1, bb.y1)
            cost = sum(overlap(box, p) for p in placed) * 4
            cost += sum(overlap(box, p) for j, p in enumerate(point_boxes) if j != i)
            outside = bb.width * bb.height - overlap(box, (axbox.x0, axbox.y0, axbox.x1, axbox.y1))
            cost += outside * 8
            ann.remove()
            if best is None or cost < best[0]:
                best = (cost, dx, dy, ha, box)
            if cost == 0:
                break
        _, dx, dy, ha, box = best
        ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize, ha=ha, va="bottom")
        placed.append(box)


# ---------------------------------------------------------------------------------------------
# validate


def short_describe(describe):
    """'TP2 CP1 EP1 PP2 DP1 mbs2' → 'TP2 PP2 mbs2': the degrees of 1 say nothing on a tick label."""
    kept = [t for t in describe.split() if not re.fullmatch(r"[A-Z]+1", t)]
    return " ".join(kept) if kept else describe


def time_unit(values):
    return ("ms", 1e3) if max(values) < 1.0 else ("s", 1.0)


def summary_title(v):
    s = v["summary"]
    return (f"MAPE {fmt(s['mape_pct'], '.1f')} %   Kendall τ {fmt(s['kendall_tau'], '.2f')}   "
            f"top-1 regret {fmt(s['top1_regret_pct'], '.1f')} %   emulation: {v['inputs']['emulation']}")


def plot_validate(v, out):
    plt = import_pyplot()
    measured = [l for l in v["layouts"] if l["measured"] is not None]
    scatter_png = os.path.join(out, "scatter.png")
    breakdown_png = os.path.join(out, "breakdown.png")

    # Scatter: measured median on x (its min..max as the error bar), predicted on y.
    allv = [l["predicted"]["step_time_s"] for l in v["layouts"]]
    allv += [l["measured"]["max"] for l in measured] + [l["measured"]["min"] for l in measured]
    unit, k = time_unit(allv)
    fig, ax = plt.subplots(figsize=(8, 7))
    lo, hi = min(allv) * k, max(allv) * k
    pad = (hi - lo) * 0.12 or hi * 0.1
    lo, hi = max(0.0, lo - pad), hi + pad
    xs = [lo, hi]
    ax.fill_between(xs, [x * 0.9 for x in xs], [x * 1.1 for x in xs], color="#4c72b0", alpha=0.12, lw=0,
                    label="±10 %")
    ax.plot(xs, xs, color="#4c72b0", lw=1, ls="--", label="predicted = measured")
    picked_style = {"top": ("o", "#dd8452", "explorer's top"), "spread": ("s", "#55a868", "spread over the ranking"),
                    "given": ("D", "#8172b3", "given")}
    shown = set()
    pts, texts = [], []
    for l in measured:
        m = l["measured"]
        marker, colour, name = picked_style.get(l["picked"], ("o", "#555555", l["picked"] or "layout"))
        x, y = m["median"] * k, l["predicted"]["step_time_s"] * k
        ax.errorbar([x], [y], xerr=[[x - m["min"] * k], [m["max"] * k - x]], fmt=marker, color=colour, ms=7,
                    capsize=3, elinewidth=1.2, label=None if name in shown else name)
        shown.add(name)
        pts.append((x, y))
        texts.append(l["label"])
    s = v["summary"]
    for label, style, name in ((s["explorer_pick"], dict(marker="o", s=260, facecolors="none", edgecolors="black",
                                                            linewidths=1.2), "explorer's pick"),
                               (s["best_measured"], dict(marker="*", s=90, color="gold", edgecolors="black",
                                                         linewidths=0.6, zorder=5), "best measured")):
        hit = [p for p, l in zip(pts, measured) if l["label"] == label]
        if hit:
            ax.scatter([hit[0][0]], [hit[0][1]], label=f"{name} ({label})", **style)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    ax.set_xlabel(f"measured step time ({unit}; median, bar = min..max over {fmt(v['inputs']['steps'], '.0f', '?')} steps)")
    ax.set_ylabel(f"predicted step time ({unit})")
    ax.grid(True, alpha=0.3)
    ax.set_title("sax validate: predicted vs measured step time\n" + summary_title(v), fontsize=10.5)
    ax.legend(loc="lower right", fontsize=8.5, framealpha=0.9)  # points sit along y = x: the corner below it is emptiest
    missing = len(v["layouts"]) - len(measured)
    if missing:
        ax.text(0.99, 0.01, f"{missing} layout(s) not measured (run failed)", transform=ax.transAxes, ha="right",
                va="bottom", fontsize=8, color="#a00")
    fig.tight_layout()
    place_labels(ax, fig, pts, texts)
    save_figure(fig, scatter_png)
    plt.close(fig)

    # Breakdown: for each layout a predicted bar and a measured bar, stacked by category.
    present = [c for c in CATEGORY_ORDER if any(
        l["predicted"]["breakdown_s"].get(c, 0) > 0 or (l["measured"] and l["measured"]["breakdown_s"].get(c, 0) > 0)
        for l in v["layouts"])]
    # Categories sax does not know yet still appear, after the known ones, in a fixed grey.
    extra = sorted({c for l in v["layouts"] for b in (l["predicted"]["breakdown_s"],
                                                      l["measured"]["breakdown_s"] if l["measured"] else {})
                    for c, x in b.items() if c not in CATEGORY_COLOURS and x > 0})
    cats = present + extra
    steps = [l["predicted"]["step_time_s"] for l in v["layouts"]] + [l["measured"]["median"] for l in measured]
    sums = [sum(l["predicted"]["breakdown_s"].values()) for l in v["layouts"]]
    sums += [sum(l["measured"]["breakdown_s"].values()) for l in measured]
    unit, k = time_unit(steps + sums)
    n = len(v["layouts"])
    describes = [l["describe"] for l in v["layouts"]]
    labels = []
    for l in v["layouts"]:
        err = "" if l["error_pct"] is None else f"\n{l['error_pct']:+.1f} %"
        # Layouts of the same degrees differ in their options (order, schedule): say which.
        opts = ""
        if describes.count(l["describe"]) > 1 and l["options"]:
            opts = "\n" + "\n".join(textwrap.wrap(l["options"], 18))
        labels.append(f"{l['label']}\n{short_describe(l['describe'])}{opts}{err}")
    # Room under the axes for the tallest label (8 pt lines) below the P/M ticks.
    below_in = 0.45 + 0.15 * max(x.count("\n") + 1 for x in labels)
    height = 4.8 + below_in
    fig, ax = plt.subplots(figsize=(max(8.0, 1.25 * n + 3), height))
    width = 0.38
    for i, l in enumerate(v["layouts"]):
        for side, (which, b, step) in enumerate((
                ("pred", l["predicted"]["breakdown_s"], l["predicted"]["step_time_s"]),
                ("meas", l["measured"]["breakdown_s"] if l["measured"] else None,
                 l["measured"]["median"] if l["measured"] else None))):
            x = i + (side - 0.5) * (width + 0.03)
            if b is None:
                ax.text(x, 0, "not\nmeasured", ha="center", va="bottom", fontsize=7, color="#a00")
                continue
            bottom = 0.0
            for c in cats:
                h = b.get(c, 0.0) * k
                if h > 0:
                    ax.bar(x, h, width, bottom=bottom, color=CATEGORY_COLOURS.get(c, "#7f7f7f"), edgecolor="white",
                           linewidth=0.5)
                    bottom += h
            ax.plot([x - width / 2, x + width / 2], [step * k, step * k], color="black", lw=1.6)
    handles = [plt.Rectangle((0, 0), 1, 1, color=CATEGORY_COLOURS.get(c, "#7f7f7f")) for c in cats]
    names = [CATEGORY_NAMES.get(c, c) for c in cats]
    handles.append(plt.Line2D([0], [0], color="black", lw=1.6))
    names.append("step time")
    ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    # Two rows of tick labels: which bar is which (P/M) under each bar, the layout under each pair.
    ax.set_xticks([i + (s - 0.5) * (width + 0.03) for i in range(n) for s in (0, 1)])
    ax.set_xticklabels(["P", "M"] * n, fontsize=8)
    ax.tick_params(axis="x", length=0, pad=2)
    for i, label in enumerate(labels):
        ax.annotate(label, (i, 0), xycoords=("data", "axes fraction"), xytext=(0, -16), textcoords="offset points",
                    ha="center", va="top", fontsize=8)
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylabel(f"time per step ({unit})")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title("Step breakdown per layout: P = predicted, M = measured (median step); error = (P − M) / M\n"
                 + summary_title(v), fontsize=10.5)
    fig.tight_layout()
    fig.subplots_adjust(bottom=below_in / height)
    save_figure(fig, breakdown_png)
    plt.close(fig)
    return [scatter_png, breakdown_png]


def cmd_validate(a):
    v = read_validate(a.validate_json)
    out = out_dir(a.out)
    for f in plot_validate(v, out):
        print(f"# wrote {f}")


# ---------------------------------------------------------------------------------------------
# codesign: the MoE variants of sax codesign, and the Pareto set.

def read_codesign(file):
    doc = Reader(load_json(file, "a sax codesign --json file"), file)
    if not isinstance(doc.value, dict) or doc.value.get("version") != 1 or "variants" not in doc.value:
        raise InputError(file, "/version", "1 (a sax codesign --json file)")
    inputs = doc.obj("inputs")
    axes = doc.array("pareto_axes")
    with_loss = bool(axes) and axes[0].value.startswith("predicted_loss")
    rows = []
    for v in doc.array("variants"):
        e, k = int(v.number("experts", minimum=1)), int(v.number("topk", minimum=1))
        pred = v.obj("predicted", optional=True)
        if pred is None:
            continue  # left out: no variant, over the cap, or nothing fits
        rows.append({
            "name": f"E{e} k{k}",
            "total": v.number("total_params", minimum=0),
            "tokens_per_s": pred.number("tokens_per_s", minimum=0),
            "loss": v.number("predicted_loss") if with_loss else None,
            "pareto": bool(v.get("pareto")),
            "dominant": v.string("dominant_term"),
        })
    if not rows:
        raise InputError(file, "/variants", "at least one variant with a prediction")
    return {"model": inputs.string("model"), "cluster": inputs.string("cluster"), "with_loss": with_loss, "rows": rows}


def plot_codesign(c, out):
    plt = import_pyplot()
    fig, ax = plt.subplots(figsize=(9, 6.5))
    ykey = "loss" if c["with_loss"] else "tokens_per_s"
    ylabel = "predicted loss (lower is better)" if c["with_loss"] else "tokens/s (higher is better)"
    xs = [r["total"] / 1e9 for r in c["rows"]]
    ys = [r[ykey] for r in c["rows"]]
    others = [(x, y) for x, y, r in zip(xs, ys, c["rows"]) if not r["pareto"]]
    front = sorted((x, y) for x, y, r in zip(xs, ys, c["rows"]) if r["pareto"])
    if others:
        ax.scatter([p[0] for p in others], [p[1] for p in others], s=36, color="#8c8c8c", label="variant", zorder=2)
    ax.plot([p[0] for p in front], [p[1] for p in front], "-o", color="#dd8452", ms=8, lw=1.5,
            label="Pareto set", zorder=3)
    ax.set_xscale("log")
    ax.set_xlabel("total parameters (billions, log)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"{os.path.basename(c['model'])} on {os.path.basename(c['cluster'])}: MoE variants on one budget",
                 fontsize=11)
    place_labels(ax, fig, list(zip(xs, ys)), [r["name"] for r in c["rows"]], fontsize=8)
    ax.legend(loc="best", fontsize=9)
    fig.tight_layout()
    save_figure(fig, out)
    return out


def cmd_codesign(a):
    c = read_codesign(a.codesign_json)
    print(f"# wrote {plot_codesign(c, a.out)}")


# ---------------------------------------------------------------------------------------------
# coll: bus bandwidth by size, and the calibration's line.

# spec/collective.hpp's ring algorithm, the one the calibration fits (calibration/fit.cpp):
# an op over n ranks moving `bytes` takes steps(n)·α + bus_factor(n)·bytes·β. Kept in step with
# ring_algorithm(); broadcast is not priced, so it has no calibration entry and no line.
def ring_algorithm(op, n):
    if op == "all_reduce":
        return 2 * (n - 1), 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return n - 1, (n - 1) / n
    if op == "broadcast":
        return n - 1, 1.0
    return 1.0, 1.0  # send_recv, send, recv


PRICED_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
LINK_CLASSES = ("intra_node", "intra_building", "cross_building")
BENCH_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")


def priced_as(op):
    return "send_recv" if op in ("send", "recv") else op


def fitted_busbw_gbps(ab, op, ranks, nbytes):
    """busbw the calibration's α-β implies: the predicted time as calibration/fit.cpp's
    predict_us() has it (µs; β in ns per bus byte), turned into bus bandwidth as bench coll turns
    a measured time into it (algbw = bytes / time, busbw = algbw × bus_factor)."""
    steps, bus_factor = ring_algorithm(op, ranks)
    time_us = steps * ab["alpha_us"] + bus_factor * nbytes * ab["beta_ns_per_byte"] * 1e-3
    return nbytes / (time_us * 1e3) * bus_factor if time_us > 0 else float("inf")


def read_bench(file):
    doc = Reader(load_json(file, "a sax bench coll --json file"), file)
    if not isinstance(doc.value, dict) or doc.value.get("version") != 2:
        raise InputError(file, "/version", "2 (a sax bench coll --json file)")
    env = doc.obj("env", optional=True)
    config = doc.obj("config", optional=True)
    b = {
        "file": file,
        "link_class": env.string("link_class", True) if env else None,
        "group": (config.string("group", True) if config else None) or "world",
        "emulation": (env.string("emulation", True) if env else None) or "none",
        "backend": (env.string("backend", True) if env else None) or "",
        # 1: one group at a time; 0 (all) or more: the groups shared the links they cross.
        "groups_at_once": int(config.number("groups_at_once", True) or 0) if config else 0,
        "results": [],
    }
    for r in doc.array("results"):
        op = r.string("op")
        if op not in BENCH_OPS:
            r.fail("op", "an op of sax bench coll (" + ", ".join(BENCH_OPS) + "), got '" + op + "'")
        b["results"].append({
            "op": op,
            "bytes": r.number("bytes", minimum=1),
            "ranks": int(r.number("ranks", minimum=1)),
            "in_place": bool(r.get("in_place", True)),
            "time_us": r.number("time_us", minimum=0),
            "busbw_gbps": r.number("busbw_gbps", minimum=0),
            "p50_us": r.number("p50_us", True, minimum=0),
            "p99_us": r.number("p99_us", True, minimum=0),
        })
    if not b["results"]:
        doc.fail("results", "at least one result")
    return b


def read_calibration(file):
    doc = Reader(load_json(file, "a sax calibrate calibration file"), file)
    if not isinstance(doc.value, dict) or doc.value.get("version") != 1:
        raise InputError(file, "/version", "1 (a calibration file of sax calibrate)")
    links = doc.obj("links", optional=True)
    out = {}
    # The calibrator divides the cross-building β by the boundary's oversubscription (a device's
    # own bandwidth); a sweep with every group crossing at once shares it again.
    over = doc.obj("cross_oversubscription", optional=True)
    out["cross_oversubscription"] = over.number("value", minimum=1) if over else 1.0
    if links is None:
        return out
    for lc, v in links.value.items():
        if lc not in LINK_CLASSES:
            links.fail(lc, "a link class (" + ", ".join(LINK_CLASSES) + ")")
        ops = links.obj(lc)
        for op in ops.value:
            if op not in PRICED_OPS:
                ops.fail(op, "a priced op (" + ", ".join(PRICED_OPS) + ")")
            e = ops.obj(op)
            fit = e.obj("fit", optional=True)
            out[(lc, op)] = {"alpha_us": e.number("alpha_us", minimum=0),
                             "beta_ns_per_byte": e.number("beta_ns_per_byte", minimum=0),
                             "r2": fit.number("r2", True) if fit else None}
    return out


def format_bytes(x, _pos=None):
    for unit, k in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if x >= k:
            v = x / k
            return f"{v:.0f}{unit}" if abs(v - round(v)) < 1e-9 else f"{v:.3g}{unit}"
    return f"{x:.0f}"


def plot_coll(benches, calibration, cal_file, out):
    plt = import_pyplot()
    from matplotlib.ticker import FuncFormatter, LogLocator

    ops = [op for op in BENCH_OPS if any(r["op"] == op for b in benches for r in b["results"])]
    # A series: one group kind across one link class on one group size; its colour is the same
    # in every panel.
    series = []
    for b in benches:
        for r in b["results"]:
            key = (b["group"], b["link_class"], r["ranks"])
            if key not in series:
                series.append(key)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {key: colours[i % len(colours)] for i, key in enumerate(series)}
    cols = 1 if len(ops) == 1 else 2 if len(ops) <= 4 else 3
    rows = math.ceil(len(ops) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.6 * cols + 0.6, 4.2 * rows + 1.2), squeeze=False)
    notes = set()
    for idx, op in enumerate(ops):
        ax = axes[idx // cols][idx % cols]
        for key in series:
            group, lc, ranks = key
            pts = [r for b in benches if (b["group"], b["link_class"]) == (group, lc) for r in b["results"]
                   if r["op"] == op and r["ranks"] == ranks]
            if not pts:
                continue
            name = f"{group}, {lc or 'link class unknown'}, {ranks} ranks"
            both = len({r["in_place"] for r in pts}) > 1
            for in_place in (False, True):
                sel = sorted((r for r in pts if r["in_place"] == in_place), key=lambda r: r["bytes"])
                if not sel:
                    continue
                xs = [r["bytes"] for r in sel]
                ys = [r["busbw_gbps"] for r in sel]
                face = "none" if (both and in_place) else colour[key]
                ax.plot(xs, ys, ls="none", marker="o", ms=5, mfc=face, mec=colour[key],
                        label=name + (" (in place)" if both and in_place else ""))
                # The spread: busbw at the median and the 99th-percentile sample's time.
                for r in sel:
                    if r["p50_us"] and r["p99_us"]:
                        f = r["busbw_gbps"] * r["time_us"]  # busbw × time is constant for one size
                        ax.plot([r["bytes"]] * 2, [f / r["p99_us"], f / r["p50_us"]], color=colour[key], lw=0.8,
                                alpha=0.6)
            if calibration is None:
                continue
            ab = calibration.get((lc, priced_as(op))) if lc else None
            if ab is None:
                notes.add(f"{op}: the cost model does not price it, no fit" if priced_as(op) not in PRICED_OPS
                          else f"{op} on {lc}: no entry in the calibration" if lc
                          else f"{op}: the bench ran without --cluster (no link class), no fit")
                continue
            shared = 1.0
            if lc == "cross_building" and any(b["groups_at_once"] != 1 for b in benches
                                              if (b["group"], b["link_class"]) == (group, lc)):
                shared = calibration["cross_oversubscription"]
            if shared != 1.0:
                ab = dict(ab, beta_ns_per_byte=ab["beta_ns_per_byte"] * shared)
                notes.add(f"{lc}: every group crossed at once, so the line's β is the calibration's (a device's own) "
                          f"× {shared:.2f}, the boundary's oversubscription, as the cost model shares it")
            lo, hi = min(r["bytes"] for r in pts), max(r["bytes"] for r in pts)
            xs = [lo * (hi / lo) ** (i / 60) for i in range(61)] if hi > lo else [lo]
            r2 = "" if ab["r2"] is None else f", r² {ab['r2']:.2f}"
            inv_beta = 1 / ab["beta_ns_per_byte"] if ab["beta_ns_per_byte"] > 0 else float("inf")
            ax.plot(xs, [fitted_busbw_gbps(ab, op, ranks, x) for x in xs], color=colour[key], lw=1.4, ls="--",
                    label=f"fit: α {ab['alpha_us']:.3g} µs, 1/β {inv_beta:.3g} GB/s{r2}"
                    + (f", β×{shared:.2f} shared" if shared != 1.0 else ""))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=4))
        ax.xaxis.set_major_formatter(FuncFormatter(format_bytes))
        ax.set_title(op, fontsize=11)
        ax.set_xlabel("size (bytes, nccl-tests' convention)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7.5, loc="best")
    for idx in range(len(ops), rows * cols):
        axes[idx // cols][idx % cols].set_visible(False)
    emul = sorted({b["emulation"] for b in benches})
    title = "sax bench coll: bus bandwidth by size (points: mean time; bars: p50..p99)   emulation: " + ", ".join(emul)
    if cal_file:
        title += "\ndashed: the calibration's α-β (" + os.path.basename(cal_file) + "): time = steps·α + bus_factor·bytes·β"
    fig.suptitle(title, fontsize=10.5)
    if notes:
        fig.text(0.01, 0.005, "; ".join(sorted(notes)), fontsize=7.5, color="#555")
    fig.tight_layout(rect=(0, 0.02 if notes else 0, 1, 1))
    save_figure(fig, out)
    plt.close(fig)


def cmd_coll(a):
    benches = [read_bench(f) for f in a.bench_json]
    calibration = read_calibration(a.calibration) if a.calibration else None
    plot_coll(benches, calibration, a.calibration, a.out)
    print(f"# wrote {a.out}")


# ---------------------------------------------------------------------------------------------
# timeline: one step of a merged trace (sax trace merge of sax run --trace), a row per rank's
# executor thread and per communication lane (harness/tracer.hpp).

TIMELINE_EXTRA_COLOURS = {"communication": "#64b5cd", "memcpy": "#8c8c8c", "memset": "#a6a6a6",
                          "runtime": "#e0e0e0", "range": "#d0d0f0", "other": "#ccb974"}


def span_category(cat, name):
    """The breakdown category of a span: compute (optimizer apart), '<dim>_comm' from a message's
    name '<dim>.<op>', idle; other trace categories (device copies, API calls) as they are."""
    if cat == "compute":
        return "optimizer" if name.startswith("optimizer") else "compute"
    if cat == "communication":
        dim = name.split(".", 1)[0]
        return f"{dim}_comm" if f"{dim}_comm" in CATEGORY_COLOURS else "communication"
    if cat == "idle":
        return "idle"
    return cat or "other"


def read_trace(file):
    doc = load_json(file, "a Chrome trace (sax trace merge)")
    if isinstance(doc, list):  # the Trace Event Format also allows a bare array
        events = doc
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events = doc["traceEvents"]
    else:
        raise InputError(file, "/traceEvents", "an array of trace events (sax trace merge output)")
    procs, threads, spans = {}, {}, []
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise InputError(file, f"/traceEvents/{i}", "an event object")
        ph = e.get("ph")
        if ph == "M":
            args = e.get("args") or {}
            if e.get("name") == "process_name":
                procs[e.get("pid")] = str(args.get("name", ""))
            elif e.get("name") == "thread_name":
                threads[(e.get("pid"), e.get("tid"))] = str(args.get("name", ""))
        elif ph == "X":
            ts, dur = e.get("ts"), e.get("dur")
            for key, v in (("ts", ts), ("dur", dur)):
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise InputError(file, f"/traceEvents/{i}/{key}", "a number (µs)")
            spans.append((e.get("pid"), e.get("tid"), str(e.get("cat", "")), str(e.get("name", "")), float(ts),
                          float(dur)))
    return procs, threads, spans


def plot_timeline(file, out, step):
    procs, threads, spans = read_trace(file)
    steps_of = {}
    for pid, tid, cat, name, ts, dur in spans:
        if cat == "step":
            steps_of.setdefault(pid, []).append((ts, ts + dur))
    if not steps_of:
        raise InputError(file, "/traceEvents", "step events (cat 'step'): a trace of sax run --trace")
    for v in steps_of.values():
        v.sort()
    count = min(len(v) for v in steps_of.values())
    # The job's step k runs from the first rank's start to the last rank's end.
    windows = [(min(v[k][0] for v in steps_of.values()), max(v[k][1] for v in steps_of.values())) for k in range(count)]
    if step is None:
        # As sax run picks the step it reports: the one nearest the median.
        med = statistics.median(e - s for s, e in windows)
        step = min(range(count), key=lambda k: abs(windows[k][1] - windows[k][0] - med)) + 1
        how = "nearest the median"
    else:
        if not 1 <= step <= count:
            raise InputError(file, "", f"--step between 1 and {count} (its measured steps), got {step}")
        how = "--step"
    t0, t1 = windows[step - 1]

    plt = import_pyplot()
    # Rows: per rank (pid order), the thread that holds its steps (the executor) first, then its
    # other lanes by thread id; only rows with something in the step.
    in_step = [s for s in spans if s[2] != "step" and s[4] < t1 and s[4] + s[5] > t0]
    exec_tid = {}
    for pid, tid, cat, name, ts, dur in spans:
        if cat == "step":
            exec_tid[pid] = tid
    lanes = sorted({(s[0], s[1]) for s in in_step} | {(p, t) for p, t in exec_tid.items()},
                   key=lambda pt: (pt[0], pt[1] != exec_tid.get(pt[0]), pt[1]))
    row = {lane: i for i, lane in enumerate(lanes)}
    by = {}
    for pid, tid, cat, name, ts, dur in in_step:
        c = span_category(cat, name)
        s, e = max(ts, t0), min(ts + dur, t1)
        by.setdefault((row[(pid, tid)], c), []).append(((s - t0) * 1e-3, (e - s) * 1e-3))
    height = max(3.5, 0.36 * len(lanes) + 1.8)
    fig, ax = plt.subplots(figsize=(14, height))
    for (r, c), bars in by.items():
        colour = CATEGORY_COLOURS.get(c) or TIMELINE_EXTRA_COLOURS.get(c, "#7f7f7f")
        ax.broken_barh(bars, (r - 0.4, 0.8), facecolors=colour, edgecolors="none", linewidth=0)
    # Each rank's rows on a band of their own (alternate ranks shaded), and the rank's own step
    # as a thin line under its executor row: ranks start and end the step at different times.
    pids = list(dict.fromkeys(pid for pid, _ in lanes))
    for k, pid in enumerate(pids):
        rs = [r for (p, _), r in row.items() if p == pid]
        if k % 2:
            ax.axhspan(min(rs) - 0.5, max(rs) + 0.5, color="#f2f2f2", zorder=0, lw=0)
        v = steps_of.get(pid, [])
        if pid in exec_tid and step - 1 < len(v):
            s, e = v[step - 1]
            r = row[(pid, exec_tid[pid])]
            ax.plot([(s - t0) * 1e-3, (e - t0) * 1e-3], [r + 0.46] * 2, color="black", lw=1.0)

    def lane_name(pid, tid):
        rank = procs.get(pid, f"pid {pid}")
        if tid == exec_tid.get(pid):
            return f"{rank}: executor"
        return "  " + threads.get((pid, tid), f"thread {tid}")

    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([lane_name(p, t) for p, t in lanes], fontsize=8.5)
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlim(0, (t1 - t0) * 1e-3)
    ax.set_xlabel("time since the step's first start (ms)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    cats = sorted({c for _, c in by}, key=lambda c: (CATEGORY_ORDER + list(TIMELINE_EXTRA_COLOURS)).index(c)
                  if c in CATEGORY_ORDER or c in TIMELINE_EXTRA_COLOURS else 99)
    handles = [plt.Rectangle((0, 0), 1, 1, color=CATEGORY_COLOURS.get(c) or TIMELINE_EXTRA_COLOURS.get(c, "#7f7f7f"))
               for c in cats]
    handles.append(plt.Line2D([0], [0], color="black", lw=1.2))
    ax.legend(handles, [CATEGORY_NAMES.get(c, c) for c in cats] + ["the rank's step"], loc="upper left",
              bbox_to_anchor=(1.005, 1.0), fontsize=8.5, frameon=False)
    ax.set_title(f"{os.path.basename(file)}: step {step} of {count} ({how}), {(t1 - t0) * 1e-3:.1f} ms; "
                 "executor rows: what the step waited on; lane rows: each message from issue to completion",
                 fontsize=10)
    fig.tight_layout()
    save_figure(fig, out)
    plt.close(fig)


def cmd_timeline(a):
    plot_timeline(a.merged_trace, a.out, a.step)
    print(f"# wrote {a.out}")


# ---------------------------------------------------------------------------------------------
# report: DIR/index.html, one self-contained page (styles inline, figures embedded as data URIs,
# nothing fetched) over whatever DIR holds.

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


def validate_section(v, rel, root):
    s, i = v["summary"], v["inputs"]
    out = [f'<h2>Validation: {link(rel)}</h2>']
    err_class = "good" if s["mape_pct"] is not None and s["mape_pct"] <= 10 else "bad"
    out.append('<div class="figures-summary">')
    for name, value, cls in (("MAPE", fmt(s["mape_pct"], ".1f") + " %", err_class),
                             ("Kendall τ", fmt(s["kendall_tau"], ".2f"), ""),
                             ("top-1 regret", fmt(s["top1_regret_pct"], ".1f") + " %", ""),
                             ("explorer's pick", s["explorer_pick"] or "n/a", ""),
                             ("best measured", s["best_measured"] or "n/a", ""),
                             ("layouts measured", fmt(s["layouts"], ".0f", str(len(v["layouts"]))), ""),
                             ("runs failed", fmt(s["failed"], ".0f"), "bad" if s["failed"] else "")):
        if name == "runs failed" and not s["failed"]:
            continue
        out.append(f'<div class="figure-box">{esc(name)}<b class="{cls}">{esc(value)}</b></div>')
    out.append("</div>")
    rows = [("cluster", i["cluster"]), ("model", i["model"]), ("costs", i["cost_source"] or (i["calibration"] or "")),
            ("emulation", i["emulation"] + (" — " + i["emulation_note"] if i["emulation_note"] else "")),
            ("network technology", i["technology"] or "the cluster's own"),
            ("steps", f"{fmt(i['steps'], '.0f', '?')} measured after {fmt(i['warmup'], '.0f', '?')} warm-up"),
            ("feasible layouts searched", fmt(v["feasible"], ",.0f"))]
    out.append('<dl class="kv">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(x)}</dd>" for k, x in rows) + "</dl>")
    out.append("<table><tr><th>layout</th><th>explorer rank</th><th>picked</th><th>degrees</th><th>options</th>"
               "<th>predicted (s)</th><th>measured median (s)</th><th>min..max (s)</th><th>error</th>"
               "<th>worst term (predicted / measured s)</th><th>files</th></tr>")
    base = os.path.dirname(rel)
    for l in v["layouts"]:
        m = l["measured"]
        cls = " ".join(c for c, hit in (("pick", l["label"] == s["explorer_pick"]),
                                        ("best", l["label"] == s["best_measured"])) if hit)
        e = l["error_pct"]
        err = "n/a" if e is None else f'<span class="{"good" if abs(e) <= 10 else "bad"}">{e:+.1f} %</span>'
        w = l["worst_term"]
        worst = "" if w is None else f"{esc(w['term'])}: {w['predicted_s']:.4g} / {w['measured_s']:.4g}"
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
        label = esc(l["label"]) + (" ★" if l["label"] == s["best_measured"] else "")
        out.append(
            f'<tr class="{cls}"><td>{label}</td><td class="num">{fmt(l["explorer_rank"], ".0f", "–")}</td>'
            f'<td>{esc(l["picked"])}</td><td>{esc(l["describe"])}</td><td>{esc(l["options"])}</td>'
            f'<td class="num">{l["predicted"]["step_time_s"]:.4f}</td>'
            f'<td class="num">{"not measured" if m is None else format(m["median"], ".4f")}</td>'
            f'<td class="num">{"" if m is None else format(m["min"], ".4f") + " .. " + format(m["max"], ".4f")}</td>'
            f'<td class="num">{err}</td><td>{worst}</td><td>{" ".join(files)}</td></tr>')
    out.append("</table>")
    out.append('<p class="meta">Highlighted: the explorer\'s pick; ★ the best measured. error = (predicted − '
               'measured) / measured. Top-1 regret: how much slower the explorer\'s pick measured than the best '
               'measured layout.</p>')
    return "\n".join(out)


# What the page looks at: DIR and its folders one level down (`sax validate --plots DIR/gpt-tiny`
# puts its figures and merged trace there); deeper folders are runs' own files and per-rank traces,
# reached through the validation table's links instead.
REPORT_DEPTH = 1
FIGURE_ORDER = {"scatter.png": 0, "breakdown.png": 1, "timeline.png": 2, "coll.png": 3}


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


def cmd_report(a):
    root = a.dir
    if not os.path.isdir(root):
        raise InputError(root, "", "a directory of results (validate*.json, *.png, traces)")
    files = report_files(root)
    pngs = [f for f in files if f.lower().endswith(".png")]
    jsons = [f for f in files if f.endswith(".json")]
    validates = [f for f in jsons if re.fullmatch(r"validate.*\.json", os.path.basename(f))]
    sections, shown = [], set()
    for rel in validates:
        figs = [f for f in own_figures(rel, pngs) if f not in shown]
        shown.update(figs)
        sections.append(validate_section(read_validate(os.path.join(root, rel)), rel, root)
                        + (figure_block(root, figs) if figs else ""))
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
        body.append("<h2>Files</h2><ul>")
        for rel in jsons:
            what = "validation (sax validate --json)" if rel in validates else json_kind(os.path.join(root, rel))
            body.append(f"<li>{link(rel)} — {esc(what)}</li>")
        body.append("</ul>")
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{PAGE_STYLE}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")
    out = os.path.join(root, "index.html")
    write_text(out, page)
    print(f"# wrote {out}")


# ---------------------------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    def error(self, message):
        # One line, as every bad input: the usage is one --help away.
        fail(2, f"error: {message} (see {PROG} --help)")


def main():
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)
    v = sub.add_parser("validate", help="scatter.png and breakdown.png of a sax validate --json file")
    v.add_argument("validate_json")
    v.add_argument("--out", required=True, help="directory for scatter.png and breakdown.png")
    c = sub.add_parser("coll", help="bus bandwidth by size from sax bench coll --json files")
    c.add_argument("bench_json", nargs="+")
    c.add_argument("--calibration", help="a sax calibrate file: draw its alpha-beta line")
    c.add_argument("--out", required=True, help="the PNG to write")
    t = sub.add_parser("timeline", help="one step of a merged trace (sax trace merge)")
    t.add_argument("merged_trace")
    t.add_argument("--out", required=True, help="the PNG to write")
    t.add_argument("--step", type=int, help="measured step, from 1 (default: the one nearest the median)")
    d = sub.add_parser("codesign", help="the variants of sax codesign --json and their Pareto set")
    d.add_argument("codesign_json")
    d.add_argument("--out", required=True, help="the PNG to write")
    r = sub.add_parser("report", help="DIR/index.html over what DIR holds")
    r.add_argument("dir")
    r.add_argument("--title")
    a = p.parse_args()
    try:
        {"validate": cmd_validate, "coll": cmd_coll, "timeline": cmd_timeline, "codesign": cmd_codesign,
         "report": cmd_report}[a.cmd](a)
    except InputError as e:
        fail(2, f"error: {e}")
    except MatplotlibMissing as e:
        reexec_with_system_python()
        fail(3, f"matplotlib is not importable by {sys.executable} ({e}): install python3-matplotlib")


def reexec_with_system_python():
    """Run again under Debian's python, which has python3-matplotlib, when this interpreter (one
    found first on PATH) lacks it; once only. Nothing has been written yet: inputs are read and
    checked before anything is drawn."""
    if os.environ.get("SAX_PLOTS_REEXEC") or not os.path.exists(SYSTEM_PYTHON):
        return
    if os.path.realpath(sys.executable) == os.path.realpath(SYSTEM_PYTHON):
        return
    os.environ["SAX_PLOTS_REEXEC"] = "1"
    sys.stdout.flush()
    os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])


if __name__ == "__main__":
    main()
