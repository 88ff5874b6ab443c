#!/usr/bin/env bash
# Prioritised against equal traffic on the boundary, measured and predicted: local4-pp2-dp8 (its
# DP sync overlapped and both it and the pipeline crossing the uplinks of every building) as it is
# and with the pipeline's messages ahead of the DP sync's (schedule.link_priority ["pp"]).
#   software  both layouts under the software emulator, which gives the priority and serves each
#             message whole in order (validate prices that boundary so);
#   netns     the equal layout (and local4-pp4-dp4, an order needs two) on the kernel's qdisc,
#             whose packets of concurrent flows share the link (no priority class there).
# Per layout: the step and the parts that move (DP, PP, idle) predicted and measured, then the
# priority's gain on each.
#
#   scripts/priority_check.sh [CLUSTER] [OUT]
#     defaults: configs/clusters/local-4bld.json, out/priority
# CLUSTER is best the one `calibrate --held-cluster` wrote (a device this host holds).
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=${1:-configs/clusters/local-4bld.json}
out=${2:-out/priority}
model=configs/models/gpt-tiny.json
layouts=configs/layouts
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
build/sax validate --cluster "$cluster" --model "$model" --emulate software --top 0 --spread 0 \
  --layout "$layouts/local4-pp2-dp8.json" --layout "$layouts/local4-pp2-dp8-pp-first.json" \
  --json "$out/software.json" | grep -E '^  (boundary|\[)'
build/sax validate --cluster "$cluster" --model "$model" --emulate netns --top 0 --spread 0 \
  --layout "$layouts/local4-pp2-dp8.json" --layout "$layouts/local4-pp4-dp4.json" \
  --json "$out/netns.json" | grep -E '^  (boundary|\[)'
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print(f"{'boundary':9s} {'layout':24s} {'step pred':>9s} {'meas':>7s} {'error':>7s}   "
      f"{'dp pred':>7s} {'meas':>6s} {'pp pred':>7s} {'meas':>6s} {'idle pred':>9s} {'meas':>6s}")
steps = {}
for boundary in ("software", "netns"):
    for y in json.load(open(f"{out}/{boundary}.json"))["layouts"]:
        if y.get("measured") is None:
            print(f"{boundary:9s} {y['label']:24s} failed (exit {y.get('exit_code')})")
            continue
        p, m = y["predicted"], y["measured"]
        ps, ms = p["step_time_s"], m["step_time_s"]["median"]
        pb, mb = p["breakdown_s"], m["breakdown_s"]
        steps[(boundary, y["label"])] = (ps, ms)
        print(f"{boundary:9s} {y['label']:24s} {ps:9.3f} {ms:7.3f} {100 * (ps - ms) / ms:+6.1f}%   "
              f"{pb['dp_comm']:7.3f} {mb['dp_comm']:6.3f} {pb['pp_comm']:7.3f} {mb['pp_comm']:6.3f} "
              f"{pb['idle']:9.3f} {mb['idle']:6.3f}")
eq, first = steps.get(("software", "local4-pp2-dp8")), steps.get(("software", "local4-pp2-dp8-pp-first"))
if eq and first:
    print(f"priority's gain on the software boundary: predicted {eq[0] - first[0]:.3f} s "
          f"({100 * (eq[0] - first[0]) / eq[0]:.1f} %), measured {eq[1] - first[1]:.3f} s "
          f"({100 * (eq[1] - first[1]) / eq[1]:.1f} %)")
PY
