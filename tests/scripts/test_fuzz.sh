#!/usr/bin/env bash
# scripts/fuzz.sh and scripts/sanitize.sh: both parse, and fuzz.sh refuses a bad
# SECONDS with its usage and exit 2 before it configures or builds anything (fuzzing itself is a
# run of minutes: scripts/fuzz.sh, not CTest; the targets' kept inputs are the fuzz_replay_* tests).
set -euo pipefail
src=${1:?source dir}
bash -n "$src/scripts/fuzz.sh"
bash -n "$src/scripts/sanitize.sh"
for bad in abc 0 -5 1.5; do
  set +e
  err=$(SAX_FUZZ_BUILD=/nonexistent/build "$src/scripts/fuzz.sh" "$bad" 2>&1 >/dev/null)
  code=$?
  set -e
  [ "$code" -eq 2 ] || { echo "fuzz.sh $bad exited $code, expected 2: $err"; exit 1; }
  grep -q '^usage: scripts/fuzz.sh \[SECONDS\]' <<<"$err" || { echo "fuzz.sh $bad did not print its usage: $err"; exit 1; }
done
[ ! -e /nonexistent/build ] || { echo "fuzz.sh configured a build dir on a bad argument"; exit 1; }
echo "fuzz.sh and sanitize.sh parse; fuzz.sh refuses bad SECONDS with exit 2"
