#!/usr/bin/env bash
# Time and peak memory of `sax trace merge` over RANKS generated per-rank traces of about MB MB
# each (default 4 × 28 MB, the size of a long `sax run --trace`): the merge should stay near the
# size of its output. Prints /usr/bin/time's wall clock and maximum resident set. A benchmark,
# not a test.
#
#   scripts/bench_trace_merge.sh [RANKS] [MB] [SAX]
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-4}
mb=${2:-28}
sax=$(realpath "${3:-build/sax}")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/tr"
for ((r = 0; r < ranks; r++)); do
  python3 - "$r" "$mb" >"$dir/tr/rank-$r.json" <<'PY'
import json, sys
rank, mb = int(sys.argv[1]), int(sys.argv[2])
out = sys.stdout
out.write('{"traceEvents": [\n')
out.write(json.dumps({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}}))
written, i = 0, 0
while written < mb << 20:
    e = {"ph": "X", "name": "forward", "cat": "compute", "pid": rank, "tid": 1 + i % 3,
         "ts": i * 10.0, "dur": 9.0, "args": {"bytes": 4096, "correlation": i}}
    line = ",\n" + json.dumps(e)
    out.write(line)
    written += len(line)
    i += 1
out.write('\n], "displayTimeUnit": "ns", "otherData": {"sax": {"rank": %d}}}\n' % rank)
PY
done
du -sh "$dir/tr"
/usr/bin/time -v "$sax" trace merge "$dir/tr" -o "$dir/all.json" 2>"$dir/time" >/dev/null
grep -E "Elapsed \(wall|Maximum resident" "$dir/time"
ls -l "$dir/all.json" | awk '{ printf "output: %.1f MB\n", $5 / 1048576 }'
