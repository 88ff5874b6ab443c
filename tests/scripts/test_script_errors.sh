#!/usr/bin/env bash
# The analysis scripts end bad input as the C++ commands do: one line on stderr and exit 2, never
# a traceback and never exit 0 — pacing_report.py on what is not a run's JSON, published_runs.py
# on a published figure of 0 or a name that would break its Markdown row, run_vs_predict.py on
# --steps 0, an unknown --cases name, and a cluster of another shape (sax refuses it).
set -uo pipefail
src=${1:?usage: test_script_errors.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: test_script_errors.sh SOURCE_DIR BUILD_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# expect_refusal WHAT SAYS COMMAND...: exit 2, no traceback, SAYS in stderr.
expect_refusal() {
  local what=$1 says=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" -eq 2 ] || fail "$what: exit $rc, expected 2 ($(head -c 300 "$tmp/err"))"
  ! grep -q Traceback "$tmp/err" || fail "$what: a traceback: $(tail -n 2 "$tmp/err")"
  grep -qF -- "$says" "$tmp/err" || fail "$what: stderr lacks '$says': $(head -c 300 "$tmp/err")"
}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo '[1, 2]' >"$tmp/list.json"
echo '{}' >"$tmp/empty.json"
expect_refusal "pacing_report on a list" "expected a \`sax run --json\` file" \
  python3 "$src/scripts/pacing_report.py" "$tmp/list.json"
expect_refusal "pacing_report on {}" "expected a \`sax run --json\` file" \
  python3 "$src/scripts/pacing_report.py" "$tmp/empty.json"

# A published runs file of one run, then broken one field at a time.
python3 - "$src" "$tmp" <<'PY'
import json, os, sys
src, tmp = sys.argv[1], sys.argv[2]
run = json.load(open(os.path.join(src, "configs/published_runs.json")))["runs"][0]
for name, change in (("zero", ("published", "value", 0)), ("newline", ("name", None, "a\nb"))):
    r = json.loads(json.dumps(run))
    for key in ("cluster", "model", "layout"):
        r[key] = os.path.join(src, r[key])
    field, sub, value = change
    if sub:
        r[field][sub] = value
    else:
        r[field] = value
    json.dump({"runs": [r]}, open(os.path.join(tmp, name + ".json"), "w"))
PY
expect_refusal "published_runs with a figure of 0" "/runs/0/published/value: expected a positive figure" \
  python3 "$src/scripts/published_runs.py" --sax "$build/sax" --runs "$tmp/zero.json"
expect_refusal "published_runs with a newline in a name" "/runs/0/name: expected a name on one line" \
  python3 "$src/scripts/published_runs.py" --sax "$build/sax" --runs "$tmp/newline.json"

expect_refusal "run_vs_predict --steps 0" "--steps: expected at least 1" \
  python3 "$src/scripts/run_vs_predict.py" --sax "$build/sax" --steps 0
expect_refusal "run_vs_predict --cases nosuch" "--cases: expected names among" \
  python3 "$src/scripts/run_vs_predict.py" --sax "$build/sax" --cases nosuch
expect_refusal "run_vs_predict on a 16-rank cluster" "dp4-blocking: sax run exited" \
  python3 "$src/scripts/run_vs_predict.py" --sax "$build/sax" --steps 1 --cases dp4-blocking \
  --cluster "$src/configs/clusters/local-4bld.json"

[ $failures -eq 0 ] && echo "script errors: all checks passed"
exit $((failures > 0))
