#!/usr/bin/env python3
"""What `--trace DIR` costs a `sax run` step (the budget: at most 3 %).

Runs `mpirun -np 4 sax run` on the built-in two-building testbed (local-2bld) in pairs, one run
with `--trace` and one without, alternating which goes first, and prints per pair the median step
time of each and their ratio, then the median ratio over the pairs. Timings on 2 shared cores are
noisy: compare the ratios measured in one sitting, not single runs.

Usage: scripts/trace_overhead.py [--pairs N] [--steps N] [--cases tp2-pp2,dp4-overlapped]
                                 [--sax build/sax]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = os.path.join(ROOT, "configs/clusters/local-2bld.json")
MODEL = os.path.join(ROOT, "configs/models/gpt-tiny.json")
CASES = {
    "tp2-pp2": os.path.join(ROOT, "configs/layouts/local-tp2-pp2.json"),
    "dp4-overlapped": {"micro_batch_size": 2, "schedule": {"pipeline": "1f1b", "dp_sync": "overlapped"}},
}


def step_time(sax, layout, steps, trace_dir, out):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1", "-np", "4", sax,
           "run", "--cluster", CLUSTER, "--model", MODEL, "--layout", layout, "--steps", str(steps), "--warmup", "1",
           "--json", out]
    if trace_dir:
        cmd += ["--trace", trace_dir]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)["step_time_s"]["median"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--sax", default=os.path.join(ROOT, "build/sax"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.cases.split(","):
            if name not in CASES:
                sys.exit(f"trace_overhead.py: unknown case '{name}' (known: {', '.join(CASES)})")
            layout = CASES[name]
            if isinstance(layout, dict):
                path = os.path.join(tmp, name + ".json")
                with open(path, "w") as f:
                    json.dump(layout, f)
                layout = path
            ratios = []
            print(f"# {name}: gpt-tiny on local-2bld, 4 ranks, {a.steps} measured steps per run")
            print(f"# {'pair':>4} {'plain_s':>9} {'traced_s':>9} {'ratio':>7}")
            for p in range(a.pairs):
                order = [False, True] if p % 2 == 0 else [True, False]
                t = {}
                for traced in order:
                    t[traced] = step_time(a.sax, layout, a.steps, os.path.join(tmp, "trace") if traced else None,
                                          os.path.join(tmp, "run.json"))
                ratios.append(t[True] / t[False])
                print(f"  {p + 1:>4} {t[False]:9.4f} {t[True]:9.4f} {ratios[-1]:7.4f}", flush=True)
            print(f"{name}: traced/plain step time, median of {a.pairs} pairs: {statistics.median(ratios):.4f}")


if __name__ == "__main__":
    main()
