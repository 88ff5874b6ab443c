#!/usr/bin/env bash
# scripts/plots.py on tests/data/validate_sample.json (a `sax validate` on local-2bld): `validate` writes its PNGs
# of real size, `report` an index.html that names every layout and fetches nothing; `coll`,
# `timeline` and `codesign` draw from small inputs made here; bad input exits 2 with one line naming the file
# and writes nothing. Skips (exit 77) where matplotlib is not importable: the figures need it.
set -uo pipefail
src=${1:?usage: test_plots.sh SOURCE_DIR}
plots=$src/scripts/plots.py
fixture=$src/tests/data/validate_sample.json
# The interpreter sax uses (cli/plots.cpp): Debian's, where python3-matplotlib is installed.
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || { echo "SKIP: no python3"; exit 77; }
if ! "$py" -c 'import matplotlib' 2>/dev/null; then
  echo "SKIP: matplotlib is not importable by $py (scripts/install-deps.sh installs python3-matplotlib)"
  exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# A PNG: the signature, width and height above 300 pixels (IHDR), and more than 10 KB (a figure
# with something drawn in it, not an empty canvas).
is_png() {
  "$py" - "$1" <<'PY'
import struct, sys, os
f = sys.argv[1]
d = open(f, "rb").read()
ok = d[:8] == b"\x89PNG\r\n\x1a\n" and d[12:16] == b"IHDR"
w, h = struct.unpack(">II", d[16:24]) if ok else (0, 0)
sys.exit(0 if ok and w > 300 and h > 300 and len(d) > 10000 else 1)
PY
}

# expect_bad "what" "says" command...: exit 2, exactly one stderr line, naming `says`.
expect_bad() {
  local what=$1 says=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" -eq 2 ] || fail "$what: exit $rc, expected 2 ($(cat "$tmp/err"))"
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$what: expected one line on stderr, got: $(cat "$tmp/err")"
  grep -qF -- "$says" "$tmp/err" || fail "$what: stderr does not name '$says': $(cat "$tmp/err")"
}

# validate → scatter.png, breakdown.png, terms.png
out=$tmp/report
"$py" "$plots" validate "$fixture" --out "$out" >/dev/null || fail "validate exited $?"
for f in scatter.png breakdown.png terms.png; do
  [ -f "$out/$f" ] && is_png "$out/$f" || fail "validate: $out/$f is not a PNG of real size"
done

# coll, from a bench coll result and a calibration made here (α 20 µs, 1/β 2 GB/s)
"$py" - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
res = []
for op, f in (("all_reduce", 1.5), ("all_gather", 0.75), ("broadcast", 1.0)):
    for k in range(6):
        b = 1024 * 4 ** k
        us = 20 * 3 + b * 0.5e-3 * f
        res.append({"op": op, "bytes": b, "ranks": 4, "in_place": False, "time_us": us, "busbw_gbps": b / us / 1e3 * f,
                    "p50_us": us, "p99_us": us * 1.2})
json.dump({"version": 2, "config": {"group": "world"}, "env": {"link_class": "cross_building", "emulation": "none"},
           "results": res}, open(f"{t}/coll.json", "w"))
ab = {"alpha_us": 20, "beta_ns_per_byte": 0.5, "fit": {"r2": 0.99, "max_rel_error": 0.05, "samples": 6}}
# all_gather in two regimes, the second from 64 KiB: each drawn over its own sizes.
two = dict(ab, regimes=[{"from_bytes": 1024, "alpha_us": 5, "beta_ns_per_byte": 1.0, "fit": {"r2": 0.9}},
                        {"from_bytes": 65536, "alpha_us": 20, "beta_ns_per_byte": 0.5, "fit": {"r2": 0.99}}])
json.dump({"version": 1, "provenance": {"cluster": "x", "backend": "cpu"},
           "links": {"cross_building": {"all_reduce": ab, "all_gather": two}}}, open(f"{t}/cal.json", "w"))
# A merged trace of two ranks, two steps each: compute, TP messages on the executor and a lane.
ev = [{"ph": "M", "name": "process_name", "pid": r, "args": {"name": f"rank {r}"}} for r in (0, 1)]
ev += [{"ph": "M", "name": "thread_name", "pid": r, "tid": 2130706432, "args": {"name": "tp comm"}} for r in (0, 1)]
for r in (0, 1):
    for s in (0, 1):
        t0 = s * 10000.0 + r * 50
        ev.append({"ph": "X", "cat": "step", "name": "step", "pid": r, "tid": 7, "ts": t0, "dur": 9000.0})
        for i in range(8):
            ev.append({"ph": "X", "cat": "compute", "name": "forward qkv_proj", "pid": r, "tid": 7, "ts": t0 + i * 1000,
                       "dur": 600.0})
            for tid in (7, 2130706432):
                ev.append({"ph": "X", "cat": "communication", "name": "tp.all_gather", "pid": r, "tid": tid,
                           "ts": t0 + i * 1000 + 600, "dur": 300.0})
        ev.append({"ph": "X", "cat": "idle", "name": "waiting", "pid": r, "tid": 7, "ts": t0 + 8000, "dur": 900.0})
json.dump({"traceEvents": ev}, open(f"{t}/trace.json", "w"))
PY
"$py" "$plots" coll "$tmp/coll.json" --calibration "$tmp/cal.json" --out "$out/coll.png" >/dev/null || fail "coll exited $?"
# The plot's α-β is spec/alpha_beta.hpp's, regime by size: below the first start, at and past a break.
PYTHONPATH="$src/scripts" "$py" - "$tmp" <<'PY' || fail "coll: the α-β by regime is not spec/alpha_beta.hpp's"
import sys
from sax_plots import coll
k = coll.read_calibration(sys.argv[1] + "/cal.json")
ag, ar = k[("cross_building", "all_gather")], k[("cross_building", "all_reduce")]
for nbytes, alpha_us, beta in ((512, 5, 1.0), (65535, 5, 1.0), (65536, 20, 0.5), (1 << 20, 20, 0.5)):
    want = 3 * alpha_us + 0.75 * nbytes * beta * 1e-3  # all_gather on 4 ranks: 3 steps, bus factor 3/4
    got = coll.predict_us(ag, "all_gather", 4, nbytes)
    assert abs(got - want) <= 1e-9 * want, (nbytes, got, want)
assert len(ar["regimes"]) == 1 and abs(coll.predict_us(ar, "all_reduce", 4, 4096) - (6 * 20 + 1.5 * 4096 * 0.5e-3)) < 1e-9
PY
[ -f "$out/coll.png" ] && is_png "$out/coll.png" || fail "coll: no PNG of real size"
"$py" "$plots" timeline "$tmp/trace.json" --out "$out/timeline.png" --step 2 >/dev/null || fail "timeline exited $?"
[ -f "$out/timeline.png" ] && is_png "$out/timeline.png" || fail "timeline: no PNG of real size"

# codesign → the variants against total parameters, the Pareto set joined (a grid made here)
"$py" - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
vs = []
for i, e in enumerate((8, 16, 32, 64)):
    for k in (1, 2):
        total = 1e10 * e / k
        vs.append({"experts": e, "topk": k, "pareto": k == 2, "total_params": total, "active_params": 1e9,
                   "predicted": {"tokens_per_s": 1e7 / (1 + i) * (1.2 if k == 2 else 1.0)}, "dominant_term": "compute"})
vs.append({"experts": 2, "topk": 4, "pareto": False, "excluded": "top-4 of 2 experts"})
json.dump({"version": 1, "inputs": {"model": "m.json", "cluster": "c.json"},
           "pareto_axes": ["tokens_per_s (higher)", "total_params (higher)"], "variants": vs},
          open(f"{t}/codesign.json", "w"))
bad = json.load(open(f"{t}/codesign.json"))
del bad["variants"][0]["total_params"]
json.dump(bad, open(f"{t}/codesign-bad.json", "w"))
PY
mkdir -p "$tmp/cd"
"$py" "$plots" codesign "$tmp/codesign.json" --out "$tmp/cd/codesign.png" >/dev/null || fail "codesign exited $?"
[ -f "$tmp/cd/codesign.png" ] && is_png "$tmp/cd/codesign.png" || fail "codesign: no PNG of real size"

# report → index.html with each layout, the summary, every PNG embedded, nothing fetched
cp "$fixture" "$out/validate.json"
cp "$tmp/trace.json" "$out/merged-trace.json"
"$py" "$plots" report "$out" --title "plots test" >/dev/null || fail "report exited $?"
html=$out/index.html
if [ -f "$html" ]; then
  for label in $("$py" -c 'import json,sys; print(" ".join(l["label"] for l in json.load(open(sys.argv[1]))["layouts"]))' "$fixture"); do
    grep -qF ">$label" "$html" || fail "report: index.html does not mention layout $label"
  done
  grep -qF "Kendall" "$html" || fail "report: no summary figures"
  [ "$(grep -o 'data:image/png;base64' "$html" | wc -l)" -eq 5 ] || fail "report: expected the 5 PNGs embedded"
  grep -qF 'href="merged-trace.json"' "$html" && grep -qF "ui.perfetto.dev" "$html" ||
    fail "report: no link to the trace with how to open it"
  grep -qiE '(src|href)="(https?:)?//' "$html" && fail "report: index.html fetches from the network"
else
  fail "report: no index.html"
fi

# The demo's folder (scripts/demo.sh): validate-NAME.json with its figures in NAME/, runs deeper.
demo=$tmp/demo
mkdir -p "$demo/runs-gpt-tiny/1"
cp "$fixture" "$demo/validate-gpt-tiny.json"
echo '{}' >"$demo/runs-gpt-tiny/1/run.json"
"$py" "$plots" validate "$demo/validate-gpt-tiny.json" --out "$demo/gpt-tiny" >/dev/null || fail "validate into a folder"
"$py" "$plots" report "$demo" >/dev/null || fail "report of the demo's folder exited $?"
[ "$(grep -o 'data:image/png;base64' "$demo/index.html" | wc -l)" -eq 3 ] || fail "demo report: expected 3 PNGs"
grep -qF 'href="gpt-tiny/scatter.png"' "$demo/index.html" || fail "demo report: no link to gpt-tiny/scatter.png"
grep -qF 'runs-gpt-tiny/1/run.json' "$demo/index.html" && fail "demo report: lists the runs' own files"

# Bad input: one line naming the file, exit 2, nothing written.
bad=$tmp/bad
mkdir -p "$bad"
echo '{"version": 1, "layouts": [' >"$bad/broken.json"
echo '{"version": 7}' >"$bad/v7.json"
expect_bad "missing file" "$bad/none.json" "$py" "$plots" validate "$bad/none.json" --out "$bad/o"
expect_bad "malformed JSON" "$bad/broken.json: expected a sax validate --json file (not JSON" \
  "$py" "$plots" validate "$bad/broken.json" --out "$bad/o"
expect_bad "wrong version" "$bad/v7.json: /version: expected 1" "$py" "$plots" validate "$bad/v7.json" --out "$bad/o"
expect_bad "bench file given as validate" "$tmp/coll.json: /version" "$py" "$plots" validate "$tmp/coll.json" --out "$bad/o"
expect_bad "validate file given to coll" "$fixture: /version: expected 2" "$py" "$plots" coll "$fixture" --out "$bad/c.png"
expect_bad "not a trace" "$fixture: /traceEvents" "$py" "$plots" timeline "$fixture" --out "$bad/t.png"
expect_bad "step out of range" "--step between 1 and 2" "$py" "$plots" timeline "$tmp/trace.json" --step 3 --out "$bad/t.png"
expect_bad "validate file given to codesign" "$fixture: /version: expected 1 (a sax codesign" \
  "$py" "$plots" codesign "$fixture" --out "$bad/d.png"
expect_bad "a variant without its size" "$tmp/codesign-bad.json: /variants/0/total_params" \
  "$py" "$plots" codesign "$tmp/codesign-bad.json" --out "$bad/d.png"
expect_bad "report of no directory" "$bad/nodir" "$py" "$plots" report "$bad/nodir"
cp "$bad/v7.json" "$bad/validate-x.json"
expect_bad "report of a bad validate file" "$bad/validate-x.json" "$py" "$plots" report "$bad"
[ -e "$bad/o" ] && [ -n "$(ls -A "$bad/o")" ] && fail "bad input left files in $bad/o"
ls "$bad" | grep -qE '\.png$|index\.html' && fail "bad input left a figure or page in $bad"

[ "$failures" -eq 0 ] || exit 1
echo "plots.py: validate, coll, timeline, codesign, report and bad input as expected"
