#!/usr/bin/env bash
# scripts/sanitize.sh: the unit tests of planning and of the regression gate, built with
# AddressSanitizer and UndefinedBehaviorSanitizer (gcc, -O1 -g; -DSAX_SANITIZE=ON, no CUDA) into
# build-asan and run with CTest (issue 17); CI runs it after scripts/test.sh. A sanitizer report
# fails the test that made it (UB is fatal: -fno-sanitize-recover, halt_on_error; leaks are
# reported at exit). The executables run (their CTest labels): test_spec, test_workload,
# test_explorer, test_closed_forms_vs_workload and the fuzz targets' replays (label fuzz), with the
# `sax` program they start built the same way, without MPI (planning only: the testbed's half of
# the tree would double the build). Left out, to keep CI near 30 minutes: everything that needs
# MPI (the harness, among it regress's unit tests, whose reader the fuzz build fuzzes under the
# same sanitizers; the mpirun jobs: bench, run, validate, calibrate), the kernels, profiles,
# collectives, launcher and CLI executables, the CUDA code (nvcc takes no sanitizer flags), and
# lint and scripts tests.
# Arguments are passed on to ctest. Environment: SAX_SANITIZE_BUILD (build dir), CCACHE_DISABLE=1
# to build without ccache.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${SAX_SANITIZE_BUILD:-build-asan}
launcher=()
if command -v ccache >/dev/null && [[ "${CCACHE_DISABLE:-0}" != 1 ]]; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$build" -DSAX_SANITIZE=ON -DSAX_CUDA=OFF -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  "${launcher[@]}" >/dev/null
# The targets this configuration has (the harness's only where MPI was found).
have=$(cmake --build "$build" --target help)
tests=(test_spec test_workload test_explorer test_closed_forms_vs_workload)
if grep -qx '\.\.\. test_harness' <<<"$have"; then tests+=(test_harness); fi
replays=()
while read -r t; do replays+=("$t"); done < <(sed -n 's/^\.\.\. \(replay_[a-z_]*\)$/\1/p' <<<"$have")
targets=()
for t in sax "${tests[@]}" "${replays[@]}"; do targets+=(--target "$t"); done
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" "${targets[@]}"
labels=$(IFS='|'; echo "${tests[*]}|fuzz")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$build"
ctest --output-on-failure --timeout 600 -j "$(nproc 2>/dev/null || echo 2)" -L "^($labels)\$" "$@"
