#!/usr/bin/env bash
# scripts/published_runs.py on the repo's published runs with this build's sax: every run is a row
# and the summary counts them; --device keeps the runs on that device alone; --calibration
# predicts with the file (a compute-only profile made here at half the GEMM curve's efficiency is
# slower on every run) and needs --device, a calibration from runs does not; --cross-validated
# sets the datasheet's error beside the held-out one; a device no run has exits 2 with one line.
set -uo pipefail
src=${1:?usage: test_published_runs.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: test_published_runs.sh SOURCE_DIR BUILD_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run() { python3 "$src/scripts/published_runs.py" --sax "$build/sax" "$@" >"$tmp/out" 2>"$tmp/err"; }
# count DEVICE: the runs whose cluster's device name contains DEVICE ("" every run).
count() {
  python3 - "$src" "$1" <<'PY'
import json, os, sys
src, device = sys.argv[1], sys.argv[2]
runs = json.load(open(os.path.join(src, "configs/published_runs.json")))["runs"]
print(sum(device in json.load(open(os.path.join(src, r["cluster"])))["device"]["name"] for r in runs))
PY
}
# steps FILE: the predicted step times, in row order (the predicted column: "X s", or "... (step X s)").
steps() {
  awk -F'|' '$2 ~ /^ [a-z]/ && $2 !~ /^ run / { p = $5; if (match(p, /step [0-9.]+ s/)) p = substr(p, RSTART + 5);
    match(p, /[0-9.]+/); print substr(p, RSTART, RLENGTH) }' "$1"
}

run || fail "every run: exit $?: $(cat "$tmp/err")"
all=$(count "")
grep -q "step time over the $all predicted runs" "$tmp/out" || fail "every run: not $all runs summed: $(tail -1 "$tmp/out")"
cp "$tmp/out" "$tmp/all"

# The repository's calibration from these runs (calibrate --runs): no --device (it names its
# generations); every run slower than the datasheet's (its GEMM factors are below 1); and its
# held-out column beside the datasheet's, per run and per device.
cal="$src/configs/calibrations/published.json"
run --calibration "$cal" || fail "--calibration (runs): exit $?: $(cat "$tmp/err")"
paste <(steps "$tmp/all") <(steps "$tmp/out") >"$tmp/pairs"
[ "$(wc -l <"$tmp/pairs")" -eq "$all" ] || fail "--calibration (runs): $(wc -l <"$tmp/pairs") steps, expected $all"
awk '$2 <= $1 { bad = 1 } END { exit bad }' "$tmp/pairs" || fail "--calibration (runs): a run not slower"
run --cross-validated "$cal" || fail "--cross-validated: exit $?: $(cat "$tmp/err")"
grep -q "^Cross-validated" "$tmp/out" || fail "--cross-validated: no table"
[ "$(grep -c ' runs: datasheet mean |error|.*; held out mean |error|' "$tmp/out")" -eq 2 ] ||
  fail "--cross-validated: not one summary per device: $(tail -2 "$tmp/out")"

run --device H100 || fail "--device H100: exit $?: $(cat "$tmp/err")"
h100=$(count H100)
[ "$h100" -gt 0 ] || fail "no H100 run in the repo"
grep -q "step time over the $h100 predicted runs" "$tmp/out" || fail "--device H100: not $h100 runs: $(tail -1 "$tmp/out")"
grep -q "selene" "$tmp/out" && fail "--device H100 kept an A100 run"
cp "$tmp/out" "$tmp/datasheet"

# A profile as `calibrate --model` on one GPU writes it: the GEMM curve and the HBM fraction alone.
cat >"$tmp/profile.json" <<'JSON'
{"version": 1, "kind": "calibration",
 "provenance": {"backend": "cuda", "cluster": "profile-1gpu.json", "tool": "made by test_published_runs.sh"},
 "compute": {"gemm": {"curve": [{"flops": 1e9, "efficiency": 0.2}, {"flops": 1e12, "efficiency": 0.4}],
                      "fit": {"r2": 1, "max_rel_error": 0, "samples": 2}},
             "hbm_efficiency": 0.8}}
JSON
run --calibration "$tmp/profile.json" --device H100 || fail "--calibration: exit $?: $(cat "$tmp/err")"
grep -q "predicted with the calibration $tmp/profile.json, on the runs whose device is H100" "$tmp/out" ||
  fail "--calibration: not said: $(head -2 "$tmp/out")"
grep -q "step time over the $h100 predicted runs" "$tmp/out" || fail "--calibration: not $h100 runs"
paste <(steps "$tmp/datasheet") <(steps "$tmp/out") >"$tmp/pairs"
[ "$(wc -l <"$tmp/pairs")" -eq "$h100" ] || fail "--calibration: $(wc -l <"$tmp/pairs") step times, expected $h100"
awk '$2 <= $1 { bad = 1 } END { exit bad }' "$tmp/pairs" || fail "--calibration: a run not slower: $(cat "$tmp/pairs")"

python3 "$src/scripts/published_runs.py" --sax "$build/sax" --calibration "$tmp/profile.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] || fail "--calibration without --device: exit $rc"
grep -q "expected --device too" "$tmp/err" || fail "--calibration without --device: $(cat "$tmp/err")"

run --device NoSuchGPU
rc=$?
[ $rc -eq 2 ] || fail "--device NoSuchGPU: exit $rc"
[ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "no run on a device named like 'NoSuchGPU'" "$tmp/err" ||
  fail "--device NoSuchGPU: $(cat "$tmp/err")"

[ $failures -eq 0 ] && echo "published_runs.py: all checks passed"
exit $((failures > 0))
