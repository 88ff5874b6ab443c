#!/usr/bin/env python3
"""The regression gate of `sax regress` on real re-runs of this host: a benchmark, not a test.

What the gate says of real runs depends on the host's noise, so it is measured here and reported,
not asserted in CTest (the gate's logic is tested on made samples: tests/harness/test_regress_unit).
Each run is `sax bench coll` all_reduce at 1, 4 and 16 KiB (latency-bound: where this machine's
scheduling noise dominates), 2000 iterations a size, each its own sample, under mpirun -np 4.
A run is split into two interleaved halves (blocks of 20 iterations: even blocks against odd
ones), so both halves saw the same background load; separate launches on 2 cores differ by up to
2.5x in latency, which would measure the machine, not the gate.

  1. false alarms: RUNS runs, each half against the other (alternating which is the baseline);
  2. power: one run whose odd blocks really run 10 % slower (SAX_BENCH_INJECT_SLOWDOWN=0.1,
     SAX_BENCH_INJECT_BLOCK=20): even half against odd half, caught or missed (regress's table).

Usage: scripts/regress_gate.py [--runs N] [--build DIR]    (as root: Open MPI's variables are set)
Exit 0 when no false alarm was raised and the slowdown was caught, 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

BLOCK = 20


def bench(sax, out, env=None):
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **(env or {}))
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1", "-np", "4", sax,
           "bench", "coll", "--op", "all_reduce", "-b", "1K", "-e", "16K", "-f", "4", "-n", "2000", "-w", "50",
           "--min-sample-us", "0", "--json", out]
    r = subprocess.run(cmd, env=e, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"regress_gate: bench coll failed ({r.returncode}): {r.stderr.strip()}")


def half(path, parity):
    """Blocks 0, 2, 4, ... (parity 0) or 1, 3, 5, ... (parity 1) of every result, as a file."""
    with open(path) as f:
        j = json.load(f)
    for res in j["results"]:
        res["times_us"] = [t for i, t in enumerate(res["times_us"]) if (i // BLOCK) % 2 == parity]
    out = f"{path}.{parity}.json"
    with open(out, "w") as f:
        json.dump(j, f)
    return out


def regress(sax, baseline, current):
    r = subprocess.run([sax, "regress", "--baseline", baseline, "--current", current], capture_output=True, text=True)
    if r.returncode not in (0, 1):
        sys.exit(f"regress_gate: regress failed ({r.returncode}): {r.stderr.strip()}")
    return r.returncode, r.stdout + r.stderr


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=10, help="re-runs for the false-alarm count (default 10)")
    p.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    a = p.parse_args()
    if not 1 <= a.runs <= 1000:
        sys.exit("regress_gate: --runs: expected 1 to 1000")
    sax = os.path.join(a.build, "sax")
    if not os.access(sax, os.X_OK):
        sys.exit(f"regress_gate: {sax}: not built (./scripts/build.sh sax)")
    with tempfile.TemporaryDirectory() as t:
        alarms = 0
        for i in range(a.runs):
            run = os.path.join(t, f"run{i}.json")
            bench(sax, run)
            code, out = regress(sax, half(run, i % 2), half(run, 1 - i % 2))
            alarms += code == 1
            print(f"[{i + 1}/{a.runs}] identical halves: {'FALSE ALARM' if code else 'no alarm'}", flush=True)
            if code:
                print(out)
        ab = os.path.join(t, "ab.json")
        bench(sax, ab, {"SAX_BENCH_INJECT_SLOWDOWN": "0.1", "SAX_BENCH_INJECT_BLOCK": str(BLOCK)})
        code, out = regress(sax, half(ab, 0), half(ab, 1))
        print(out)
        print(f"false alarms: {alarms} of {a.runs} comparisons of identical halves")
        print(f"10 % slowdown of the odd blocks: {'caught' if code == 1 else 'MISSED'} (regress exit {code})")
    return 0 if alarms == 0 and code == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
