#!/usr/bin/env bash
# Every C++ source as .clang-format says (CI fails otherwise): clang-format --dry-run --Werror.
# Skips (exit 77) where clang-format is not installed; scripts/install-deps.sh installs it.
set -uo pipefail
src=${1:?source dir}
command -v clang-format >/dev/null || { echo "skip: clang-format is not installed"; exit 77; }
cd "$src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
else
  mapfile -t files < <(find . -path ./build -prune -o \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' \) -print)
fi
bad=$(clang-format --dry-run --Werror "${files[@]}" 2>&1 | grep -oE '^[^:]+:[0-9]+:[0-9]+: (warning|error)' | cut -d: -f1 | sort -u)
if [ -n "$bad" ]; then
  echo "not formatted as .clang-format says (run: clang-format -i FILE):"
  echo "$bad"
  exit 1
fi
echo "clang-format: ${#files[@]} files as .clang-format says"
