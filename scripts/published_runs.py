#!/usr/bin/env python3
"""Predicts published training runs with `sax predict` and prints predicted against published.

Every run is a row of configs/published_runs.json: its source (URL, table and row), the cluster,
model and layout files (the layout as published), and the published figure with what it counts:

  iteration_time_s                   end-to-end seconds per iteration; compared with step_time_s
  tflops_per_gpu, counts narayanan2021
                                     Narayanan et al. 2021 (arXiv 2104.04473, Eq. 3 of Section 5.1):
                                     F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) per iteration, model
                                     FLOPs plus the full recompute's second forward; the prediction
                                     is F / (step_time_s x GPUs)
  tflops_per_gpu, counts sax_model   sax's own model FLOPs (Model::training_flops_per_step, no
                                     recompute): MFU x the dense peak of the model's dtype
  tokens_per_s, tokens_per_s_per_gpu tokens per second, of the whole job or per GPU (as published);
                                     the prediction is seq_length x global_batch_size / step_time_s

Prints a Markdown table, then the step time's mean and max |error| and its signed mean over the
predicted runs (a throughput's error turned into its step time's). A layout sax rejects (exit 2, bad input) stays in the table as
"rejected: <error>": a finding. Exit status: 0 when every run was predicted, 2 when sax rejected
some layout (1 with --strict for any), 1 when sax failed otherwise (or its JSON was unreadable).
Python 3 standard library only.

  python3 scripts/published_runs.py [--sax build/sax] [--runs configs/published_runs.json]
                                    [--calibration K --device TEXT] [--cross-validated K]

With --calibration, every run is predicted with that calibration file (`sax predict --calibration`:
its measured terms in place of the datasheet's, the others as before); a calibration describes the
device it was measured on, so --device names it (a run is kept when its cluster's device name
contains TEXT, e.g. H100), and the runs on other devices are left out.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(path):
    with open(os.path.join(ROOT, path)) as f:
        return json.load(f)


def world_size(cluster):
    return sum(b["nodes"] for b in cluster["buildings"]) * cluster["devices_per_node"]


def narayanan_flops(model):
    """FLOPs per iteration as Narayanan et al. 2021 count them with activation recomputation."""
    B = model["global_batch_size"]
    s = model["seq_length"]
    l = model["num_layers"]
    h = model["hidden_size"]
    V = model["vocab_size"]
    return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h))


def layout_summary(layout, model, world):
    tp = layout.get("tensor_model_parallel_size", 1)
    pp = layout.get("pipeline_model_parallel_size", 1)
    cp = layout.get("context_parallel_size", 1)
    vpp = layout.get("virtual_pipeline_model_parallel_size", 1)
    mbs = layout.get("micro_batch_size", 1)
    dp = world // (tp * cp * pp) if world % (tp * cp * pp) == 0 else "?"
    parts = [f"TP{tp}"] + ([f"CP{cp}"] if cp > 1 else []) + [f"PP{pp}", f"DP{dp}", f"VPP{vpp}",
                                                              f"mbs{mbs}", f"gbs{model['global_batch_size']}"]
    extra = []
    rec = layout.get("recompute_granularity", "none")
    if rec != "none":
        extra.append(f"{rec} recompute")
    if layout.get("sequence_parallel"):
        extra.append("SP")
    return "/".join(parts) + (" (" + ", ".join(extra) + ")" if extra else "")


def predict(sax, run, calibration=None):
    """Returns (prediction dict, None), (None, 'rejected: ...') or raises RuntimeError."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "predict.json")
        cmd = [sax, "predict", "--cluster", run["cluster"], "--model", run["model"], "--layout", run["layout"],
               "--json", out] + (["--calibration", calibration] if calibration else [])
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        err = (p.stderr.strip().splitlines() or [""])[-1]
        if p.returncode == 2:
            return None, "rejected: " + err.replace("sax: error: ", "")
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {err}")
        with open(out) as f:
            return json.load(f)["predicted"], None


def fmt(x, unit):
    if unit == "s":
        return f"{x:.2f} s"
    return f"{x:.1f} TFLOP/s" if unit == "tflops" else f"{x:,.0f} {unit}"


def summary(errors):
    n = len(errors)
    return (f"mean |error| {100 * sum(abs(e) for e in errors) / n:.1f} %, max |error| "
            f"{100 * max(abs(e) for e in errors):.1f} %, signed mean {100 * sum(errors) / n:+.1f} %")


def print_cross_validated(path, runs):
    """The datasheet's step-time error beside the held-out one of a `sax calibrate --runs` file."""
    cal = load(path)
    points = {p["name"]: p for p in cal.get("points", []) if p.get("kind") == "run"}
    print(f"\nCross-validated ({path}: each run predicted by a fit without its source's runs):\n")
    print("| run | device | measured step | datasheet error % | held-out error % |")
    print("|---|---|---|---|---|")
    ds, cv = {}, {}
    for run in runs:
        p = points.get(run["name"])
        if not p or "held_out_step_s" not in p:
            print(f"| {run['name']} | — | — | — | not held out (not in the calibration, or its only source) |")
            continue
        d, c = p["datasheet_step_s"] / p["step_s"] - 1, p["held_out_step_s"] / p["step_s"] - 1
        ds.setdefault(p["device"], []).append(d)
        cv.setdefault(p["device"], []).append(c)
        print(f"| {run['name']} | {p['device']} | {p['step_s']:.2f} s | {100 * d:+.1f} | {100 * c:+.1f} |")
    print()
    for device in ds:
        print(f"{device}, {len(ds[device])} runs: datasheet {summary(ds[device])}; held out {summary(cv[device])}")


METRICS = ("iteration_time_s", "tflops_per_gpu", "tokens_per_s", "tokens_per_s_per_gpu")


def check_runs(path):
    """The runs file read and checked before any prediction: one line naming the run and field, exit 2."""
    def bad(where, expected):
        print(f"published_runs.py: {path}: {where}: expected {expected}", file=sys.stderr)
        sys.exit(2)
    try:
        doc = load(path)
    except (OSError, ValueError) as e:
        bad("/", f"a readable JSON file ({e})")
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list):
        bad("/runs", "a list of runs")
    for i, run in enumerate(runs):
        at = f"/runs/{i}"
        if not isinstance(run, dict):
            bad(at, "a run (an object)")
        name = run.get("name")
        if not isinstance(name, str) or not name or any(c in name for c in "|\n\r"):
            bad(at + "/name", f"a name on one line without '|' (a Markdown row), got {name!r}")
        for key in ("cluster", "model", "layout"):
            if not isinstance(run.get(key), str) or not os.path.isfile(os.path.join(ROOT, run[key])):
                bad(f"{at}/{key}", f"a file under the repository, got {run.get(key)!r}")
        pub = run.get("published")
        if not isinstance(pub, dict) or pub.get("metric") not in METRICS:
            bad(f"{at}/published/metric", f"one of {', '.join(METRICS)}")
        value = pub.get("value")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            bad(f"{at}/published/value", f"a positive figure (errors are relative to it), got {value!r}")
        if pub["metric"] == "tflops_per_gpu" and pub.get("counts") not in ("narayanan2021", "sax_model"):
            bad(f"{at}/published/counts", "narayanan2021 or sax_model (what the TFLOP/s count)")
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sax", default=os.path.join(ROOT, "build", "sax"))
    ap.add_argument("--runs", default="configs/published_runs.json")
    ap.add_argument("--strict", action="store_true", help="exit 1 when sax rejects a published layout")
    ap.add_argument("--calibration", help="predict with this calibration file (a device profile needs --device; "
                                           "one from calibrate --runs or --trace does not)")
    ap.add_argument("--device", help="only the runs whose cluster's device name contains this text")
    ap.add_argument("--cross-validated", metavar="K",
                    help="also print each run's held-out step-time error from K, a `sax calibrate --runs` file made "
                         "from these runs (configs/calibrations/published.json), beside the datasheet's")
    args = ap.parse_args()
    # A calibration from runs or traces (`devices`) says which GPU generations it holds, and sax
    # applies it to those alone; a profile of one device needs --device to keep its runs.
    if args.calibration and not args.device and "devices" not in load(args.calibration):
        ap.error("--calibration: expected --device too (the device it was measured on, e.g. H100)")
    if args.calibration:
        args.calibration = os.path.abspath(args.calibration)
    if not os.access(args.sax, os.X_OK):
        print(f"published_runs.py: no sax binary at {args.sax} (build it first)", file=sys.stderr)
        return 1

    runs = [r for r in check_runs(args.runs)
            if not args.device or args.device in load(r["cluster"])["device"]["name"]]
    if not runs:
        print(f"published_runs.py: no run on a device named like {args.device!r}", file=sys.stderr)
        return 2
    if args.calibration:
        which = f"the runs whose device is {args.device}" if args.device else "every run (each of a generation it holds)"
        print(f"predicted with the calibration {args.calibration}, on {which}\n")
    print("| run | layout (TP/PP/DP/VPP/mbs/gbs) | published | predicted | error % | source |")
    print("|---|---|---|---|---|---|")
    rejected = failed = 0
    errors = []
    time_errors = []  # predicted step time / published - 1, per predicted run (a throughput: its inverse)
    for run in runs:
        cluster, model, layout = load(run["cluster"]), load(run["model"]), load(run["layout"])
        world = world_size(cluster)
        pub = run["published"]
        unit = {"iteration_time_s": "s", "tokens_per_s": "tok/s", "tokens_per_s_per_gpu": "tok/s/GPU"}.get(
            pub["metric"], "tflops")
        published = fmt(pub["value"], unit)
        try:
            pred, rejection = predict(args.sax, run, args.calibration)
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            failed += 1
            errors.append(str(e))
            pred, rejection = None, "sax failed: " + str(e).splitlines()[0][-200:]
        if pred is None:
            predicted, error = rejection.replace("|", "\\|"), "—"
            rejected += rejection.startswith("rejected")
        else:
            t = pred["step_time_s"]
            tokens = model["seq_length"] * model["global_batch_size"]
            if pub["metric"] == "iteration_time_s":
                value = t
            elif pub["metric"] == "tokens_per_s":
                value = tokens / t
            elif pub["metric"] == "tokens_per_s_per_gpu":
                value = tokens / t / world
            elif pub["counts"] == "narayanan2021":
                value = narayanan_flops(model) / (t * world) / 1e12
            elif pub["counts"] == "sax_model":
                value = pred["mfu"] * cluster["device"]["peak_tflops"][model["dtype"]]
            else:
                raise SystemExit(f"{run['name']}: unknown published.counts {pub['counts']!r}")
            predicted = fmt(value, unit)
            if unit != "s":
                predicted += f" (step {t:.2f} s)"
            if not pred.get("feasible", True):
                predicted += f" [over memory: {pred['memory_gib']:.1f} GiB]"
            error = f"{100.0 * (value - pub['value']) / pub['value']:+.1f}"
            time_errors.append(value / pub["value"] - 1 if unit == "s" else pub["value"] / value - 1)
        print(f"| {run['name']} | {layout_summary(layout, model, world)} | {published} | {predicted} | {error} | "
              f"{run['table_row']} |")
    print()
    sources = {}
    for run in runs:
        for key in ("source", "source_layout", "cross_check"):
            if run.get(key):
                sources.setdefault(run[key], []).append(run["name"])
    print("Sources (figures from `source`, layouts from `source_layout`, `cross_check` agreeing):")
    for url, names in sources.items():
        print(f"- {url}: {', '.join(names)}")
    print()
    print("error % = (predicted - published) / published; for TFLOP/s a positive error means predicted faster, "
          "for seconds predicted slower.")
    if time_errors:
        n = len(time_errors)
        print(f"step time over the {n} predicted runs (predicted / published - 1, negative: predicted faster): "
              f"mean |error| {100 * sum(abs(e) for e in time_errors) / n:.1f} %, "
              f"max |error| {100 * max(abs(e) for e in time_errors):.1f} %, "
              f"signed mean {100 * sum(time_errors) / n:+.1f} %")
    if args.cross_validated:
        print_cross_validated(args.cross_validated, runs)
    for e in errors:
        print("published_runs.py: " + e, file=sys.stderr)
    if failed:
        return 1
    if rejected:
        return 1 if args.strict else 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
