#!/usr/bin/env bash
# Configures and builds sax into build/ (SAX_CUDA=AUTO, SAX_WERROR=OFF unless the environment says otherwise).
# With arguments, builds only those targets (the demo builds `sax` alone: no tests or benchmarks).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
# SAX_WERROR=ON (CI): a warning in sax's own code fails the build.
cmake -S . -B build -DSAX_CUDA="${SAX_CUDA:-AUTO}" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
  -DSAX_WERROR="${SAX_WERROR:-OFF}" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j "$jobs" "${targets[@]}"
