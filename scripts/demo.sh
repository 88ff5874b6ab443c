#!/usr/bin/env bash
# The whole loop on the built-in CPU testbeds: install what is missing, build, set up the building
# boundaries, calibrate the links, explore, validate the explorer's layouts against measured steps
# on local-2bld (4 ranks: gpt-tiny and moe-tiny) and on local-4bld (16 ranks on the same host:
# gpt-tiny), and write a report folder (calibration, explore and validate JSON, plots, the best
# layout's merged trace, index.html). Both testbeds' devices are paced (each op held to the
# device's time), so the calibration fits the links and compute is what the device declares: the
# preset's device, or where this host cannot carry it, the slower one the calibration found held
# (written to REPORT_DIR/local-2bld.json and local-4bld.json, and used from then on).
#
#   ./scripts/demo.sh [REPORT_DIR]      (default: out/demo; SAX_DEMO_STEPS=N measured steps per layout)
set -euo pipefail
cd "$(dirname "$0")/.."
report=${1:-out/demo}
steps=${SAX_DEMO_STEPS:-2}
start=$(date +%s)
stage() { printf '\n== [%3ds] %s\n' "$(($(date +%s) - start))" "$*"; }

stage "1/8 install what is missing, build"
./scripts/install-deps.sh
# The demo runs the CPU testbed: the CUDA path (which takes minutes of nvcc) only when asked for
# (SAX_CUDA=AUTO or ON); ./scripts/test.sh builds it wherever a toolkit is found.
SAX_CUDA=${SAX_CUDA:-OFF} ./scripts/build.sh sax >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
C2=configs/clusters/local-2bld.json
C4=configs/clusters/local-4bld.json
GPT=configs/models/gpt-tiny.json
MOE=configs/models/moe-tiny.json
L=configs/layouts
rm -rf "$report"
mkdir -p "$report"

stage "2/8 the testbeds: local-2bld (2 buildings x 1 node x 2 ranks) and local-4bld (4 x 2 x 2 = 16 ranks), paced devices"
build/sax check "$C2" "$C4" "$GPT" "$MOE" | tail -1
# Kernel shaping (network namespaces, tc, the delay helper) where this host permits it; else the
# software link emulator inside the communicators, which imposes the model's own alpha-beta.
emulate=$(build/sax launch --cluster "$C2" --dry-run -- run --cluster "$C2" | sed -n 's/^# sax launch: .*emulation \([a-z]*\).*/\1/p')
if [ "$emulate" != netns ]; then
  emulate=software
  echo "   kernel shaping is not permitted here: the boundary is the software link emulator (a weaker check)"
else
  echo "   the boundary is kernel-shaped: each device in its own network namespace behind a shaped NIC, each building behind a shaped uplink, a helper pacing and delaying what crosses"
fi

stage "3/8 calibrate local-2bld: collectives on every link class, and the paced device this host holds"
# A host slower than the one the preset was measured on cannot carry its device: every op would
# overrun, the step would be the host's, and validate would refuse the layouts. The sweep times the
# models' ops at the declared device and writes the cluster with its device slowed to the one this
# host held (as it was where held); the rest of the demo runs and prices that device.
build/sax launch --cluster "$C2" --emulate "$emulate" -- \
  calibrate --cluster "$C2" -e 4M -n 10 --model "$GPT" --model "$MOE" --out "$report/calibration.json" \
  --held-cluster "$report/local-2bld.json" 2>&1 |
  grep -E '^# (sax calibrate|[a-z_]+ +[a-z_]+ |cross-building boundary|paced device|wrote)' | cut -c1-230
C2=$report/local-2bld.json

stage "4/8 collectives across the boundary, with the calibration's alpha-beta lines"
build/sax launch --cluster "$C2" --emulate "$emulate" -- \
  bench coll --op all_reduce,all_gather,send_recv -b 4K -e 4M -f 4 -n 5 --group cross_building --cluster "$C2" \
  --json "$report/coll-cross-building.json" >/dev/null
python3 scripts/plots.py coll "$report/coll-cross-building.json" --calibration "$report/calibration.json" \
  --out "$report/coll.png" || echo "   (plots skipped)"

stage "5/8 explore local-2bld with the calibration: the best layouts of each model"
for m in "$GPT" "$MOE"; do
  n=$(basename "$m" .json)
  build/sax explore --cluster "$C2" --model "$m" --calibration "$report/calibration.json" --top 3 \
    --json "$report/explore-$n.json" | sed -n '1p;/^  #/,$p' | cut -c1-150
done

# validate's summary lines in its order (on a paced device what is not compute first), and that
# compute was paced.
summary() {
  sed -n '/^  not compute (\| layouts ran/,$p' | grep -E 'layouts ran|^  not compute \(|compute paced' | cut -c1-190
}

stage "6/8 validate local-2bld: the explorer's top layouts, others down its ranking, hand-picked ones, run and timed"
build/sax validate --cluster "$C2" --model "$GPT" --calibration "$report/calibration.json" --emulate "$emulate" \
  --top 3 --spread 2 --spread-within 3 --steps "$steps" \
  --layout $L/local-pp2-dp2.json --layout $L/local-pp2-dp2-interleaved.json \
  --layout $L/local-dp4-hierarchical.json --layout $L/local-dp4.json \
  --json "$report/validate-gpt-tiny.json" --plots "$report/gpt-tiny" --runs "$report/runs-gpt-tiny" | summary
build/sax validate --cluster "$C2" --model "$MOE" --calibration "$report/calibration.json" --emulate "$emulate" \
  --top 2 --spread 0 --steps "$steps" --layout $L/local-moe-ep2.json \
  --json "$report/validate-moe-tiny.json" --plots "$report/moe-tiny" --runs "$report/runs-moe-tiny" | summary

stage "7/8 local-4bld, 16 ranks on this host: calibrate its links, validate PP across 4 buildings, hierarchical DP16 and others"
build/sax launch --cluster "$C4" --emulate "$emulate" -- \
  calibrate --cluster "$C4" -b 4K -e 4M -f 4 -n 5 -w 2 --model "$GPT" --out "$report/calibration-4bld.json" \
  --held-cluster "$report/local-4bld.json" 2>&1 |
  grep -E '^# (cross_building +[a-z_]+ |cross-building boundary|paced device|wrote)' | cut -c1-230
C4=$report/local-4bld.json
build/sax validate --cluster "$C4" --model "$GPT" --calibration "$report/calibration-4bld.json" --emulate "$emulate" \
  --top 2 --spread 1 --spread-within 3 --steps "$steps" \
  --layout $L/local4-pp4-dp4.json --layout $L/local4-dp16-hierarchical.json --layout $L/local4-tp2-pp4-dp2.json \
  --json "$report/validate-local4-gpt-tiny.json" --plots "$report/local4-gpt-tiny" --runs "$report/runs-local4-gpt-tiny" |
  summary

stage "8/8 the report"
python3 scripts/plots.py report "$report" --title "sax demo: local-2bld and local-4bld ($emulate boundary)" || echo "   (report skipped)"
leftover=$( { ls /run/netns 2>/dev/null; ls /sys/class/net; } | grep -cE '^sax-[0-9]' || true)
python3 - "$report" <<'PY'
import json, sys
r = sys.argv[1]
for name, cluster in (("gpt-tiny", "local-2bld"), ("moe-tiny", "local-2bld"), ("local4-gpt-tiny", "local-4bld")):
    s = json.load(open(f"{r}/validate-{name}.json"))
    x = s["summary"]
    f = lambda v, p: "n/a" if v is None else p % v
    # Kendall tau over a handful of layouts says little (two ranked in order give 1.00).
    few = f" (over {x['layouts']} layouts: it says little)" if x.get("kendall_tau_layouts_few") else ""
    model = s['inputs']['model'].rsplit('/', 1)[-1].removesuffix('.json')
    # Paced, compute matches by construction: the part that is not compute (the model's own) first.
    print(f"   {cluster} {model:9s} {x['layouts']} layouts: not compute MAPE "
          f"{f(x.get('non_compute_mape_pct'), '%.1f')} % ({f(x.get('non_compute_share_pct'), '%.0f')} % of the step); "
          f"step MAPE {f(x['mape_pct'], '%.1f')} %, Kendall tau {f(x['kendall_tau'], '%.2f')}{few}, "
          f"top-1 regret {f(x['top1_regret_pct'], '%.1f')} % "
          f"(compute {x.get('compute', 'native')}, {s['inputs']['emulation']} boundary)")
PY
echo "   report: $report/index.html; namespaces or links left behind: $leftover; $(($(date +%s) - start)) s in all"
