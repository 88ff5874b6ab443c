#!/usr/bin/env python3
"""What a paced run did, stage by stage, from `sax run --json` files (or a validate --runs folder).

For each run: per pipeline stage (the mean over its ranks), the measured compute (forward,
backward, recompute) plus optimizer per step beside the declared device's time for the same ops
(pacing.paced_s: what the pacer held them to), their ratio, the overruns, the exposed DP
communication, and the CPU time per step beside the step. Equal ratios on every stage say each
stage computed at the declared device's speed, whatever the host did.

Usage: scripts/pacing_report.py RUN_JSON|RUNS_DIR [...]
"""
import json
import os
import sys


def runs(paths):
    for p in paths:
        if os.path.isdir(p):
            for d in sorted(os.listdir(p)):
                f = os.path.join(p, d, "run.json")
                if os.path.isfile(f):
                    yield d, f
        else:
            yield os.path.basename(os.path.dirname(os.path.abspath(p))), p


def report(name, path):
    try:
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
    except (OSError, ValueError) as e:
        print(f"{path}: not a run's JSON ({e})", file=sys.stderr)
        return False
    # What `sax run --json` writes: an object with the step's median and a list of ranks.
    ranks = j.get("ranks") if isinstance(j, dict) else None
    median = j.get("step_time_s", {}).get("median") if isinstance(j, dict) and isinstance(
        j.get("step_time_s"), dict) else None
    if not isinstance(ranks, list) or not ranks or not all(isinstance(r, dict) for r in ranks) or \
            not isinstance(median, (int, float)):
        print(f"{path}: expected a `sax run --json` file (an object with step_time_s.median and a list of ranks)",
              file=sys.stderr)
        return False
    if "pacing" not in ranks[0]:
        print(f"{name}: not paced (no pacing per rank)")
        return True
    steps = max(1, len(j.get("steps") or [None]))
    step = j["step_time_s"]["median"]
    print(f"{name}: step {step:.3f} s (median of {steps})")
    print(f"  {'stage':>5} {'ranks':>5} {'compute+opt s':>13} {'device s':>9} {'ratio':>6} {'overruns':>8} "
          f"{'dp_comm s':>9} {'cpu s':>6}")
    by_stage = {}
    for r in ranks:
        by_stage.setdefault(r.get("stage", 0), []).append(r)
    for stage in sorted(by_stage, key=str):
        rs = by_stage[stage]
        n = len(rs)
        # breakdown_s is the measured step nearest the median; pacing is over every measured step.
        measured = sum(r["pacing"]["compute_s"] for r in rs) / n / steps
        device = sum(r["pacing"]["paced_s"] for r in rs) / n / steps
        overruns = sum(r["pacing"]["overruns"] for r in rs)
        dp = sum(r["breakdown_s"]["dp_comm"] for r in rs) / n
        cpu = sum(r.get("cpu_s_per_step", 0.0) for r in rs) / n
        ratio = measured / device if device > 0 else float("nan")
        print(f"  {stage:>5} {n:>5} {measured:>13.4f} {device:>9.4f} {ratio:>6.3f} {overruns:>8} {dp:>9.4f} {cpu:>6.3f}")
    return True


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    ok = True
    for name, path in runs(argv):
        try:
            ok = report(name, path) and ok
        except (KeyError, TypeError, ValueError) as e:  # a rank without the fields a run writes
            print(f"{path}: expected a `sax run --json` file: a rank lacks {e}", file=sys.stderr)
            ok = False
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
