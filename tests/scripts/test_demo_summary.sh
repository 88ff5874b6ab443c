#!/usr/bin/env bash
# scripts/demo_summary.py: each run's figures and their range from report folders made here of the
# validate fixture (the second run's errors doubled), and a missing file refused (exit 2, one line).
set -euo pipefail
src=${1:?source dir}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/a" "$t/b"
for f in validate-gpt-tiny.json validate-moe-tiny.json validate-local4-gpt-tiny.json; do
  cp "$src/tests/data/validate_sample.json" "$t/a/$f"
  python3 - "$src/tests/data/validate_sample.json" "$t/b/$f" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
v["summary"]["mape_pct"] *= 2
json.dump(v, open(sys.argv[2], "w"))
PY
done
out=$(python3 "$src/scripts/demo_summary.py" "$t/a" "$t/b")
mape=$(python3 -c "import json; print(json.load(open('$t/a/validate-gpt-tiny.json'))['summary']['mape_pct'])")
lo=$(python3 -c "x=$mape; print(f'{x:.2f}' if abs(x) < 1.5 else f'{x:.1f}')")
hi=$(python3 -c "x=2*$mape; print(f'{x:.2f}' if abs(x) < 1.5 else f'{x:.1f}')")
line=$(grep -m1 'local-2bld gpt-tiny.*step MAPE' <<<"$out")
[[ "$line" == *"$lo to $hi" ]] || { echo "expected the range $lo to $hi: $line"; exit 1; }
[ "$(grep -c 'step MAPE' <<<"$out")" -eq 3 ] || { echo "expected a step MAPE row per validation:"; echo "$out"; exit 1; }
grep -q '^| validation | figure | run 1 | run 2 | over 2 runs |$' <<<"$(python3 "$src/scripts/demo_summary.py" "$t/a" "$t/b" --markdown)" ||
  { echo "--markdown: no table head"; exit 1; }
rm "$t/b/validate-moe-tiny.json"
set +e
err=$(python3 "$src/scripts/demo_summary.py" "$t/a" "$t/b" 2>&1 >/dev/null)
code=$?
set -e
[ "$code" -eq 2 ] || { echo "a missing file exited $code, expected 2"; exit 1; }
if [ "$(wc -l <<<"$err")" -ne 1 ] || [[ "$err" != *"validate-moe-tiny.json"* ]]; then
  echo "expected one line naming the file: $err"
  exit 1
fi
echo "demo_summary: ranges over runs, a Markdown table, a missing file refused"
