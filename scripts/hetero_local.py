#!/usr/bin/env python3
"""Buildings that differ, on the CPU testbed: one building emulated 2x slower (local-2bld-slow), the balanced
pipeline split measured against the even split, beside the prediction.

Calibrates the testbed as it is (local-2bld: no building slowed, so the fitted efficiencies are
the device's own), then for the even split (local-pp2-dp2: 2 + 2 of gpt-tiny's layers, stage 1 in
the slowed bld-b) and the balanced one (local-pp2-dp2-balanced: 3 + 1, the split `sax predict`
gives for this cluster) runs `sax run` through `sax launch` on local-2bld-slow and predicts each
with the calibration. Prints measured (median step, min, max) and predicted step time, the error,
and the gain of the balanced split, measured and predicted.

Usage: scripts/hetero_local.py [--steps N] [--emulate netns|software|none] [--sax build/sax]
                               [--calibration K] (K: an existing calibration of local-2bld)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNIFORM = os.path.join(ROOT, "configs/clusters/local-2bld.json")
SLOW = os.path.join(ROOT, "configs/clusters/local-2bld-slow.json")
MODEL = os.path.join(ROOT, "configs/models/gpt-tiny.json")
LAYOUTS = [("even 2+2", "configs/layouts/local-pp2-dp2.json"),
           ("balanced 3+1", "configs/layouts/local-pp2-dp2-balanced.json")]


def sh(args):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (r.returncode, " ".join(args), r.stdout[-3000:]))
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--emulate", default="netns")
    ap.add_argument("--sax", default=os.path.join(ROOT, "build/sax"))
    ap.add_argument("--calibration", default="")
    a = ap.parse_args()
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    tmp = tempfile.mkdtemp(prefix="sax-hetero-")
    k = a.calibration
    if not k:
        k = os.path.join(tmp, "calibration.json")
        print("calibrating local-2bld (%s boundary) ..." % a.emulate, flush=True)
        sh([a.sax, "launch", "--cluster", UNIFORM, "--emulate", a.emulate, "--", "calibrate", "--cluster", UNIFORM,
            "--model", MODEL, "--out", k])
    rows = []
    for name, layout in LAYOUTS:
        layout = os.path.join(ROOT, layout)
        out = os.path.join(tmp, os.path.basename(layout))
        print("running %s ..." % name, flush=True)
        sh([a.sax, "launch", "--cluster", SLOW, "--emulate", a.emulate, "--", "run", "--cluster", SLOW, "--model",
            MODEL, "--layout", layout, "--steps", str(a.steps), "--warmup", "1", "--json", out])
        run = json.load(open(out))
        slowed = sorted({r["compute_slowdown"] for r in run["ranks"]})
        pj = os.path.join(tmp, "predict-" + os.path.basename(layout))
        text = sh([a.sax, "predict", "--cluster", SLOW, "--model", MODEL, "--layout", layout, "--calibration", k,
                   "--json", pj])
        pred = json.load(open(pj))
        rows.append((name, run["step_time_s"], pred["predicted"]["step_time_s"], slowed,
                     pred["heterogeneous"]["balanced_pipeline_layout"]))
        print(text)
    print("\n%-14s %10s %10s %10s %10s %8s  %s" % ("split", "measured", "min", "max", "predicted", "error",
                                                   "ranks' compute_slowdown"))
    for name, m, p, slowed, _ in rows:
        print("%-14s %9.4fs %9.4fs %9.4fs %9.4fs %+7.1f%%  %s" % (name, m["median"], m["min"], m["max"], p,
                                                                100 * (p / m["median"] - 1), slowed))
    (_, me, pe, _, bal), (_, mb, pb, _, _) = rows
    print("balanced against even: measured %+.1f%%, predicted %+.1f%% (predict's balanced split for the even "
          "layout: %s)" % (100 * (mb["median"] / me["median"] - 1), 100 * (pb / pe - 1), bal))


if __name__ == "__main__":
    main()
