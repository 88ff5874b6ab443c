#!/usr/bin/env python3
"""sax run beside sax predict on the built-in two-building testbed (local-2bld, 4 ranks).

For each layout the MPI tests of `sax run` cover, runs `mpirun -np 4 sax run` (median of
--steps measured steps after one warm-up) and `sax predict`, and prints measured and predicted
step time with the error, and the measured breakdown (mean over ranks of each category). Then the
two comparisons that matter, from the same runs: exposed DP communication, blocking against
overlapped DP sync (DP4); idle time, 1F1B against interleaved (PP2 x DP2, same micro-batches).

With --emulate E the runs start through `sax launch --emulate E` (netns: each building's ranks
in its own namespace behind the shaped boundary; software: the link emulator in the
communicators; none: one host, unshaped); without it, through plain mpirun as before. --cases
picks layouts by name.

--cluster runs and prices another cluster file of the same shape (4 ranks), e.g. the one
`calibrate --held-cluster` wrote with the device this host holds.

Usage: scripts/run_vs_predict.py [--steps N] [--sax build/sax] [--emulate none|netns|software]
                                 [--technology NAME] [--cases a,b] [--calibration FILE]
                                 [--cluster FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = os.path.join(ROOT, "configs/clusters/local-2bld.json")


def sched(pipeline, dp_sync):
    return {"pipeline": pipeline, "dp_sync": dp_sync}


def preset(rel):
    with open(os.path.join(ROOT, "configs", rel)) as f:
        return json.load(f)


CASES = [
    ("dp4-blocking", "gpt-tiny", {"micro_batch_size": 2, "schedule": sched("1f1b", "blocking")}, []),
    ("dp4-overlapped", "gpt-tiny", {"micro_batch_size": 2, "schedule": sched("1f1b", "overlapped")}, []),
    ("dp4-distopt-blocking", "gpt-tiny",
     {"micro_batch_size": 2, "use_distributed_optimizer": True, "schedule": sched("1f1b", "blocking")}, []),
    ("dp4-hierarchical-distopt", "gpt-tiny",
     {"micro_batch_size": 2, "use_distributed_optimizer": True, "schedule": sched("1f1b", "hierarchical")}, []),
    ("tp2-dp2-full-recompute", "gpt-tiny",
     {"tensor_model_parallel_size": 2, "sequence_parallel": True, "recompute_granularity": "full",
      "micro_batch_size": 2, "schedule": sched("1f1b", "overlapped")}, []),
    ("tp2-pp2", "gpt-tiny", preset("layouts/local-tp2-pp2.json"), []),
    ("pp4-1f1b", "gpt-tiny",
     {"pipeline_model_parallel_size": 4, "micro_batch_size": 2, "schedule": sched("1f1b", "blocking")}, []),
    ("pp2-dp2-1f1b", "gpt-tiny",
     {"pipeline_model_parallel_size": 2, "micro_batch_size": 2, "schedule": sched("1f1b", "blocking")}, []),
    ("pp2-dp2-interleaved", "gpt-tiny",
     {"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2, "micro_batch_size": 2,
      "schedule": sched("interleaved", "blocking")}, []),
    ("pp2-dp2-interleaved-p2p-in-place", "gpt-tiny",
     {"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2, "micro_batch_size": 2,
      "overlap_p2p_comm": False, "schedule": sched("interleaved", "blocking")}, []),
    ("pp2-dp2-zero-bubble", "gpt-tiny",
     {"pipeline_model_parallel_size": 2, "micro_batch_size": 2, "schedule": sched("zero_bubble", "blocking")}, []),
    ("cp2-dp2", "gpt-tiny",
     {"context_parallel_size": 2, "micro_batch_size": 2, "schedule": sched("1f1b", "blocking")}, []),
    ("ep2-dp4-moe", "moe-tiny", preset("layouts/local-ep2-dp4.json"), []),
    ("ep2-dp4-moe-skew4", "moe-tiny", preset("layouts/local-ep2-dp4.json"), ["--router-skew", "4"]),
]

CATS = ["compute", "optimizer", "tp_comm", "cp_comm", "ep_comm", "dp_comm", "pp_comm", "idle", "other"]


def fail(message):
    """One line and exit 2, as the C++ commands end on bad input."""
    print("run_vs_predict.py: " + message, file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--sax", default=os.path.join(ROOT, "build/sax"))
    ap.add_argument("--emulate", help="start the runs through sax launch with this emulation")
    ap.add_argument("--technology", help="a network technology of local-2bld for the boundary")
    ap.add_argument("--cases", help="comma-separated layout names (default: all)")
    ap.add_argument("--cluster", default=CLUSTER, help="the cluster file (default: configs/clusters/local-2bld.json)")
    ap.add_argument("--calibration", help="a sax calibrate file for predict (default: the cluster's datasheet)")
    args = ap.parse_args()
    if args.steps < 1:
        fail("--steps: expected at least 1 measured step, got %d" % args.steps)
    known = [c[0] for c in CASES]
    unknown = [n for n in (args.cases.split(",") if args.cases else []) if n not in known]
    if unknown:
        fail("--cases: expected names among %s, got %s" % (", ".join(known), ", ".join(unknown)))
    cases = [c for c in CASES if not args.cases or c[0] in args.cases.split(",")]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    mpirun = ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1", "-np", "4"]
    if args.emulate:
        mpirun = [args.sax, "launch", "--cluster", args.cluster, "--emulate", args.emulate] + \
                 (["--technology", args.technology] if args.technology else []) + ["--"]
        print("# emulation %s%s" % (args.emulate, ", technology " + args.technology if args.technology else ""))
    predict_extra = ["--calibration", args.calibration] if args.calibration else []
    rows = {}
    print("%-26s %10s %10s %8s  %s" % ("layout", "measured_s", "predict_s", "error", "  ".join("%9s" % c for c in CATS)))
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, model, layout, extra) in enumerate(cases):
            lf = os.path.join(tmp, name + ".json")
            if args.emulate:  # the boundary the testbed emulates is the one the layout is priced on
                layout = json.loads(json.dumps(layout))
                layout.setdefault("schedule", {}).pop("network_technology", None)
                if args.technology:
                    layout["schedule"]["network_technology"] = args.technology
            with open(lf, "w") as f:
                json.dump(layout, f)
            mf = os.path.join(ROOT, "configs/models", model + ".json")
            out, pred = os.path.join(tmp, name + ".run.json"), os.path.join(tmp, name + ".predict.json")
            print("[%d/%d] %s" % (i + 1, len(cases), name), file=sys.stderr, flush=True)
            commands = [
                ("sax run", mpirun + ([] if args.emulate else [args.sax]) +
                 ["run", "--cluster", args.cluster, "--model", mf, "--layout", lf, "--steps", str(args.steps),
                  "--warmup", "1", "--json", out] + extra),
                ("sax predict", [args.sax, "predict", "--cluster", args.cluster, "--model", mf, "--layout", lf,
                                 "--json", pred] + predict_extra)]
            for what, command in commands:
                # sax said why on stderr (one line); the script adds which layout and ends there.
                done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL)
                if done.returncode != 0:
                    fail("%s: %s exited %d (its message above)" % (name, what, done.returncode))
            run, p = json.load(open(out)), json.load(open(pred))
            measured, predicted = run["step_time_s"]["median"], p["predicted"]["step_time_s"]
            mean = {c: sum(r["breakdown_s"][c] for r in run["ranks"]) / len(run["ranks"]) for c in CATS}
            rows[name] = (measured, predicted, mean)
            print("%-26s %10.3f %10.3f %+7.1f%%  %s" % (name, measured, predicted, 100 * (predicted - measured) / measured,
                                                       "  ".join("%9.4f" % mean[c] for c in CATS)), flush=True)
    if not all(k in rows for k in ("dp4-blocking", "dp4-overlapped", "pp2-dp2-1f1b", "pp2-dp2-interleaved")):
        return
    b, o = rows["dp4-blocking"][2]["dp_comm"], rows["dp4-overlapped"][2]["dp_comm"]
    print("\nexposed DP communication (mean over ranks): blocking %.4f s, overlapped %.4f s (%.0f%% of blocking)"
          % (b, o, 100 * o / b if b > 0 else float("nan")))
    f, v = rows["pp2-dp2-1f1b"][2]["idle"], rows["pp2-dp2-interleaved"][2]["idle"]
    print("idle (mean over ranks), PP2 x DP2, 4 micro-batches: 1f1b %.4f s, interleaved %.4f s (%.0f%% of 1f1b)"
          % (f, v, 100 * v / f if f > 0 else float("nan")))


if __name__ == "__main__":
    main()
