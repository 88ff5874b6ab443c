#!/usr/bin/env bash
# The main job on the built-in two-building CPU testbed (configs/clusters/local-2bld.json):
# install what is missing, build, then run what exists of the loop.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== 1. the testbed, the model and a candidate layout, validated"
build/sax check configs/clusters/local-2bld.json configs/models/gpt-tiny.json configs/layouts/local-tp2-pp2.json

echo "== 2. explorer: the best layouts for gpt-tiny on the testbed, and llama3-70b on 98,304 H100s"
build/sax explore --cluster configs/clusters/local-2bld.json --model configs/models/gpt-tiny.json --top 5 \
  --compare configs/layouts/local-tp2-pp2.json
build/sax explore --cluster configs/clusters/h100-3bld.json --model configs/models/llama3-70b.json --top 5

echo "== 3. collectives on the testbed's groups: all ranks (world), then the pipeline groups (pp) that cross the building boundary"
echo "   sax launch puts each building's ranks in its own network namespace and shapes the boundary as the cluster file says"
echo "   (1 Gbit/s, 1 ms one way: kernel shaping where this host permits it, else unshaped, and the plan says which)"
build/sax launch --cluster configs/clusters/local-2bld.json -- \
  bench coll --op all --check -b 1K -e 1M -f 32 -n 10 --group world --cluster configs/clusters/local-2bld.json
build/sax launch --cluster configs/clusters/local-2bld.json -- \
  bench coll --op all_reduce,send_recv --check -b 8 -e 4M -f 32 -n 10 --group pp \
  --cluster configs/clusters/local-2bld.json --layout configs/layouts/local-tp2-pp2.json

echo "== 4. the layer ops of rank 0's slice of that layout (CPU kernels, one process): time, TFLOP/s, GB/s, share of the device's peak"
build/sax bench kernels --cluster configs/clusters/local-2bld.json --model configs/models/gpt-tiny.json \
  --layout configs/layouts/local-tp2-pp2.json -n 5 -w 1

echo "== 5. one training step of that layout, executed on the 4 ranks op by op from the workload (started by sax launch), beside the explorer's prediction"
build/sax launch --cluster configs/clusters/local-2bld.json -- \
  run --cluster configs/clusters/local-2bld.json --model configs/models/gpt-tiny.json \
  --layout configs/layouts/local-tp2-pp2.json --steps 3 --warmup 1
build/sax predict --cluster configs/clusters/local-2bld.json --model configs/models/gpt-tiny.json \
  --layout configs/layouts/local-tp2-pp2.json
