#!/usr/bin/env bash
# Uneven inputs on the paced testbed: one layout run with a long-tailed length distribution placed
# as loaded (none), sorted and balanced, then each run's step (median over its steps) beside
# `sax predict --lengths`'s, the bubble and each rank's wait for the others (the stragglers' cost) and
# the busiest DP rank's work over the mean.
#
#   scripts/uneven_inputs.sh [CLUSTER] [LAYOUT] [LENGTHS] [OUT]
#     defaults: configs/clusters/local-4bld.json, configs/layouts/local4-pp4-dp4.json,
#               lognormal:median=48,sigma=1.0, out/uneven
# CLUSTER is best the one the demo or `calibrate --held-cluster` wrote (a device this host holds:
# the runs say how many ops overran). Needs build/sax; runs each through `sax launch` (netns where
# permitted).
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=${1:-configs/clusters/local-4bld.json}
layout=${2:-configs/layouts/local4-pp4-dp4.json}
lengths=${3:-lognormal:median=48,sigma=1.0}
out=${4:-out/uneven}
model=configs/models/gpt-tiny.json
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
for balance in none sorted balanced; do
  echo "== $balance"
  build/sax launch --cluster "$cluster" -- run --cluster "$cluster" --model "$model" --layout "$layout" \
    --lengths "$lengths" --balance "$balance" --steps 3 --json "$out/$balance.json" |
    grep -E '^(step time|inputs|compute paced)' | cut -c1-200
  build/sax predict --cluster "$cluster" --model "$model" --layout "$layout" --lengths "$lengths" \
    --balance "$balance" --json "$out/predict-$balance.json" | grep -E '^  inputs' | cut -c1-200
done
python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
print(f"{'balance':9s} {'step s':>7s} {'predicted':>9s} {'error':>7s}   {'bubble s':>8s} {'predicted':>9s}   "
      f"{'DP wait s':>9s} {'predicted':>9s}   {'busiest DP / mean':>17s} {'overrun %':>9s}")
for b in ("none", "sorted", "balanced"):
    j = json.load(open(f"{out}/{b}.json"))
    p = json.load(open(f"{out}/predict-{b}.json"))["inputs"]
    measured = j['step_time_s']['median']
    # The bubble: the pipeline's waits on the critical stage of the slowest DP rank, whose ranks
    # wait for no other DP rank (the least idle of that stage's ranks). The DP wait: how much
    # longer the rest of that stage's ranks wait, on average over the DP ranks (the slowest's 0),
    # idle and DP communication together: a rank that waits for the straggler counts the wait
    # before the straggler issued its last bucket as idle, and the buckets' transfers after it,
    # which the straggler's own backward hid, as DP communication (workload/README.md).
    stage = [r["breakdown_s"] for r in j["ranks"] if r["stage"] == p["critical_stage"]]
    bubble = min(b["idle"] for b in stage)
    waiting = [b["idle"] + b["dp_comm"] for b in stage]
    wait = statistics.mean(waiting) - min(waiting)
    print(f"{b:9s} {measured:7.3f} {p['step_time_s']:9.3f} {100 * (p['step_time_s'] - measured) / measured:+6.1f}%   "
          f"{bubble:8.3f} {p['bubble_s']:9.3f}   {wait:9.3f} {p['dp_wait_mean_s']:9.3f}   "
          f"{j['inputs']['work_max_over_mean']:17.3f} {j.get('pacing', {}).get('overrun_pct', 0):9.2f}")
PY
