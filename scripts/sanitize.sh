#!/usr/bin/env bash
# scripts/sanitize.sh: the unit tests (CTest label unit: every GoogleTest program whose cases run in
# its own process), `sax` and the fuzz targets' replays built with AddressSanitizer and
# UndefinedBehaviorSanitizer (-DSAX_SANITIZE=ON, no CUDA) into build-asan, and run
# under them with CTest: spec, workload, explorer, kernels, collectives (the link pacer, the link
# emulator, the NCCL net plugin), profiles, harness, calibration, launcher and the CLI (whose tests
# run that `sax`). CI runs it after scripts/test.sh. A sanitizer report fails the test that made it
# (UB is fatal: -fno-sanitize-recover, halt_on_error; leaks are reported at exit).
# Left out: the entries labelled mpi, whose ranks start under mpirun (4 ranks on 2 cores under
# ASan's slowdown would add minutes to CI); lint, scripts and the planning-only build, which run no
# code of sax's that ASan would see; and the CUDA code (nvcc takes no sanitizer flags).
# Built with clang where it is installed (faster than gcc here with ASan), at -O0 -g1 (line tables
# for the reports): the build takes 60 % of -O1's; the explorer and the workload, whose tests
# search thousands of layouts, at -O1 (cmake/SaxSanitize.cmake). Arguments are passed on to ctest.
# Environment: SAX_SANITIZE_BUILD (build dir); CCACHE_DISABLE=1 to build without ccache where it is
# installed.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${SAX_SANITIZE_BUILD:-build-asan}
jobs=$(nproc 2>/dev/null || echo 2)
start=$(date +%s)
if [ -z "${CXX:-}" ] && command -v clang++ >/dev/null; then export CC=clang CXX=clang++; fi
cmake -S . -B "$build" -DSAX_SANITIZE=ON -DSAX_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g1" \
  >/dev/null
cmake --build "$build" -j "$jobs" --target sax_unit_tests
build_s=$(($(date +%s) - start))
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$build"
rm -rf gtest-xml
rc=0
ctest --output-on-failure --timeout 600 -j "$jobs" -L '^(unit|fuzz)$' -LE '^mpi$' --output-junit ctest-junit.xml "$@" ||
  rc=$?
echo
echo "sanitize.sh: build ${build_s} s, tests $(($(date +%s) - start - build_s)) s"
../scripts/ctest-report.py ctest-junit.xml 20 gtest-xml || true
exit $rc
