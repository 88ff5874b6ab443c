#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS]: fuzzes every reader of sax's input files.
# Builds the libFuzzer targets of tests/fuzz/ with clang, AddressSanitizer and UBSan into
# build-fuzz (-DSAX_FUZZ=ON, no CUDA; ccache when installed) and runs each for SECONDS (default 120)
# on one core, seeded from configs/ and tests/fuzz/seeds/ (copied here at run time). An input
# slower than 1 s is a finding (-timeout=1), as is a crash, a sanitizer report or an exception
# other than InputError/UsageError. After a finding the target starts again from its corpus for
# the time left, so one known bug does not end the run. Prints per target the executions, the
# coverage (cov/ft as libFuzzer last reported them), crashes, timeouts, slow units and
# out-of-memory, and copies each finding's input to tests/fuzz/regressions/<target>/, where the
# normal build's CTest replays it (fix the bug, or move the file out: a kept input must pass).
# Exit 0 without findings, 1 with. Environment: SAX_FUZZ_TARGETS (names, space-separated),
# SAX_FUZZ_BUILD (build dir), SAX_FUZZ_RSS_MB (memory limit per target, default 2048).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-120}
[[ "$secs" =~ ^[1-9][0-9]*$ ]] || { echo "usage: scripts/fuzz.sh [SECONDS] (a whole number > 0, got '$secs')" >&2; exit 2; }
build=${SAX_FUZZ_BUILD:-build-fuzz}
targets=(${SAX_FUZZ_TARGETS:-cluster model layout calibration regress check_predict})
rss_mb=${SAX_FUZZ_RSS_MB:-2048}
for tool in clang clang++ cmake; do
  command -v "$tool" >/dev/null || { echo "fuzz.sh: $tool not found (libFuzzer comes with clang)" >&2; exit 2; }
done

# Build: the fuzz targets only (and what they link).
CC=clang CXX=clang++ cmake -S . -B "$build" -DSAX_FUZZ=ON -DSAX_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
have=$(cmake --build "$build" --target help)
available=()
for t in "${targets[@]}"; do
  if grep -qx "\.\.\. fuzz_$t" <<<"$have"; then
    available+=("$t")
  else
    echo "fuzz.sh: no target fuzz_$t in this build (regress needs MPI: the harness); skipped" >&2
  fi
done
((${#available[@]})) || { echo "fuzz.sh: nothing to fuzz" >&2; exit 2; }
build_targets=()
for t in "${available[@]}"; do build_targets+=(--target "fuzz_$t"); done
cmake --build "$build" -j "${SAX_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}" "${build_targets[@]}" >/dev/null

# Seeds, copied fresh each run: one folder per target.
work="$build/fuzz"
seed_files() {  # target → the seed folder filled
  local t=$1 dir="$work/$t/seeds"
  rm -rf "$dir" && mkdir -p "$dir"
  case "$t" in
    cluster | model | layout) cp configs/"${t}s"/*.json configs/"${t}s"/published/*.json "$dir"/ ;;
    calibration | regress) cp tests/fuzz/seeds/"$t"/* "$dir"/ ;;
    check_predict)
      # Every cluster × model × layout of configs/ (most do not fit each other: the checks'
      # refusals are seeds too) and the published runs' triples, which do.
      local c m l n=0
      for c in configs/clusters/*.json; do
        for m in configs/models/*.json; do
          for l in configs/layouts/*.json; do
            { cat "$c"; printf '\n---\n'; cat "$m"; printf '\n---\n'; cat "$l"; } >"$dir/triple-$n.txt"
            n=$((n + 1))
          done
        done
      done
      while read -r c m l; do
        { cat "$c"; printf '\n---\n'; cat "$m"; printf '\n---\n'; cat "$l"; } >"$dir/triple-$n.txt"
        n=$((n + 1))
      done < <(python3 -c 'import json
for r in json.load(open("configs/published_runs.json"))["runs"]: print(r["cluster"], r["model"], r["layout"])')
      ;;
  esac
}

summary=()
findings=0
for t in "${available[@]}"; do
  seed_files "$t"
  corpus="$work/$t/corpus" artifacts="$work/$t/artifacts"
  mkdir -p "$corpus" && rm -rf "$artifacts" && mkdir -p "$artifacts"
  end=$((SECONDS + secs))
  execs=0 starts=0 cov=? ft=?
  while ((SECONDS < end)); do
    starts=$((starts + 1))
    log="$work/$t/run-$starts.log"
    before=$(ls "$artifacts" | wc -l)
    set +e
    "$build/tests/fuzz/fuzz_$t" "$corpus" "$work/$t/seeds" -dict=tests/fuzz/fuzz.dict -timeout=1 \
      -report_slow_units=1 -rss_limit_mb="$rss_mb" -max_total_time=$((end - SECONDS)) -print_final_stats=1 \
      -artifact_prefix="$artifacts/" >"$log" 2>&1
    rc=$?
    set -e
    n=$(awk '/^stat::number_of_executed_units:/ {print $NF}' "$log" | tail -1)
    execs=$((execs + ${n:-0}))
    line=$(grep -E '^#[0-9]+.*cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
    if [[ -n "$line" ]]; then
      cov=$(sed -E 's/.*cov: ([0-9]+).*/\1/' <<<"$line")
      ft=$(sed -E 's/.*ft: ([0-9]+).*/\1/' <<<"$line")
    fi
    ((rc == 0)) && break
    # A finding: its input is in $artifacts. None new (the same input again: a seed itself fails,
    # or the fuzzer could not start) would loop for ever: stop this target and say why.
    if (($(ls "$artifacts" | wc -l) == before)); then
      echo "fuzz.sh: $t stopped (exit $rc) without a new finding; the end of $log:" >&2
      tail -20 "$log" >&2
      findings=$((findings + 1))
      break
    fi
    echo "fuzz.sh: $t: finding in run $starts (exit $rc): $(grep -m1 -E '^==[0-9]+==ERROR|SUMMARY|runtime error|ALARM|Slowest unit|terminate' "$log" || echo "see $log")" >&2
  done
  count() { find "$artifacts" -maxdepth 1 -name "$1-*" | wc -l; }
  crashes=$(count crash) timeouts=$(count timeout) slow=$(count slow-unit) ooms=$(count oom)
  leaks=$(count leak)
  found=$((crashes + timeouts + slow + ooms + leaks))
  if ((found)); then
    findings=$((findings + found))
    mkdir -p "tests/fuzz/regressions/$t"
    cp "$artifacts"/* "tests/fuzz/regressions/$t/"
  fi
  summary+=("$(printf '%-14s %6ss %10s %7s %7s %7s %8s %5s %5s %5s %6s' "$t" "$secs" "$execs" "$cov" "$ft" \
    "$crashes" "$timeouts" "$slow" "$ooms" "$leaks" "$starts")")
done

echo "# fuzz.sh $secs s per target (-timeout=1 -rss_limit_mb=$rss_mb, ASan+UBSan), logs in $work/<target>/"
printf '%-14s %7s %10s %7s %7s %7s %8s %5s %5s %5s %6s\n' target time execs cov ft crashes timeouts slow oom leak starts
printf '%s\n' "${summary[@]}"
if ((findings)); then
  echo "findings: $findings; their inputs were copied to tests/fuzz/regressions/<target>/"
  exit 1
fi
echo "no findings"
