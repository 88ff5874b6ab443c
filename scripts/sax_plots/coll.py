"""coll: bus bandwidth by size from `sax bench coll --json` files, a panel per op, with the
calibration's α-β line where a calibration is given."""
import math
import os

from .common import import_pyplot, keys_of, load_document, save_figure

PRICED_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
BENCH_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")


# spec/collective.hpp's ring_algorithm(), the one the calibration fits: (steps, bus_factor) of an
# op over n ranks. Kept in step with it; broadcast is not priced, so it has no calibration entry.
def ring_algorithm(op, n):
    if op == "all_reduce":
        return 2 * (n - 1), 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return n - 1, (n - 1) / n
    if op == "broadcast":
        return n - 1, 1.0
    return 1.0, 1.0  # send_recv, send, recv


# Mirrors spec/alpha_beta.hpp's regime_at() and alpha_beta_s(regimes, bytes, steps, bus_bytes)
# exactly (keep them in step): a link's α-β is a list of regimes ascending in from_bytes (an op's
# size, nccl-tests' convention), each {from_bytes, alpha_s per step, beta_s_per_byte of bus
# traffic}; an op is priced in the last regime that starts at or below its size, the first for
# sizes below every start. Seconds throughout; callers convert at the call.
def regime_at(regimes, nbytes):
    i = 0
    while i + 1 < len(regimes) and regimes[i + 1]["from_bytes"] <= nbytes:
        i += 1
    return regimes[i]


def alpha_beta_s(regimes, nbytes, steps, bus_bytes):
    r = regime_at(regimes, nbytes)
    return steps * r["alpha_s"] + bus_bytes * r["beta_s_per_byte"]


def predict_us(ab, op, ranks, nbytes):
    """The time (µs) the calibration's α-β gives an op, in its regime: calibration/fit.cpp's
    predict_us(), which the fit minimises against."""
    steps, bus_factor = ring_algorithm(op, ranks)
    return 1e6 * alpha_beta_s(ab["regimes"], nbytes, steps, bus_factor * nbytes)


def fitted_busbw_gbps(ab, op, ranks, nbytes):
    """busbw the α-β implies, turned from time as bench coll turns a measured time into it
    (algbw = bytes / time, busbw = algbw × bus_factor)."""
    time_us = predict_us(ab, op, ranks, nbytes)
    return nbytes / (time_us * 1e3) * ring_algorithm(op, ranks)[1] if time_us > 0 else float("inf")


def priced_as(op):
    return "send_recv" if op in ("send", "recv") else op


def read_bench(file):
    doc = load_document(file, "a sax bench coll --json file", 2)
    env, config = doc.get("env") or {}, doc.get("config") or {}
    with keys_of(file, "/results"):
        results = [{"op": r["op"], "bytes": r["bytes"], "ranks": int(r["ranks"]), "in_place": bool(r.get("in_place", True)),
                    "time_us": r["time_us"], "busbw_gbps": r["busbw_gbps"], "p50_us": r.get("p50_us"),
                    "p99_us": r.get("p99_us")} for r in doc["results"]]
    return {
        "file": file,
        "link_class": env.get("link_class"),
        "group": config.get("group") or "world",
        "emulation": env.get("emulation") or "none",
        # 1: one group at a time; 0 (all) or more: the groups shared the links they cross.
        "groups_at_once": int(config.get("groups_at_once") or 0),
        "results": results,
    }


def regimes_of(e):
    """A calibration entry's regimes in seconds (a file without them: one regime of its α-β)."""
    fit = e.get("fit") or {}
    regimes = e.get("regimes") or [{"from_bytes": 0, "alpha_us": e["alpha_us"],
                                    "beta_ns_per_byte": e["beta_ns_per_byte"], "fit": fit}]
    return [{"from_bytes": r["from_bytes"], "alpha_s": r["alpha_us"] * 1e-6, "beta_s_per_byte": r["beta_ns_per_byte"] * 1e-9,
             "r2": (r.get("fit") or {}).get("r2")} for r in regimes]


def read_calibration(file):
    """{(link class, op): α, β, r², regimes} and the boundary's oversubscription."""
    doc = load_document(file, "a sax calibrate calibration file", 1)
    # The calibrator divides the cross-building β by the boundary's oversubscription (a device's
    # own bandwidth); a sweep with every group crossing at once shares it again.
    over = doc.get("cross_oversubscription")
    out = {"cross_oversubscription": over["value"] if over else 1.0}
    with keys_of(file, "/links"):
        for lc, ops in (doc.get("links") or {}).items():
            for op, e in ops.items():
                out[(lc, op)] = {"alpha_us": e["alpha_us"], "beta_ns_per_byte": e["beta_ns_per_byte"],
                                 "r2": (e.get("fit") or {}).get("r2"), "regimes": regimes_of(e)}
    return out


def format_bytes(x, _pos=None):
    for unit, k in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if x >= k:
            v = x / k
            return f"{v:.0f}{unit}" if abs(v - round(v)) < 1e-9 else f"{v:.3g}{unit}"
    return f"{x:.0f}"


# ---------------------------------------------------------------------------------------------
# Drawing: a series is one group kind across one link class on one group size; its colour is
# the same in every panel.


def series_of(benches):
    series = []
    for b in benches:
        for r in b["results"]:
            key = (b["group"], b["link_class"], r["ranks"])
            if key not in series:
                series.append(key)
    return series


def draw_measured(ax, pts, name, colour):
    """The points (filled; hollow for in place where both were run) and each size's p50..p99 bar."""
    both = len({r["in_place"] for r in pts}) > 1
    for in_place in (False, True):
        sel = sorted((r for r in pts if r["in_place"] == in_place), key=lambda r: r["bytes"])
        if not sel:
            continue
        face = "none" if (both and in_place) else colour
        ax.plot([r["bytes"] for r in sel], [r["busbw_gbps"] for r in sel], ls="none", marker="o", ms=5, mfc=face,
                mec=colour, label=name + (" (in place)" if both and in_place else ""))
        # The spread: busbw at the median and the 99th-percentile sample's time.
        for r in sel:
            if r["p50_us"] and r["p99_us"]:
                f = r["busbw_gbps"] * r["time_us"]  # busbw × time is constant for one size
                ax.plot([r["bytes"]] * 2, [f / r["p99_us"], f / r["p50_us"]], color=colour, lw=0.8, alpha=0.6)


def fit_for(calibration, benches, op, key, notes):
    """The α-β to draw for a series, β shared as the cost model shares it where every group crossed
    the boundary at once; None (and a note saying why) where there is none."""
    group, lc, _ = key
    ab = calibration.get((lc, priced_as(op))) if lc else None
    if ab is None:
        notes.add(f"{op}: the cost model does not price it, no fit" if priced_as(op) not in PRICED_OPS
                  else f"{op} on {lc}: no entry in the calibration" if lc
                  else f"{op}: the bench ran without --cluster (no link class), no fit")
        return None, 1.0
    shared = 1.0
    if lc == "cross_building" and any(b["groups_at_once"] != 1 for b in benches
                                      if (b["group"], b["link_class"]) == (group, lc)):
        shared = calibration["cross_oversubscription"]
    if shared != 1.0:
        ab = dict(ab, beta_ns_per_byte=ab["beta_ns_per_byte"] * shared,
                  regimes=[dict(r, beta_s_per_byte=r["beta_s_per_byte"] * shared) for r in ab["regimes"]])
        notes.add(f"{lc}: every group crossed at once, so the line's β is the calibration's (a device's own) "
                  f"× {shared:.2f}, the boundary's oversubscription, as the cost model shares it")
    return ab, shared


def draw_fit(ax, ab, shared, op, ranks, pts, colour):
    """Each regime's line over the measured sizes it prices (one line where the fit has one)."""
    lo, hi = min(r["bytes"] for r in pts), max(r["bytes"] for r in pts)
    regimes = ab["regimes"]
    styles = ("--", ":", "-.")
    for i, g in enumerate(regimes):
        nxt = regimes[i + 1]["from_bytes"] if i + 1 < len(regimes) else None
        start = lo if i == 0 else max(lo, g["from_bytes"])
        end = hi if nxt is None else min(hi, nxt)
        xs = [start * (end / start) ** (k / 60) for k in range(61)] if end > start else [start]
        xs = [x for x in xs if start <= end and (nxt is None or x < nxt)]
        if not xs:
            continue  # no measured size in it
        r2 = "" if g["r2"] is None else f", r² {g['r2']:.2f}"
        inv_beta = 1e-9 / g["beta_s_per_byte"] if g["beta_s_per_byte"] > 0 else float("inf")
        name = "fit" if len(regimes) == 1 else f"regime {i + 1} from {format_bytes(g['from_bytes'])}"
        ax.plot(xs, [fitted_busbw_gbps(ab, op, ranks, x) for x in xs], color=colour, lw=1.4,
                ls=styles[i % len(styles)],
                label=f"{name}: α {g['alpha_s'] * 1e6:.3g} µs, 1/β {inv_beta:.3g} GB/s{r2}"
                + (f", β×{shared:.2f} shared" if shared != 1.0 else ""))


def draw_panel(ax, op, benches, series, colour, calibration, notes):
    from matplotlib.ticker import FuncFormatter, LogLocator

    for key in series:
        group, lc, ranks = key
        pts = [r for b in benches if (b["group"], b["link_class"]) == (group, lc) for r in b["results"]
               if r["op"] == op and r["ranks"] == ranks]
        if not pts:
            continue
        draw_measured(ax, pts, f"{group}, {lc or 'link class unknown'}, {ranks} ranks", colour[key])
        if calibration is None:
            continue
        ab, shared = fit_for(calibration, benches, op, key, notes)
        if ab is not None:
            draw_fit(ax, ab, shared, op, ranks, pts, colour[key])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_major_formatter(FuncFormatter(format_bytes))
    ax.set_title(op, fontsize=11)
    ax.set_xlabel("size (bytes, nccl-tests' convention)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7.5, loc="best")


def plot_coll(benches, calibration, cal_file, out):
    plt = import_pyplot()
    ops = [op for op in BENCH_OPS if any(r["op"] == op for b in benches for r in b["results"])]
    series = series_of(benches)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {key: colours[i % len(colours)] for i, key in enumerate(series)}
    cols = 1 if len(ops) == 1 else 2 if len(ops) <= 4 else 3
    rows = math.ceil(len(ops) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.6 * cols + 0.6, 4.2 * rows + 1.2), squeeze=False)
    notes = set()
    for idx, op in enumerate(ops):
        draw_panel(axes[idx // cols][idx % cols], op, benches, series, colour, calibration, notes)
    for idx in range(len(ops), rows * cols):
        axes[idx // cols][idx % cols].set_visible(False)
    emul = sorted({b["emulation"] for b in benches})
    title = "sax bench coll: bus bandwidth by size (points: mean time; bars: p50..p99)   emulation: " + ", ".join(emul)
    if cal_file:
        title += ("\ndashed: the calibration's α-β (" + os.path.basename(cal_file)
                  + "): time = steps·α + bus_factor·bytes·β, each regime's own α and β over its sizes")
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
