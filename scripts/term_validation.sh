#!/usr/bin/env bash
# The model's own part on the two CPU testbeds, term by term: calibrate each (its links and the
# paced device's wait path of a blocking call), then validate the layouts of
# configs/layouts/terms/ (TP2 with and without SP, CP2 alone and with TP2, CP4 across buildings,
# PP2 1F1B, interleaved and zero bubble, PP4, EP2 and EP4, hierarchical, blocking and overlapped
# DP; on local-4bld the same kinds over 16 ranks and 4 buildings), every layout run and timed,
# and print each validation's per-term table and summary. Run it alone on the host: a paced
# device holds its time only on an idle host.
#
#   scripts/term_validation.sh [OUT_DIR] [ROUNDS]   (default out/terms, 1; build/sax must exist)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/terms}
rounds=${2:-1}
emulate=${SAX_EMULATE:-netns}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
start=$(date +%s)
for r in $(seq 1 "$rounds"); do
  for c in local-2bld local-4bld; do
    C=configs/clusters/$c.json
    echo "== round $r: $c ($(($(date +%s) - start)) s)"
    build/sax launch --cluster "$C" --emulate "$emulate" -- \
      calibrate --cluster "$C" -b 4K -e 4M -f 4 -n 5 -w 2 --out "$out/cal-$c-$r.json" 2>&1 |
      grep -E '^# (blocking call|cross-building boundary|wrote)' || true
    for m in gpt-tiny moe-tiny; do
      d=configs/layouts/terms/$c-$m
      [ -d "$d" ] || continue
      layouts=()
      for f in "$d"/*.json; do layouts+=(--layout "$f"); done
      build/sax validate --cluster "$C" --model "configs/models/$m.json" --calibration "$out/cal-$c-$r.json" \
        --emulate "$emulate" --top 0 --spread 0 "${layouts[@]}" --steps 3 \
        --json "$out/validate-$c-$m-$r.json" | sed -n '/^  layout  *compute/,$p'
    done
  done
done
echo "== $(($(date +%s) - start)) s in all; results in $out"
