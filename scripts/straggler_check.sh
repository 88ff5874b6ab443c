#!/usr/bin/env bash
# The straggler what-if on the paced testbed: `explore --straggler` prices a building F times
# slower for the listed layouts under uneven inputs (placed by the balanced placement), then the
# first three layouts of distinct degrees each run three ways, beside what was predicted:
#   base        the cluster as it is;
#   slowed      the building's ranks F times slower by `run --slow-rank`, which the balancer is not
#               told of (the straggler's cost);
#   rebalanced  the cluster file declaring the building F times slower (compute_slowdown), which
#               the balancer weighs: each DP rank gets sequences at its speed (the mitigation).
#
#   scripts/straggler_check.sh [CLUSTER] [CALIBRATION] [BUILDING:F] [LENGTHS] [OUT]
#     defaults: configs/clusters/local-4bld.json, none, 1:1.2, lognormal:median=48,sigma=1.0,
#               out/straggler
# CLUSTER is best the one the demo or `calibrate --held-cluster` wrote (a device this host holds).
# Needs build/sax; runs each through `sax launch` (netns where permitted).
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=${1:-configs/clusters/local-4bld.json}
calibration=${2:-}
straggler=${3:-1:1.2}
lengths=${4:-lognormal:median=48,sigma=1.0}
out=${5:-out/straggler}
model=configs/models/gpt-tiny.json
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
build/sax explore --cluster "$cluster" --model "$model" ${calibration:+--calibration "$calibration"} --top 8 \
  --lengths "$lengths" --balance balanced --straggler "$straggler" --json "$out/explore.json" | sed -n '/^straggler/,$p'
# The layouts, the slowed cluster file and the building's ranks.
slow_ranks=$(python3 - "$cluster" "$out" <<'PY'
import json, sys
cluster, out = sys.argv[1], sys.argv[2]
x = json.load(open(f"{out}/explore.json"))
s = x["straggler"]
c = json.load(open(cluster))
names = [b["name"] for b in c["buildings"]]
b = names.index(s["building"])
c["buildings"][b]["compute_slowdown"] = c["buildings"][b].get("compute_slowdown", 1.0) * s["factor"]
json.dump(c, open(f"{out}/slowed.json", "w"), indent=1)
per_node = lambda bl: bl.get("devices_per_node", c["devices_per_node"])
first = sum(bl["nodes"] * per_node(bl) for bl in c["buildings"][:b])
n = c["buildings"][b]["nodes"] * per_node(c["buildings"][b])
seen, picked = set(), []
for y in s["layouts"]:
    l = y["layout"]
    key = tuple(l.get(k) for k in ("tensor_model_parallel_size", "context_parallel_size", "pipeline_model_parallel_size",
                                    "micro_batch_size"))
    if key in seen:
        continue
    seen.add(key)
    picked.append(y)
    json.dump(l, open(f"{out}/layout-{len(picked)}.json", "w"), indent=1)
    if len(picked) == 3:
        break
json.dump(picked, open(f"{out}/picked.json", "w"), indent=1)
print(",".join(str(r) for r in range(first, first + n)) + ":" + str(s["factor"]))
PY
)
for i in 1 2 3; do
  [ -f "$out/layout-$i.json" ] || continue
  for way in base slowed rebalanced; do
    c=$cluster extra=()
    [ "$way" = slowed ] && extra=(--slow-rank "$slow_ranks")
    [ "$way" = rebalanced ] && c=$out/slowed.json
    echo "== layout $i $way"
    build/sax launch --cluster "$c" -- run --cluster "$c" --model "$model" --layout "$out/layout-$i.json" \
      --lengths "$lengths" --balance balanced --steps 3 "${extra[@]}" --json "$out/run-$i-$way.json" |
      grep -E '^(step time|compute paced)' | cut -c1-160
  done
done
python3 - "$out" "$cluster" <<'PY'
import json, os, sys
out = sys.argv[1]
c = json.load(open(sys.argv[2]))
world = sum(b["nodes"] * b.get("devices_per_node", c["devices_per_node"]) for b in c["buildings"])
picked = json.load(open(f"{out}/picked.json"))
print(f"{'layout':34s} {'way':10s} {'measured':>9s} {'predicted':>9s} {'error':>7s} {'overrun %':>9s}")
for i, y in enumerate(picked, 1):
    l = y["layout"]
    tp, cp, pp = (l[k] for k in ("tensor_model_parallel_size", "context_parallel_size", "pipeline_model_parallel_size"))
    name = "TP%d CP%d PP%d DP%d mbs%d" % (tp, cp, pp, world // (tp * cp * pp), l["micro_batch_size"])
    for way, key in (("base", "step_time_s"), ("slowed", "slowed_step_time_s"), ("rebalanced", "rebalanced_step_time_s")):
        f = f"{out}/run-{i}-{way}.json"
        if not os.path.exists(f):
            continue
        j = json.load(open(f))
        m, p = j["step_time_s"]["median"], y[key]
        print(f"{name:34s} {way:10s} {m:9.3f} {p:9.3f} {100 * (p - m) / m:+6.1f}% "
              f"{j.get('pacing', {}).get('overrun_pct', 0):9.2f}")
PY
