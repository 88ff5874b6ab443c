#!/usr/bin/env bash
# Uneven inputs on the paced testbed: one layout run with a long-tailed length distribution placed
# as loaded (none), sorted and balanced, then each run's step (median over its steps), each rank's
# idle (its waits for the others: the stragglers' cost) and the busiest DP rank's work over the mean.
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
done
python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
print(f"{'balance':9s} {'step s':>8s} {'idle s (mean, max over ranks)':>30s} {'busiest DP rank / mean':>23s} {'overrun %':>9s}")
for b in ("none", "sorted", "balanced"):
    j = json.load(open(f"{out}/{b}.json"))
    idle = [r["breakdown_s"]["idle"] for r in j["ranks"]]
    print(f"{b:9s} {j['step_time_s']['median']:8.3f} {statistics.mean(idle):19.3f}, {max(idle):8.3f} "
          f"{j['inputs']['work_max_over_mean']:23.3f} {j.get('pacing', {}).get('overrun_pct', 0):9.2f}")
PY
