"""timeline: one step of a merged trace (sax trace merge of sax run --trace), a row per rank's
executor thread and per communication lane (harness/internal/tracer.hpp)."""
import os
import statistics

from .common import (CATEGORY_COLOURS, CATEGORY_NAMES, CATEGORY_ORDER, InputError, import_pyplot, keys_of, load_json,
                     save_figure)

TIMELINE_EXTRA_COLOURS = {"communication": "#64b5cd", "memcpy": "#8c8c8c", "memset": "#a6a6a6",
                          "runtime": "#e0e0e0", "range": "#d0d0f0", "other": "#ccb974"}


def colour_of(c):
    return CATEGORY_COLOURS.get(c) or TIMELINE_EXTRA_COLOURS.get(c, "#7f7f7f")


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
    """(process names, thread names, spans as (pid, tid, cat, name, ts, dur)) of a Chrome trace."""
    doc = load_json(file, "a Chrome trace (sax trace merge)")
    if isinstance(doc, list):  # the Trace Event Format also allows a bare array
        events = doc
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events = doc["traceEvents"]
    else:
        raise InputError(file, "/traceEvents", "an array of trace events (sax trace merge output)")
    procs, threads, spans = {}, {}, []
    for n, e in enumerate(events):
        if e.get("ph") == "M":
            args = e.get("args") or {}
            if e.get("name") == "process_name":
                procs[e.get("pid")] = str(args.get("name", ""))
            elif e.get("name") == "thread_name":
                threads[(e.get("pid"), e.get("tid"))] = str(args.get("name", ""))
        elif e.get("ph") == "X":
            with keys_of(file, f"/traceEvents/{n}"):
                spans.append((e.get("pid"), e.get("tid"), str(e.get("cat", "")), str(e.get("name", "")),
                              float(e["ts"]), float(e["dur"])))
    return procs, threads, spans


def choose_step(file, steps_of, step):
    """(step from 1, its window (first start, last end), how it was chosen, how many steps)."""
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
    return step, windows[step - 1], how, count


def lanes_in(spans, t0, t1, exec_tid):
    """The spans inside the window, and the rows: per rank (pid order) the thread that holds its
    steps (the executor) first, then its other lanes by thread id; only rows with something in it."""
    in_step = [s for s in spans if s[2] != "step" and s[4] < t1 and s[4] + s[5] > t0]
    lanes = sorted({(s[0], s[1]) for s in in_step} | {(p, t) for p, t in exec_tid.items()},
                   key=lambda pt: (pt[0], pt[1] != exec_tid.get(pt[0]), pt[1]))
    return in_step, lanes


def draw_bars(ax, in_step, row, t0, t1):
    """The spans clipped to the window as bars, in ms from its start; the categories drawn."""
    by = {}
    for pid, tid, cat, name, ts, dur in in_step:
        s, e = max(ts, t0), min(ts + dur, t1)
        by.setdefault((row[(pid, tid)], span_category(cat, name)), []).append(((s - t0) * 1e-3, (e - s) * 1e-3))
    for (r, c), bars in by.items():
        ax.broken_barh(bars, (r - 0.4, 0.8), facecolors=colour_of(c), edgecolors="none", linewidth=0)
    return {c for _, c in by}


def draw_rank_bands(ax, lanes, row, steps_of, exec_tid, step, t0):
    """Each rank's rows on a band of their own (alternate ranks shaded), and the rank's own step
    as a thin line under its executor row: ranks start and end the step at different times."""
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


def legend_of(plt, ax, drawn):
    known = CATEGORY_ORDER + list(TIMELINE_EXTRA_COLOURS)
    cats = sorted(drawn, key=lambda c: known.index(c) if c in known else 99)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour_of(c)) for c in cats]
    handles.append(plt.Line2D([0], [0], color="black", lw=1.2))
    ax.legend(handles, [CATEGORY_NAMES.get(c, c) for c in cats] + ["the rank's step"], loc="upper left",
              bbox_to_anchor=(1.005, 1.0), fontsize=8.5, frameon=False)


def plot_timeline(file, out, step):
    procs, threads, spans = read_trace(file)
    steps_of, exec_tid = {}, {}
    for pid, tid, cat, name, ts, dur in spans:
        if cat == "step":
            steps_of.setdefault(pid, []).append((ts, ts + dur))
            exec_tid[pid] = tid
    if not steps_of:
        raise InputError(file, "/traceEvents", "step events (cat 'step'): a trace of sax run --trace")
    for v in steps_of.values():
        v.sort()
    step, (t0, t1), how, count = choose_step(file, steps_of, step)

    plt = import_pyplot()
    in_step, lanes = lanes_in(spans, t0, t1, exec_tid)
    row = {lane: i for i, lane in enumerate(lanes)}
    fig, ax = plt.subplots(figsize=(14, max(3.5, 0.36 * len(lanes) + 1.8)))
    drawn = draw_bars(ax, in_step, row, t0, t1)
    draw_rank_bands(ax, lanes, row, steps_of, exec_tid, step, t0)

    def lane_name(pid, tid):
        if tid == exec_tid.get(pid):
            return f"{procs.get(pid, f'pid {pid}')}: executor"
        return "  " + threads.get((pid, tid), f"thread {tid}")

    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([lane_name(p, t) for p, t in lanes], fontsize=8.5)
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlim(0, (t1 - t0) * 1e-3)
    ax.set_xlabel("time since the step's first start (ms)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    legend_of(plt, ax, drawn)
    ax.set_title(f"{os.path.basename(file)}: step {step} of {count} ({how}), {(t1 - t0) * 1e-3:.1f} ms; "
                 "executor rows: what the step waited on; lane rows: each message from issue to completion",
                 fontsize=10)
    fig.tight_layout()
    save_figure(fig, out)
    plt.close(fig)


def cmd_timeline(a):
    plot_timeline(a.merged_trace, a.out, a.step)
    print(f"# wrote {a.out}")
