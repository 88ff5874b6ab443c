#!/usr/bin/env bash
# The test command: install what is missing, build, run every test (unit, MPI, lint, scripts) with
# CTest on every core, then say where the time went (the build's wall time, the slowest entries).
# Arguments are passed on to ctest (e.g. -L mpi, -R test_spec, -LE mpi).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
start=$(date +%s)
./scripts/build.sh
build_s=$(($(date +%s) - start))
# Open MPI refuses root unless told; CI and these machines run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd build
rm -rf gtest-xml
rc=0
ctest -j "$(nproc 2>/dev/null || echo 2)" --output-on-failure --timeout 600 --output-junit ctest-junit.xml "$@" || rc=$?
echo
echo "test.sh: build ${build_s} s, tests $(($(date +%s) - start - build_s)) s"
../scripts/ctest-report.py ctest-junit.xml 20 gtest-xml || true
exit $rc
