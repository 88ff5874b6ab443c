#!/usr/bin/env bash
# The emulated boundary measured back under netns (root): cross-building send_recv with one group
# alone and every group at once, on local-2bld (its own link and the 2:1 gbe-1-shared) and
# local-4bld, each set beside its cluster file by scripts/boundary_check.py; then one TCP flow
# (broadcast between two ranks) across local-2bld's lossy technologies, beside the rate the cost
# model gives them, with every value checked (#wrong). A benchmark, not a test: about 4 minutes.
#
#   scripts/boundary_check.sh [OUT_DIR]      (default out/boundary; needs build/sax)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/boundary}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
sax=build/sax
bench() {  # CLUSTER TECHNOLOGY NAME ARGS...
  local c=$1 t=$2 name=$3
  shift 3
  "$sax" launch --cluster "$c" --emulate netns ${t:+--technology "$t"} -- bench coll --cluster "$c" "$@" \
    --json "$out/$name.json" >"$out/$name.log" 2>&1 || { tail -5 "$out/$name.log" >&2; exit 1; }
}
step=0
say() { step=$((step + 1)); echo "== [$SECONDS s] $step/7 $*"; }

for c in local-2bld local-4bld; do
  f=configs/clusters/$c.json
  say "$c: send_recv inside a node (the host's own time per message)"
  bench "$f" "" "$c-floor" --group intra_node --op send_recv -b 8 -e 1K -f 8 -n 40 -w 4
  for t in "" $([ $c = local-2bld ] && echo gbe-1-shared); do
    say "$c${t:+ $t}: cross-building send_recv, one group alone, then every group"
    bench "$f" "$t" "$c${t:+-$t}-alone" --group cross_building --op send_recv -b 8 -e 16M -f 8 -n 20 -w 2 \
      --groups-at-once 1
    bench "$f" "$t" "$c${t:+-$t}-together" --group cross_building --op send_recv -b 8 -e 16M -f 8 -n 20 -w 2
    python3 scripts/boundary_check.py --cluster "$f" ${t:+--technology "$t"} --floor "$out/$c-floor.json" \
      "$out/$c${t:+-$t}-alone.json" "$out/$c${t:+-$t}-together.json"
  done
done

f=configs/clusters/local-2bld.json
for t in gbe-1-loss-0.1 gbe-1-loss-1; do
  say "local-2bld $t: one TCP flow (broadcast, 2 ranks), checked"
  bench "$f" "$t" "local-2bld-$t" --group cross_building --op broadcast -b 16M -e 32M -f 2 -n 3 -w 1 \
    --groups-at-once 1 --check
  python3 scripts/boundary_check.py --cluster "$f" --technology "$t" --op broadcast "$out/local-2bld-$t.json"
  python3 - "$out/local-2bld-$t.json" <<'EOF'
import json, sys
wrong = sum(r.get("wrong") or 0 for r in json.load(open(sys.argv[1]))["results"])
print(f"# #wrong over every size: {wrong}")
sys.exit(1 if wrong else 0)
EOF
done
echo "== [$SECONDS s] done: $out"
