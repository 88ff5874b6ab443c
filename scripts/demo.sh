#!/usr/bin/env bash
# The whole loop on the built-in two-building CPU testbed (configs/clusters/local-2bld.json):
# install what is missing, build, set up the building boundary, calibrate, explore, validate the
# explorer's layouts of gpt-tiny and moe-tiny against measured steps, and write a report folder
# (calibration, explore and validate JSON, plots, the best layout's merged trace, index.html).
#
#   ./scripts/demo.sh [REPORT_DIR]      (default: out/demo; SAX_DEMO_STEPS=N measured steps per layout)
set -euo pipefail
cd "$(dirname "$0")/.."
report=${1:-out/demo}
steps=${SAX_DEMO_STEPS:-2}
start=$(date +%s)
stage() { printf '\n== [%3ds] %s\n' "$(($(date +%s) - start))" "$*"; }

stage "1/7 install what is missing, build"
./scripts/install-deps.sh
# The demo runs the CPU testbed: the CUDA path (which takes minutes of nvcc) only when asked for
# (SAX_CUDA=AUTO or ON); ./scripts/test.sh builds it wherever a toolkit is found.
SAX_CUDA=${SAX_CUDA:-OFF} ./scripts/build.sh sax >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
C=configs/clusters/local-2bld.json
GPT=configs/models/gpt-tiny.json
MOE=configs/models/moe-tiny.json
rm -rf "$report"
mkdir -p "$report"

stage "2/7 the testbed: 2 buildings x 1 node x 2 ranks, boundary 1 Gbit/s and 1 ms one way"
build/sax check "$C" "$GPT" "$MOE" | tail -1
# Kernel shaping (network namespaces, tc, the delay helper) where this host permits it; else the
# software link emulator inside the communicators, which imposes the model's own alpha-beta.
emulate=$(build/sax launch --cluster "$C" --dry-run -- run --cluster "$C" | sed -n 's/^# sax launch: .*emulation \([a-z]*\).*/\1/p')
if [ "$emulate" != netns ]; then
  emulate=software
  echo "   kernel shaping is not permitted here: the boundary is the software link emulator (a weaker check)"
else
  echo "   the boundary is kernel-shaped: each building's ranks in its own network namespace, tc rate limit + delay helper"
fi

stage "3/7 calibrate: collectives on every link class, each layer op of both models, compute beside communication"
build/sax launch --cluster "$C" --emulate "$emulate" -- \
  calibrate --cluster "$C" --model "$GPT" --model "$MOE" -e 4M -n 10 --out "$report/calibration.json" 2>&1 |
  grep -E '^# (sax calibrate|[a-z_]+ +[a-z_]+ |gemm|memory|overlap|cross-building boundary|wrote)' | cut -c1-160

stage "4/7 collectives across the boundary, with the calibration's alpha-beta lines"
build/sax launch --cluster "$C" --emulate "$emulate" -- \
  bench coll --op all_reduce,all_gather,send_recv -b 4K -e 4M -f 4 -n 5 --group cross_building --cluster "$C" \
  --json "$report/coll-cross-building.json" >/dev/null
python3 scripts/plots.py coll "$report/coll-cross-building.json" --calibration "$report/calibration.json" \
  --out "$report/coll.png" || echo "   (plots skipped)"

stage "5/7 explore with the calibration: the best layouts of each model on the testbed"
for m in "$GPT" "$MOE"; do
  n=$(basename "$m" .json)
  build/sax explore --cluster "$C" --model "$m" --calibration "$report/calibration.json" --top 3 \
    --json "$report/explore-$n.json" | sed -n '1p;/^  #/,$p' | cut -c1-150
done

stage "6/7 validate: the explorer's top layouts, others spread down its ranking, and hand-picked ones, run and timed"
build/sax validate --cluster "$C" --model "$GPT" --calibration "$report/calibration.json" --emulate "$emulate" \
  --top 3 --spread 2 --steps "$steps" \
  --layout configs/layouts/local-pp2-dp2.json --layout configs/layouts/local-pp2-dp2-interleaved.json \
  --layout configs/layouts/local-dp4-hierarchical.json \
  --json "$report/validate-gpt-tiny.json" --plots "$report/gpt-tiny" --runs "$report/runs-gpt-tiny"
build/sax validate --cluster "$C" --model "$MOE" --calibration "$report/calibration.json" --emulate "$emulate" \
  --top 2 --spread 1 --steps "$steps" --layout configs/layouts/local-moe-ep2.json \
  --json "$report/validate-moe-tiny.json" --plots "$report/moe-tiny" --runs "$report/runs-moe-tiny"

stage "7/7 the report"
python3 scripts/plots.py report "$report" --title "sax demo: local-2bld ($emulate boundary)" || echo "   (report skipped)"
leftover=$( { ls /run/netns 2>/dev/null; ls /sys/class/net; } | grep -cE '^sax-[0-9]' || true)
python3 - "$report" <<'EOF'
import json, sys
r = sys.argv[1]
for m in ("gpt-tiny", "moe-tiny"):
    s = json.load(open(f"{r}/validate-{m}.json"))
    x = s["summary"]
    f = lambda v, p: "n/a" if v is None else p % v
    print(f"   {m:9s} {x['layouts']} layouts: MAPE {f(x['mape_pct'], '%.1f')} %, Kendall tau {f(x['kendall_tau'], '%.2f')}, "
          f"top-1 regret {f(x['top1_regret_pct'], '%.1f')} % ({s['inputs']['emulation']} boundary)")
EOF
echo "   report: $report/index.html; namespaces or links left behind: $leftover; $(($(date +%s) - start)) s in all"
