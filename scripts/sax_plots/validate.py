"""validate: DIR/scatter.png (predicted against measured step time), DIR/breakdown.png (each
layout's predicted and measured step, stacked by category) and DIR/terms.png (each term that is not
compute, predicted against measured, a colour per term) of a `sax validate --json` file."""
import os
import re
import textwrap

from .common import (CATEGORY_COLOURS, CATEGORY_NAMES, CATEGORY_ORDER, fmt, import_pyplot, keys_of, load_document,
                     out_dir, place_labels, save_figure)

WHAT = "a sax validate --json file"


def read_validate(file):
    """The document in the shape the figures and the report read: optional fields as None."""
    doc = load_document(file, WHAT, 1)
    with keys_of(file):
        i = doc["inputs"]
        inputs = {k: i.get(k) for k in ("calibration", "technology", "steps", "warmup")}
        inputs.update({k: i.get(k) or "" for k in ("cluster", "model", "cost_source", "emulation_note")})
        inputs["emulation"] = i["emulation"]
        layouts = [read_layout(file, f"/layouts/{n}", l) for n, l in enumerate(doc["layouts"])]
        summary = {k: doc["summary"].get(k) for k in ("layouts", "failed", "mape_pct", "kendall_tau",
                                                     "top1_regret_pct", "explorer_pick", "best_measured",
                                                     "non_compute_share_pct", "non_compute_mape_pct",
                                                     "kendall_tau_layouts_few")}
        # A paced device (sax validate's "compute"): said wherever the figures are shown.
        summary["compute"] = doc["summary"].get("compute") or "native"
        summary["terms"] = doc["summary"].get("terms") or {}
    return {"file": file, "inputs": inputs, "feasible": doc.get("feasible"), "layouts": layouts, "summary": summary}


def read_layout(file, path, l):
    with keys_of(file, path):
        lay = {k: l.get(k) for k in ("explorer_rank", "error_pct", "run_json", "trace_dir")}
        lay.update({k: l.get(k) or "" for k in ("picked", "describe", "options")})
        lay["label"] = l["label"]
        p = l["predicted"]
        lay["predicted"] = {"step_time_s": p["step_time_s"], "breakdown_s": p["breakdown_s"]}
        # A layout whose run failed has no measurement: it is shown as predicted only.
        m = l.get("measured")
        lay["measured"] = None if m is None else {
            "median": m["step_time_s"]["median"], "min": m["step_time_s"]["min"], "max": m["step_time_s"]["max"],
            "breakdown_s": m["breakdown_s"]}
        w = l.get("worst_term")
        lay["worst_term"] = None if w is None else {k: w[k] for k in ("term", "predicted_s", "measured_s")}
    return lay


def short_describe(describe):
    """'TP2 CP1 EP1 PP2 DP1 mbs2' → 'TP2 PP2 mbs2': the degrees of 1 say nothing on a tick label."""
    kept = [t for t in describe.split() if not re.fullmatch(r"[A-Z]+1", t)]
    return " ".join(kept) if kept else describe


def time_unit(values):
    return ("ms", 1e3) if max(values) < 1.0 else ("s", 1.0)


def summary_title(v):
    s = v["summary"]
    few = f" (over {s['layouts']} layouts)" if s.get("kendall_tau_layouts_few") else ""
    step = (f"step MAPE {fmt(s['mape_pct'], '.1f')} %   Kendall τ {fmt(s['kendall_tau'], '.2f')}{few}   "
            f"top-1 regret {fmt(s['top1_regret_pct'], '.1f')} %   emulation: {v['inputs']['emulation']}")
    non_compute = f"not compute: MAPE {fmt(s['non_compute_mape_pct'], '.1f')} %"
    # Paced, compute matches by construction: the part that is not compute is the model's own.
    if s["compute"] == "paced":
        return f"{non_compute} (compute paced)   {step}"
    return f"{step}   {non_compute}"


# ---------------------------------------------------------------------------------------------
# scatter.png: measured median on x (its min..max as the error bar), predicted on y.

PICKED_STYLE = {"top": ("o", "#dd8452", "explorer's top"), "spread": ("s", "#55a868", "spread over the ranking"),
                "given": ("D", "#8172b3", "given")}


def plot_scatter(plt, v, file):
    measured = [l for l in v["layouts"] if l["measured"] is not None]
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
    pts = scatter_points(ax, measured, k)
    mark_pick_and_best(ax, v["summary"], pts, measured)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    ax.set_xlabel(f"measured step time ({unit}; median, bar = min..max over {fmt(v['inputs']['steps'], '.0f', '?')} steps)")
    ax.set_ylabel(f"predicted step time ({unit})")
    ax.grid(True, alpha=0.3)
    ax.set_title("sax validate: predicted vs measured step time\n" + "\n".join(textwrap.wrap(summary_title(v), 90)),
                 fontsize=10)
    ax.legend(loc="lower right", fontsize=8.5, framealpha=0.9)  # points sit along y = x: the corner below it is emptiest
    missing = len(v["layouts"]) - len(measured)
    if missing:
        ax.text(0.99, 0.01, f"{missing} layout(s) not measured (run failed)", transform=ax.transAxes, ha="right",
                va="bottom", fontsize=8, color="#a00")
    fig.tight_layout()
    place_labels(ax, fig, pts, [l["label"] for l in measured])
    save_figure(fig, file)
    plt.close(fig)


def scatter_points(ax, measured, k):
    """Each measured layout as a point with its min..max bar, styled by how it was picked; the
    points, in the order of `measured`."""
    shown = set()
    pts = []
    for l in measured:
        m = l["measured"]
        marker, colour, name = PICKED_STYLE.get(l["picked"], ("o", "#555555", l["picked"] or "layout"))
        x, y = m["median"] * k, l["predicted"]["step_time_s"] * k
        ax.errorbar([x], [y], xerr=[[x - m["min"] * k], [m["max"] * k - x]], fmt=marker, color=colour, ms=7,
                    capsize=3, elinewidth=1.2, label=None if name in shown else name)
        shown.add(name)
        pts.append((x, y))
    return pts


def mark_pick_and_best(ax, s, pts, measured):
    for label, style, name in ((s["explorer_pick"], dict(marker="o", s=260, facecolors="none", edgecolors="black",
                                                            linewidths=1.2), "explorer's pick"),
                               (s["best_measured"], dict(marker="*", s=90, color="gold", edgecolors="black",
                                                         linewidths=0.6, zorder=5), "best measured")):
        hit = [p for p, l in zip(pts, measured) if l["label"] == label]
        if hit:
            ax.scatter([hit[0][0]], [hit[0][1]], label=f"{name} ({label})", **style)


# ---------------------------------------------------------------------------------------------
# breakdown.png: for each layout a predicted bar and a measured bar, stacked by category.

BAR_WIDTH = 0.38


def breakdown_categories(layouts):
    """The known categories present, in their order; then any sax does not know yet, in a fixed grey."""
    def breakdowns(l):
        return (l["predicted"]["breakdown_s"], l["measured"]["breakdown_s"] if l["measured"] else {})

    present = [c for c in CATEGORY_ORDER if any(b.get(c, 0) > 0 for l in layouts for b in breakdowns(l))]
    extra = sorted({c for l in layouts for b in breakdowns(l) for c, x in b.items()
                    if c not in CATEGORY_COLOURS and x > 0})
    return present + extra


def layout_tick_labels(layouts):
    describes = [l["describe"] for l in layouts]
    labels = []
    for l in layouts:
        err = "" if l["error_pct"] is None else f"\n{l['error_pct']:+.1f} %"
        # Layouts of the same degrees differ in their options (order, schedule): say which.
        opts = ""
        if describes.count(l["describe"]) > 1 and l["options"]:
            opts = "\n" + "\n".join(textwrap.wrap(l["options"], 18))
        labels.append(f"{l['label']}\n{short_describe(l['describe'])}{opts}{err}")
    return labels


def draw_bar_pairs(ax, layouts, cats, k):
    for i, l in enumerate(layouts):
        m = l["measured"]
        for side, (b, step) in enumerate(((l["predicted"]["breakdown_s"], l["predicted"]["step_time_s"]),
                                          (m["breakdown_s"] if m else None, m["median"] if m else None))):
            x = i + (side - 0.5) * (BAR_WIDTH + 0.03)
            if b is None:
                ax.text(x, 0, "not\nmeasured", ha="center", va="bottom", fontsize=7, color="#a00")
                continue
            bottom = 0.0
            for c in cats:
                h = b.get(c, 0.0) * k
                if h > 0:
                    ax.bar(x, h, BAR_WIDTH, bottom=bottom, color=CATEGORY_COLOURS.get(c, "#7f7f7f"),
                           edgecolor="white", linewidth=0.5)
                    bottom += h
            ax.plot([x - BAR_WIDTH / 2, x + BAR_WIDTH / 2], [step * k, step * k], color="black", lw=1.6)


def plot_breakdown(plt, v, file):
    layouts = v["layouts"]
    measured = [l for l in layouts if l["measured"] is not None]
    cats = breakdown_categories(layouts)
    steps = [l["predicted"]["step_time_s"] for l in layouts] + [l["measured"]["median"] for l in measured]
    sums = [sum(l["predicted"]["breakdown_s"].values()) for l in layouts]
    sums += [sum(l["measured"]["breakdown_s"].values()) for l in measured]
    unit, k = time_unit(steps + sums)
    n = len(layouts)
    labels = layout_tick_labels(layouts)
    # Room under the axes for the tallest label (8 pt lines) below the P/M ticks.
    below_in = 0.45 + 0.15 * max(x.count("\n") + 1 for x in labels)
    height = 4.8 + below_in
    fig, ax = plt.subplots(figsize=(max(8.0, 1.25 * n + 3), height))
    draw_bar_pairs(ax, layouts, cats, k)
    handles = [plt.Rectangle((0, 0), 1, 1, color=CATEGORY_COLOURS.get(c, "#7f7f7f")) for c in cats]
    handles.append(plt.Line2D([0], [0], color="black", lw=1.6))
    names = [CATEGORY_NAMES.get(c, c) for c in cats] + ["step time"]
    ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    # Two rows of tick labels: which bar is which (P/M) under each bar, the layout under each pair.
    ax.set_xticks([i + (s - 0.5) * (BAR_WIDTH + 0.03) for i in range(n) for s in (0, 1)])
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
                 + summary_title(v), fontsize=10)
    fig.tight_layout()
    fig.subplots_adjust(bottom=below_in / height)
    save_figure(fig, file)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# terms.png: every term that is not compute, one point per layout, predicted against measured.

TERMS = ["tp_comm", "cp_comm", "ep_comm", "dp_comm", "pp_comm", "idle", "optimizer"]


def term_points(v):
    """Per term, (measured, predicted, label) of each measured layout where either is at least
    0.5 % of the measured step (below, a point says nothing on a log scale)."""
    out = {}
    for l in v["layouts"]:
        m = l["measured"]
        if m is None:
            continue
        for t in TERMS:
            x, y = m["breakdown_s"].get(t, 0.0), l["predicted"]["breakdown_s"].get(t, 0.0)
            if max(x, y) >= 0.005 * m["median"]:
                out.setdefault(t, []).append((x, y, l["label"]))
    return out


def plot_terms(plt, v, file):
    pts = term_points(v)
    s = v["summary"]
    fig, ax = plt.subplots(figsize=(8, 7))
    # The axes span the points' values that are a term at all (0.5 % of their step or more); a
    # side that is less (a term predicted or measured as nothing) sits on the axis' edge.
    steps = {l["label"]: l["measured"]["median"] for l in v["layouts"] if l["measured"] is not None}
    allv = [p for t in pts.values() for x, y, label in t for p in (x, y) if p >= 0.005 * steps[label]] or [1e-3, 1.0]
    lo, hi = min(allv) / 1.6, max(allv) * 1.6
    xs = [lo, hi]
    ax.fill_between(xs, [x * 0.85 for x in xs], [x * 1.15 for x in xs], color="#4c72b0", alpha=0.12, lw=0,
                    label="±15 %")
    ax.plot(xs, xs, color="#4c72b0", lw=1, ls="--", label="predicted = measured")
    floor = lo * 1.2  # a term predicted or measured as 0 sits on the axis' edge
    for t in TERMS:
        if t not in pts:
            continue
        fit = s["terms"].get(t) or {}
        judged = fit.get("layouts") or 0
        name = CATEGORY_NAMES.get(t, t) + (f": MAPE {fmt(fit.get('mape_pct'), '.1f')} % over {judged}"
                                            if judged else ": under 2 % of every step")
        ax.scatter([max(x, floor) for x, _, _ in pts[t]], [max(y, floor) for _, y, _ in pts[t]], s=38,
                   color=CATEGORY_COLOURS.get(t, "#7f7f7f"), edgecolors="black", linewidths=0.4, label=name,
                   zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    ax.set_xlabel("measured (s per step; the mean over the compared stage's ranks)")
    ax.set_ylabel("predicted (s per step)")
    ax.grid(True, which="both", alpha=0.25)
    ax.set_title("sax validate, term by term: every part of the step that is not compute\n"
                 + "\n".join(textwrap.wrap(summary_title(v), 90)), fontsize=9.5)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    save_figure(fig, file)
    plt.close(fig)


def cmd_validate(a):
    v = read_validate(a.validate_json)
    out = out_dir(a.out)
    plt = import_pyplot()
    files = [os.path.join(out, "scatter.png"), os.path.join(out, "breakdown.png"), os.path.join(out, "terms.png")]
    plot_scatter(plt, v, files[0])
    plot_breakdown(plt, v, files[1])
    plot_terms(plt, v, files[2])
    for f in files:
        print(f"# wrote {f}")
