#!/usr/bin/env python3
"""reduce_scatter and all_gather are each other's dual: at the same total size (reduce-scatter's
input = all-gather's output) a ring moves the same bytes over the same steps, so their times
should be comparable. Runs `sax bench coll --op reduce_scatter,all_gather` several times under
mpirun, alternating which op goes first so that drift falls on both, and prints per size the
median over runs of time(reduce_scatter) / time(all_gather).

  scripts/coll_dual.py [--runs 5] [--np 4] [--sax build/sax] [-- extra bench coll arguments]

As root on one small host it adds the flags and environment Open MPI needs (docs/collectives.md).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--sax", default="build/sax")
    p.add_argument("extra", nargs="*", help="more bench coll arguments (after --)")
    a = p.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    mpirun = ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1", "-np", str(a.np)]
    ratios = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(a.runs):
            order = "reduce_scatter,all_gather" if run % 2 == 0 else "all_gather,reduce_scatter"
            out = os.path.join(tmp, f"run{run}.json")
            cmd = mpirun + [a.sax, "bench", "coll", "--op", order, "-b", "1K", "-e", "16M", "-f", "4", "--json", out]
            r = subprocess.run(cmd + a.extra, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                sys.exit(f"coll_dual.py: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
            times = {}
            for res in json.load(open(out))["results"]:
                if not res.get("in_place", False):  # with --inplace 2: the out-of-place rows
                    times[(res["op"], res["bytes"])] = res["time_us"]
            for (op, size), t in times.items():
                if op == "reduce_scatter" and ("all_gather", size) in times:
                    ratios.setdefault(size, []).append(t / times[("all_gather", size)])
            print(f"run {run + 1}/{a.runs} done ({order})", file=sys.stderr, flush=True)
    print(f"# time(reduce_scatter) / time(all_gather) at the same total size, {a.np} ranks, median of {a.runs} runs")
    print(f"#{'bytes':>11} {'median':>8} {'min':>8} {'max':>8}")
    for size in sorted(ratios):
        v = ratios[size]
        print(f"{size:12d} {statistics.median(v):8.3f} {min(v):8.3f} {max(v):8.3f}")


if __name__ == "__main__":
    main()
