#!/usr/bin/env bash
# How easy the tree is to change, in figures anyone can rerun at any commit: the longest functions,
# the files over 700 lines, the README's length, the pairs of repeated code, and one grep per
# contract that should be defined once (each prints the places that define it).
#   scripts/house_metrics.sh [REPO]   (lizard from PyPI for the function lengths)
set -uo pipefail
cd "${1:-$(dirname "$0")/..}"
src() { git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' | grep -v '^tests/'; }

echo "== the 15 longest functions (lines, outside tests/)"
if command -v lizard >/dev/null; then
  # lizard's CSV: nloc,ccn,tokens,params,length,location,file,function,long_name,start,end
  src | xargs lizard --csv 2>/dev/null | awk -F, '{gsub(/"/, "", $7); gsub(/"/, "", $8); print $5, $8, $7 ":" $10}' |
    sort -rn | head -15
  echo "functions over 80 lines: $(src | xargs lizard --csv 2>/dev/null | awk -F, '$5 > 80' | wc -l)"
else
  echo "(pip install lizard for this table)"
fi

echo "== files over 700 lines (source, scripts, docs)"
git ls-files | grep -E '\.(cpp|hpp|cu|cuh|h|py|sh|md|cmake|txt)$' | xargs wc -l | grep -v ' total$' |
  awk '$1 > 700' | sort -rn

echo "== README.md: $(wc -l <README.md) lines"

echo "== duplicates"
if command -v duplicates >/dev/null; then duplicates --seconds 120 | head -1; fi

# One grep per contract: each line printed is a place that defines (or hand-computes) it.
count() {
  local what="$1" pattern="$2"
  local hits
  hits=$(src | xargs grep -nE "$pattern" 2>/dev/null | grep -v '^\s*//')
  printf '%-58s %3d\n' "$what" "$(printf '%s' "$hits" | grep -c .)"
  [ -n "${VERBOSE:-}" ] && printf '%s\n' "$hits" | sed 's/^/    /'
}
echo "== definitions per contract (VERBOSE=1 lists them)"
count "SAX_EMULATION variable name spelled out" '"SAX_EMULATION"'
count "SAX_NET_* variable names spelled out" '"SAX_NET_[A-Z_]+"'
count "getenv of a SAX_ variable outside spec/" 'getenv\("SAX_'
count "'software emulation needs --cluster' checks" '(software needs --cluster|must name the cluster)'
count "alpha-beta time written out (alpha + bytes*beta)" '(alpha|latency)[a-z_]* *\+ *[a-z_.]*(bytes|size)[a-z_]* *\* *[a-z_.]*beta'
count "GPU generation from a device name" 'find\("(H100|A100|H200|B200)"\)|"(H100|A100|H200)" *\)|starts_with\("(H|A|B)[0-9]'
count "integer parsers (parse_int, parse_integer)" '^[a-z].*\bparse_int(eger)?\('
count "num() helpers" '^[a-z].*\bnum\('
printf '%-58s %3d\n' "Layout<->Candidate: lines of candidate.cpp mapping TP" "$(grep -c 'tensor_model_parallel_size' explorer/candidate.cpp)"
count "CUPTI calls checked by hand (!= CUPTI_SUCCESS)" '!= *CUPTI_SUCCESS'
count "issue numbers in code and scripts" '[Ii]ssues? #?[0-9]+'
