#!/usr/bin/env bash
# Configures and builds sax into build/ (SAX_CUDA=AUTO unless the environment says otherwise).
# With arguments, builds only those targets (the demo builds `sax` alone: no tests or benchmarks).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DSAX_CUDA="${SAX_CUDA:-AUTO}" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j "$jobs" "${targets[@]}"
