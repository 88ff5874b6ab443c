#!/usr/bin/env bash
# The main job on the built-in two-building CPU testbed (configs/clusters/local-2bld.json):
# install what is missing, build, then run what exists of the loop.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== 1. the testbed, the model and a candidate layout, validated"
build/sax check configs/clusters/local-2bld.json configs/models/gpt-tiny.json configs/layouts/local-tp2-pp2.json
