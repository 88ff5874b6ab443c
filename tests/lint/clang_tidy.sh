#!/usr/bin/env bash
# clang-tidy with the repo's short, justified check list (.clang-tidy) over every non-test source
# of the build (its compile_commands.json); any warning fails. Skips (exit 77) where clang-tidy
# is not installed; scripts/install-deps.sh installs it.
set -uo pipefail
src=${1:?source dir}
build=${2:?build dir}
command -v clang-tidy >/dev/null || { echo "skip: clang-tidy is not installed"; exit 77; }
[ -f "$build/compile_commands.json" ] || { echo "no $build/compile_commands.json"; exit 1; }
mapfile -t files < <(grep -oE '"file": "[^"]+\.cpp"' "$build/compile_commands.json" | cut -d'"' -f4 |
                     grep "^$src/" | grep -v "^$src/tests/" | sort -u)
out=$(printf '%s\n' "${files[@]}" | xargs -P "$(nproc 2>/dev/null || echo 2)" -n 4 clang-tidy -p "$build" --quiet 2>&1)
findings=$(grep -E ': (warning|error): ' <<<"$out")
if [ -n "$findings" ]; then
  echo "$findings"
  exit 1
fi
echo "clang-tidy: ${#files[@]} files, no findings"
