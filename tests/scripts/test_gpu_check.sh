#!/usr/bin/env bash
# scripts/gpu-check.sh on the build it is given: its CPU-side parts pass (the net
# plugin's tests, the plugin mode's launch plan) and, without a GPU, every GPU step is listed as
# skipped with the reason, in the table and in summary.json; with a GPU every step must pass. A
# build without the plugin's tests fails the check (exit 1), naming the step.
# Usage: test_gpu_check.sh SOURCE_DIR BUILD_DIR
set -u
src=$1 build=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$src/scripts/gpu-check.sh" --no-build "$build" "$out/ok" > "$out/ok.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$out/ok.log"; fail "gpu-check exit $rc on a complete build"; }
python3 - "$out/ok/summary.json" << 'PY' || fail "summary.json"
import json, subprocess, sys
steps = {s["step"]: s for s in json.load(open(sys.argv[1]))["steps"]}
for cpu in ("test_net_plugin", "test_net_plugin_abi", "launch-plan"):
    assert steps[cpu]["status"] == "passed", steps.get(cpu)
assert steps["launch-plan"]["figures"] == {"variables": 5}, steps["launch-plan"]
gpu = subprocess.run("nvidia-smi -L", shell=True, capture_output=True, text=True).stdout.startswith("GPU")
for name in ("gemm-4096", "gemm-8192", "attention", "run-trace", "trace-contents", "nccl-allreduce", "plugin-link"):
    status = steps[name]["status"]
    if gpu:
        assert status == "passed", (name, status)
    else:
        assert status.startswith("skipped: ") and len(status) > len("skipped: "), (name, status)
print("summary ok:", len(steps), "steps")
PY
grep -q "^test_net_plugin  *passed" "$out/ok.log" || fail "the table has no passed row for test_net_plugin"

# A build without the plugin's tests (an empty folder): exit 1, the missing step named.
mkdir -p "$out/empty"
"$src/scripts/gpu-check.sh" --no-build "$out/empty" "$out/bad" > "$out/bad.log" 2>&1
rc=$?
[ $rc -eq 1 ] || { cat "$out/bad.log"; fail "gpu-check exit $rc on an empty build, expected 1"; }
grep -q "^test_net_plugin  *FAILED (not built)" "$out/bad.log" || { cat "$out/bad.log"; fail "the missing test is not named"; }
echo "gpu-check: CPU-side parts pass; an incomplete build fails"
