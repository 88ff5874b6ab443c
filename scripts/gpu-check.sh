#!/usr/bin/env bash
# Proves the GPU path in a few minutes wherever a GPU is lent: builds sax with CUDA,
# runs every test that needs a GPU, and measures cuBLAS bf16 GEMM TFLOP/s (4096³, 8192³), the
# attention kernel, NCCL all_reduce busbw, the CUPTI trace of one traced step (kernels and NCCL
# kernels present, dropped records 0), and the NCCL net plugin's emulated building boundary
# measured back between two ranks that share the one GPU as two hosts (`sax launch --emulate
# plugin`: each building its own NCCL_HOSTID, so NCCL's duplicate-GPU check, host hash + bus id,
# passes and the two connect through the plugin). Without a GPU (or without nvcc) the CPU-side
# parts still run and must pass: the plugin's tests and the launch plan of the plugin mode; each
# GPU step is listed as skipped, with the reason.
#
# Usage: scripts/gpu-check.sh [--no-build] [BUILD_DIR=build-gpu] [OUT_DIR=gpu-check]
#   --no-build: use BUILD_DIR as it is (CI runs the CPU-side parts on its own build this way).
# Each step's whole output goes to OUT_DIR/<step>.log and its last lines to stdout; each step is
# bounded by `timeout`; a failing step is reported and the next one runs. At the end one summary
# table, and OUT_DIR/summary.json with every step's status, seconds and figures. Exit 1 when any
# step failed.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
build=1
if [ "${1:-}" = "--no-build" ]; then
  build=0
  shift
fi
B=${1:-$ROOT/build-gpu}
OUT=${2:-gpu-check}
mkdir -p "$OUT" "$B"
OUT=$(cd "$OUT" && pwd)
B=$(cd "$B" && pwd)
SAX="$B/sax"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
STEPS="$OUT/steps.jsonl"
: > "$STEPS"
failed=0

# record NAME STATUS SECONDS [FIGURES_JSON]: one line of the summary.
record() {
  python3 -c 'import json, sys; print(json.dumps({"step": sys.argv[1], "status": sys.argv[2], "seconds": int(sys.argv[3]),
              "figures": json.loads(sys.argv[4])}))' "$1" "$2" "$3" "${4:-{\}}" >> "$STEPS"
}
skip() {
  echo "=== $1: skipped ($2)"
  record "$1" "skipped: $2" 0
}
# step NAME SECONDS COMMAND...: the whole output to OUT/NAME.log; on stdout its last LINES_SHOWN
# lines, or with SHOW set the lines matching that pattern. FIGURES (a command run after a
# successful step, printing a JSON object) gives the step's figures for the summary.
step() {
  local name=$1 limit=$2
  shift 2
  echo "=== $name ($(date +%T))"
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  if [ -n "${SHOW:-}" ]; then
    grep -E "$SHOW" "$OUT/$name.log" | tail -n "${LINES_SHOWN:-40}"
  else
    tail -n "${LINES_SHOWN:-25}" "$OUT/$name.log"
  fi
  # A failed step names what failed wherever in its log it was (a test's failure is rarely last).
  if [ $rc -ne 0 ]; then grep -E -A3 '(: Failure$|^\[  FAILED  \])' "$OUT/$name.log" | head -n 40; fi
  echo "=== $name: exit $rc in $((SECONDS - t0)) s"
  local figures='{}'
  if [ $rc -eq 0 ] && [ -n "${FIGURES:-}" ]; then
    figures=$(eval "$FIGURES" 2>> "$OUT/$name.log") || { figures='{}'; rc=1; echo "=== $name: its figures could not be read"; }
  fi
  [ $rc -eq 0 ] || failed=1
  record "$name" "$([ $rc -eq 0 ] && echo passed || echo "FAILED (exit $rc)")" $((SECONDS - t0)) "$figures"
}

# 0. Build: with CUDA where nvcc is, the CPU path otherwise (the CPU-side parts still run).
cuda=OFF
if command -v nvcc > /dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then cuda=ON; fi
gpu_tests="test_checks_cuda test_kernels test_ops test_collectives test_cupti_records"
if [ $build -eq 1 ]; then
  LINES_SHOWN=3 step build 1200 sh -c "cmake -S '$ROOT' -B '$B' -DSAX_CUDA=$cuda -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
    cmake --build '$B' -j $(nproc) --target sax coll_overhead test_net_plugin test_net_plugin_abi $([ $cuda = ON ] && echo "$gpu_tests")"
fi
have_cuda=0
# A CUDA build of sax links NCCL (and cudart, cuBLAS, CUPTI).
ldd "$SAX" 2> /dev/null | grep -q "libnccl" && have_cuda=1
gpu=""
if ! command -v nvidia-smi > /dev/null 2>&1; then
  gpu="no nvidia-smi: no GPU driver here"
elif ! nvidia-smi -L 2> /dev/null | grep -q "^GPU"; then
  gpu="nvidia-smi lists no GPU"
elif [ $have_cuda -eq 0 ]; then
  gpu="sax was built without CUDA (no nvcc, NCCL or CUPTI found)"
fi

# 1. CPU side, always: the plugin's tests (its boundary against a fake transport and its sockets on
# loopback; the built .so through every exported NCCL struct).
for t in test_net_plugin test_net_plugin_abi; do
  if [ -x "$B/tests/collectives/$t" ]; then
    LINES_SHOWN=4 step "$t" 120 "$B/tests/collectives/$t" --gtest_brief=1
  else
    echo "=== $t: not built"
    record "$t" "FAILED (not built)" 0
    failed=1
  fi
done

# Two emulated buildings with one device each on this host: the plugin's boundary between them
# (1 ms, 0.25 GB/s per device: slow enough that the plugin's own TCP transport and NCCL's slots
# carry it whole, see collectives/net_plugin/boundary.hpp).
python3 - "$ROOT" "$OUT" << 'PY'
import json, sys
root, out = sys.argv[1], sys.argv[2]
c = json.load(open(root + "/configs/clusters/h200-1node.json"))
c["name"] = "gpu-check-2bld"
c["buildings"] = [{"name": "bld-a", "nodes": 1}, {"name": "bld-b", "nodes": 1}]
c["devices_per_node"] = 1
c["links"]["cross_building"] = {"bandwidth_gbps": 0.25, "latency_us": 1000, "comment": "emulated by the net plugin"}
c.pop("network_technologies", None)
json.dump(c, open(out + "/cluster-2bld.json", "w"), indent=1)
PY
FIGURES='python3 -c "
import re, sys
t = open(sys.argv[1]).read()
need = [\"NCCL_NET_PLUGIN\", \"NCCL_HOSTID\", \"SAX_NET_BUILDING\", \"SAX_NET_LATENCY_US\", \"SAX_NET_BANDWIDTH_GBPS\"]
missing = [v for v in need if v not in t]
if missing: sys.exit(\"the plan lacks \" + \" \".join(missing))
print(\"{\\\"variables\\\": %d}\" % len(need))
" "$OUT/launch-plan.log"' LINES_SHOWN=4 step launch-plan 60 "$SAX" launch --cluster "$OUT/cluster-2bld.json" \
  --emulate plugin --dry-run -- bench coll --backend cuda --op send_recv
unset FIGURES

if [ -n "$gpu" ]; then
  echo "=== no GPU steps: $gpu"
  for s in gpu-tests gemm-4096 gemm-8192 attention profile run-trace trace-contents nccl-allreduce plugin-link; do skip "$s" "$gpu"; done
else
  echo "=== GPU"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"

  # 2. Every test that skips without a device.
  for t in spec/test_checks_cuda kernels/test_kernels kernels/test_ops collectives/test_collectives \
    profiles/test_cupti_records; do
    if [ -x "$B/tests/$t" ]; then LINES_SHOWN=6 step "test-${t##*/}" 240 "$B/tests/$t" --gtest_brief=1; fi
  done

  # 3. cuBLAS bf16 GEMM and the attention kernel, through the op runner.
  for n in 4096 8192; do
    FIGURES="python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))[\"results\"][0]; print(json.dumps({\"tflops\": round(r[\"tflops\"], 1), \"ms\": round(r[\"time_ms\"], 3), \"peak_share\": r[\"peak_share\"]}))' $OUT/gemm-$n.json" \
      LINES_SHOWN=3 step "gemm-$n" 120 "$SAX" bench kernels --backend cuda --op gemm --m $n --n $n --k $n -n 20 -w 5 \
      --cluster "$ROOT/configs/clusters/h200-1node.json" --json "$OUT/gemm-$n.json"
  done
  FIGURES="python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))[\"results\"][0]; print(json.dumps({\"tflops\": round(r[\"tflops\"], 1), \"ms\": round(r[\"time_ms\"], 3)}))' $OUT/attention.json" \
    LINES_SHOWN=3 step attention 120 "$SAX" bench kernels --backend cuda --op attention --m 4096 --n 4096 --k 128 \
    --heads 32 --kv-heads 8 -n 20 -w 5 --cluster "$ROOT/configs/clusters/h200-1node.json" --json "$OUT/attention.json"
  unset FIGURES

  # 3b. This GPU's compute profile: `sax calibrate --model` on it alone (one rank, no link), the
  # layer slices of a dense and a MoE model at TP 1 and micro-batches 1 and 2: cuBLAS GEMM
  # efficiency by FLOPs and the memory-bound ops' HBM fraction. The attention points are the own
  # SIMT flash kernel's, not what production runs, so profile.json keeps the GEMM curve and the
  # HBM fraction only. Then the published runs of this GPU generation predicted with it (Hopper
  # runs are on H100s; an H200 has their SMs and clocks).
  python3 - "$ROOT" "$OUT" << 'PY'
import json, subprocess, sys
root, out = sys.argv[1], sys.argv[2]
name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                      text=True).stdout.strip().splitlines()[0]
h100 = "H100" in name
c = json.load(open(root + ("/configs/clusters/published/dgx-h100-128.json" if h100 else "/configs/clusters/h200-1node.json")))
c["name"], c["buildings"], c["devices_per_node"] = "profile-1gpu", [{"name": "bld-a", "nodes": 1}], 1
c["comment"] = "the one lent GPU (" + name + ") as its datasheet gives it: what its compute profile is measured against"
c.pop("network_technologies", None)
c.pop("building_links", None)
json.dump(c, open(out + "/cluster-1gpu.json", "w"), indent=1)
PY
  FIGURES="python3 -c '
import json, sys
k = json.load(open(sys.argv[1]))
c = k[\"compute\"]
c.pop(\"attention\", None)
json.dump(k, open(sys.argv[2], \"w\"), indent=1)
g = c[\"gemm\"][\"curve\"]
print(json.dumps({\"gemm_points\": len(g), \"gemm_top\": round(max(p[\"efficiency\"] for p in g), 3),
                  \"hbm_efficiency\": round(c.get(\"hbm_efficiency\", 0), 3)}))
' $OUT/profile-raw.json $OUT/profile.json" SHOW='^# (gemm|attention|memory)|wrote|error' \
    step profile 420 mpirun --oversubscribe --bind-to none -np 1 "$SAX" calibrate --backend cuda \
    --cluster "$OUT/cluster-1gpu.json" --model "$ROOT/configs/models/llama3-8b.json" \
    --model "$ROOT/configs/models/llama3-70b.json" --model "$ROOT/configs/models/mixtral-8x7b.json" \
    --out "$OUT/profile-raw.json"
  unset FIGURES
  if [ -s "$OUT/profile.json" ]; then
    SHOW='step time over|error' step published-with-profile 300 python3 "$ROOT/scripts/published_runs.py" --sax "$SAX" \
      --calibration "$OUT/profile.json" --device H100
    SHOW='step time over|error' step published-datasheet 300 python3 "$ROOT/scripts/published_runs.py" --sax "$SAX" \
      --device H100
  fi

  # 4. One traced run on the GPU: two ranks sharing it (one NCCL host id each), DP2 with the
  # gradient sync overlapped, gpt-tiny; then the merged trace's contents.
  python3 - "$ROOT" "$OUT" << 'PY'
import json, sys
root, out = sys.argv[1], sys.argv[2]
c = json.load(open(root + "/configs/clusters/h200-1node.json"))
c["name"], c["devices_per_node"] = "h200-2ranks-1gpu", 2
json.dump(c, open(out + "/cluster-2.json", "w"), indent=1)
json.dump({"micro_batch_size": 2, "schedule": {"pipeline": "1f1b", "dp_sync": "overlapped"}},
          open(out + "/layout-dp2.json", "w"))
PY
  TWO="$OUT/two_ranks.sh"
  printf '%s\n' '#!/usr/bin/env bash' \
    'exec mpirun --oversubscribe --bind-to none --mca btl self,vader,tcp --mca pml ob1 -np 2 \' \
    '  sh -c '"'"'NCCL_HOSTID=sax-$OMPI_COMM_WORLD_RANK NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} exec "$@"'"'"' sh "$@"' \
    > "$TWO"
  chmod +x "$TWO"
  rm -rf "$OUT/trace"
  SHOW='via NET|NCCL version|sax run|step time|^ +[0-9]|# trace|error' step run-trace 240 env NCCL_DEBUG=INFO "$TWO" \
    "$SAX" run --backend cuda --cluster "$OUT/cluster-2.json" --model "$ROOT/configs/models/gpt-tiny.json" \
    --layout "$OUT/layout-dp2.json" --steps 3 --warmup 1 --json "$OUT/run.json" --trace "$OUT/trace"
  "$SAX" trace merge "$OUT/trace" -o "$OUT/trace-merged.json" > "$OUT/trace-merge.log" 2>&1
  FIGURES="cat $OUT/trace-figures.json" step trace-contents 60 python3 -c '
import collections, json, sys
d = json.load(open(sys.argv[1]))
xs = [e for e in d["traceEvents"] if e.get("ph") == "X"]
print("events by category:", dict(collections.Counter(e["cat"] for e in xs)))
def on_gpu(e):  # device stream lanes (profiles/chrome_trace.hpp: trace_thread_id)
    return 0x40000000 <= e["tid"] < 0x60000000
kern = [e for e in xs if on_gpu(e) and e["cat"] in ("compute", "communication")]
nccl = [e for e in kern if e["name"].startswith("nccl")]
nvtx = [e for e in xs if e["cat"] == "range"]
print(f"GPU kernels {len(kern)} (NCCL {len(nccl)}), NVTX ranges {len(nvtx)}")
print("most frequent kernels:", collections.Counter(e["name"][:60] for e in kern).most_common(4))
# Clock alignment: the executor synchronises after each op, so a kernel carrying the id of an op
# (external correlation) must lie inside the span of that op on the host clock.
host = {(e["pid"], e["args"]["external_id"]): e for e in xs
        if not on_gpu(e) and e["cat"] in ("compute", "communication") and "external_id" in e.get("args", {})}
inside = tagged = 0
for k in kern:
    h = host.get((k["pid"], k.get("args", {}).get("external_id")))
    if h is None:
        continue
    tagged += 1
    inside += h["ts"] - 5 <= k["ts"] and k["ts"] + k["dur"] <= h["ts"] + h["dur"] + 5
print(f"kernels tied to a host op: {tagged}; inside the host span of that op (5 us slack): {inside}")
ranks = d.get("otherData", {}).get("sax_ranks", [])
dropped = sum(r.get("cupti_dropped", 1) for r in ranks)
for r in ranks:
    print({k: r.get(k) for k in ("rank", "events", "dropped", "cupti_events", "cupti_dropped", "cupti_malformed",
                                 "clock_residual_ns")})
json.dump({"gpu_kernels": len(kern), "nccl_kernels": len(nccl), "nvtx_ranges": len(nvtx), "cupti_dropped": dropped,
           "inside_host_span": f"{inside}/{tagged}"}, open(sys.argv[2], "w"))
sys.exit(0 if kern and nccl and nvtx and ranks and dropped == 0 else 1)
' "$OUT/trace-merged.json" "$OUT/trace-figures.json"

  # 5. NCCL as bench coll times it against a bare NCCL loop, then all_reduce busbw at 1 GiB.
  if [ -x "$B/bench/coll_overhead" ]; then
    LINES_SHOWN=45 step coll-overhead 300 "$TWO" "$B/bench/coll_overhead" 7 1K,64K,1M,16M all cuda 20
  fi
  FIGURES="python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))[\"results\"][-1]; print(json.dumps({\"busbw_gbps\": round(r[\"busbw_gbps\"], 1), \"bytes\": r[\"bytes\"]}))' $OUT/allreduce-1g.json" \
    LINES_SHOWN=6 step nccl-allreduce 180 "$TWO" "$SAX" bench coll --backend cuda -b 1G -e 1G -n 10 -w 3 \
    --json "$OUT/allreduce-1g.json"

  # 6. The plugin's boundary measured back: send_recv between the two buildings (one rank each,
  # the one GPU shared) through `sax launch --emulate plugin`; small messages give the latency,
  # 64 MiB the bandwidth, against the cluster file's 1000 us and 0.25 GB/s.
  FIGURES="python3 -c '
import json, sys
rs = [r for r in json.load(open(sys.argv[1]))[\"results\"] if r[\"op\"] == \"send_recv\"]
small, large = rs[0], rs[-1]
out = {\"latency_us\": round(small[\"time_us\"], 1), \"configured_latency_us\": 1000,
       \"busbw_gbps\": round(large[\"busbw_gbps\"], 4), \"configured_gbps\": 0.25}
print(json.dumps(out))
ok = 0.95 * 1000 <= small[\"time_us\"] <= 1.25 * 1000 + 200 and 0.9 * 0.25 <= large[\"busbw_gbps\"] <= 1.02 * 0.25
sys.exit(0 if ok else \"the emulated link was not measured back: \" + json.dumps(out))
' $OUT/plugin-link.json" SHOW='NCCL INFO NET/|sax net|^ +[0-9]|error' step plugin-link 240 env NCCL_DEBUG=INFO \
    "$SAX" launch --cluster "$OUT/cluster-2bld.json" --emulate plugin -- bench coll --backend cuda --op send_recv \
    -b 8 -e 64M -f 8 -n 10 -w 3 --json "$OUT/plugin-link.json"
  unset FIGURES
fi

# The summary: one table, and summary.json.
python3 - "$STEPS" "$OUT/summary.json" << 'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"\n{'step':<22} {'status':<46} {'s':>5}  figures")
for s in steps:
    figs = ", ".join(f"{k} {v}" for k, v in s["figures"].items())
    print(f"{s['step']:<22} {s['status'][:46]:<46} {s['seconds']:>5}  {figs}")
json.dump({"steps": steps}, open(sys.argv[2], "w"), indent=1)
PY
echo "=== gpu-check: $([ $failed -eq 0 ] && echo 'every step run passed' || echo 'some step FAILED'); summary in $OUT/summary.json"
exit $failed
