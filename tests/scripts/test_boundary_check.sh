#!/usr/bin/env bash
# scripts/boundary_check.py on bench coll files it is given: a link that carries exactly what
# local-2bld says is within 0 %, one at 80 % of its rate is said to be beyond 10 %; the uplink's
# share when every group crosses at once under gbe-1-shared, less the host's own time (the node
# floor less its paced node link's time); a lossy technology's rate is the
# Mathis figure; a file without the op exits 2 with one line.
set -uo pipefail
src=${1:?usage: test_boundary_check.sh SOURCE_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cluster=$src/configs/clusters/local-2bld.json
# make NAME RATE_GBPS GROUPS_AT_ONCE LATENCY_US [OP]: send_recv times of latency + bytes / rate.
make() {
  python3 - "$tmp/$1.json" "$2" "$3" "$4" "${5:-send_recv}" <<'PY'
import json, sys
path, rate, at_once, lat, op = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
results = []
for b in [8, 64, 512, 4096, 1 << 21, 1 << 24]:
    t = lat + b / (rate * 1e3)
    results.append({"op": op, "bytes": b, "time_us": t, "p50_us": t})
json.dump({"version": 2, "config": {"groups_at_once": at_once}, "env": {"groups": [[0, 2], [1, 3]]},
           "results": results}, open(path, "w"))
PY
}
run() { python3 "$src/scripts/boundary_check.py" "$@" >"$tmp/out" 2>"$tmp/err"; }

make alone 0.125 1 1000 && make together 0.125 0 1000
run --cluster "$cluster" "$tmp/alone.json" "$tmp/together.json" || fail "exact link: exit $?: $(cat "$tmp/err")"
grep -Eq "worst \|error\| 0\.[01]% \(within 10 %\)" "$tmp/out" || fail "exact link: $(cat "$tmp/out")"

make slow 0.1 1 1000
run --cluster "$cluster" "$tmp/slow.json" || fail "slow link: exit $?"
grep -q "\-20.0%" "$tmp/out" && grep -q "beyond 10 %" "$tmp/out" || fail "slow link: $(cat "$tmp/out")"

# 2:1 uplink, both pairs at once: each gets 0.0625; 150 us of host time per message subtracted:
# the floor of local-2bld's paced node, its node link's own 300 us + bytes / 1.5 GB/s and 150 more.
make shared 0.0625 0 1150 && make floor 1.5 0 450
run --cluster "$cluster" --technology gbe-1-shared --floor "$tmp/floor.json" "$tmp/alone.json" "$tmp/shared.json"
grep -Eq "^ together +2/2 +1151\.0 +1001\.0 +1000 +\+0\.1% +0\.0625 +0\.0625 +\+0\.0%" "$tmp/out" ||
  fail "shared uplink: $(cat "$tmp/out")"

# 1 % loss at 1 ms: Mathis gives 1448 B / 2 ms x sqrt(150) = 8.867 MB/s.
make lossy 0.0088670 1 1000 broadcast
run --cluster "$cluster" --technology gbe-1-loss-1 --op broadcast "$tmp/lossy.json" || fail "lossy: exit $?"
grep -q "a device gets 0.008867 GB/s" "$tmp/out" && grep -q "within 10 %" "$tmp/out" || fail "lossy: $(cat "$tmp/out")"

run --cluster "$cluster" --op all_reduce "$tmp/alone.json"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "expected all_reduce" "$tmp/err" ||
  fail "no such op: exit $rc, $(cat "$tmp/err")"

[ $failures -eq 0 ] && echo "boundary_check: all passed"
exit $((failures > 0))
