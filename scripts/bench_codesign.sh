#!/usr/bin/env bash
# Wall time of `sax codesign` over a 6 x 4 grid (experts 8..256 x top-k 1..8) of a
# llama3-405b-sized base (Llama 3 405B made MoE at its own active parameters) on h100-3bld:
# RUNS runs (default 3), each time printed, then their median. A benchmark, not a test.
#
#   scripts/bench_codesign.sh [RUNS] [SAX]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
sax=${2:-build/sax}
times=()
for ((i = 1; i <= runs; i++)); do
  t0=$(date +%s.%N)
  "$sax" codesign --cluster configs/clusters/h100-3bld.json --model configs/models/llama3-405b.json \
    --experts 8,16,32,64,128,256 --topk 1,2,4,8 >/dev/null
  t1=$(date +%s.%N)
  t=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
  printf 'run %d: %.2f s\n' "$i" "$t"
  times+=("$t")
done
printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {m = NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2; printf "median of %d: %.2f s (6 x 4 grid, llama3-405b-sized, h100-3bld)\n", NR, m}'
