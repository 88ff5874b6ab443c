#!/usr/bin/env bash
# Proves the GPU path on a machine with an NVIDIA GPU, in a few minutes, from a CUDA build of
# sax (scripts/build.sh where nvcc was found): the CUDA tests that skip without a device, cuBLAS
# GEMM throughput through `sax bench kernels`, a `sax run` step traced with CUPTI and NVTX (merged,
# summarised, its kernel, NCCL and NVTX events counted), and NCCL collectives as `bench coll`
# times them against a bare NCCL loop (bench/coll_overhead), plus all_reduce busbw at 1 GiB.
#
# Two ranks share one GPU the way NCCL allows it: each rank gets its own NCCL_HOSTID, so NCCL's
# duplicate-GPU check (host hash + bus id) passes and it connects the two through its network
# transport (sockets on loopback), which the run's NCCL_DEBUG=INFO lines show ("via NET/Socket").
#
# Usage: scripts/gpu_check.sh [BUILD_DIR=build] [OUT_DIR=gpu-check]
# Each step's whole output goes to OUT_DIR/<step>.log and its last lines to stdout; each step is
# bounded by `timeout`, and a failing step is reported and the next one runs. Exit 1 when any
# step failed.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:-build}" && pwd)
OUT=${2:-gpu-check}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SAX="$B/sax"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Two ranks on one GPU: one NCCL host id each, NCCL's socket transport on loopback.
TWO="$OUT/two_ranks.sh"
printf '%s\n' '#!/usr/bin/env bash' \
  'exec mpirun --oversubscribe --bind-to none --mca btl self,vader,tcp --mca pml ob1 -np 2 \' \
  '  sh -c '"'"'NCCL_HOSTID=sax-$OMPI_COMM_WORLD_RANK NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} exec "$@"'"'"' sh "$@"' \
  > "$TWO"
chmod +x "$TWO"

failed=0
# step NAME SECONDS COMMAND...: the whole output to OUT/NAME.log; on stdout its last LINES_SHOWN
# lines, or with SHOW set the lines matching that pattern.
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
  echo "=== $name: exit $rc in $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || failed=1
}

echo "=== GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || failed=1

# 1. The tests that skip without a device.
for t in spec/test_checks_cuda kernels/test_kernels kernels/test_ops collectives/test_collectives \
  profiles/test_cupti_records; do
  if [ -x "$B/tests/$t" ]; then LINES_SHOWN=6 step "test-${t##*/}" 240 "$B/tests/$t" --gtest_brief=1; fi
done

# 2. GEMM throughput (cuBLAS, bf16, through the op runner): square, and one training shape.
for mnk in "8192 8192 8192" "4096 4096 4096" "16384 8192 2048"; do
  read -r m n k <<< "$mnk"
  LINES_SHOWN=3 step "gemm-${m}x${n}x${k}" 120 "$SAX" bench kernels --backend cuda --op gemm --m "$m" --n "$n" \
    --k "$k" -n 20 -w 5 --cluster "$ROOT/configs/clusters/h200-1node.json" --json "$OUT/gemm-${m}x${n}x${k}.json"
done

# 3. Traced steps on the GPU: two ranks, DP2 with the gradient sync overlapped, gpt-tiny.
python3 -c '
import json, sys
root, out = sys.argv[1], sys.argv[2]
c = json.load(open(root + "/configs/clusters/h200-1node.json"))
c["name"], c["devices_per_node"] = "h200-2ranks-1gpu", 2
json.dump(c, open(out + "/cluster-2.json", "w"), indent=1)
json.dump({"micro_batch_size": 2, "schedule": {"pipeline": "1f1b", "dp_sync": "overlapped"}},
          open(out + "/layout-dp2.json", "w"))
' "$ROOT" "$OUT"
rm -rf "$OUT/trace"
SHOW='via NET|NCCL version|sax run|step time|^ +[0-9]|# trace|error' step run-trace 240 env NCCL_DEBUG=INFO "$TWO" \
  "$SAX" run --backend cuda --cluster "$OUT/cluster-2.json" --model "$ROOT/configs/models/gpt-tiny.json" \
  --layout "$OUT/layout-dp2.json" --steps 3 --warmup 1 --json "$OUT/run.json" --trace "$OUT/trace"
step trace-merge 60 "$SAX" trace merge "$OUT/trace" -o "$OUT/trace-merged.json"
step trace-summary 60 "$SAX" trace summary "$OUT/trace-merged.json" --json "$OUT/trace-summary.json"
step trace-contents 60 python3 -c '
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
for r in ranks:
    print({k: r.get(k) for k in ("rank", "events", "dropped", "cupti_events", "cupti_dropped", "cupti_malformed",
                                 "clock_residual_ns")})
ok = kern and nvtx and ranks and all(r.get("cupti_dropped", 1) == 0 for r in ranks)
sys.exit(0 if ok else 1)
' "$OUT/trace-merged.json"

# 4. NCCL as bench coll times it, against a bare NCCL loop, every op; then all_reduce at 1 GiB.
if [ -x "$B/bench/coll_overhead" ]; then
  LINES_SHOWN=45 step coll-overhead 300 "$TWO" "$B/bench/coll_overhead" 7 1K,64K,1M,16M all cuda 20
fi
LINES_SHOWN=6 step allreduce-1g 180 "$TWO" "$SAX" bench coll --backend cuda -b 1G -e 1G -n 10 -w 3 \
  --json "$OUT/allreduce-1g.json"

echo "=== gpu_check: $([ $failed -eq 0 ] && echo 'every step passed' || echo 'some step FAILED')"
exit $failed
