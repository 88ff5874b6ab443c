#!/usr/bin/env bash
# clang-tidy with the repo's short, justified check list (.clang-tidy) over every C++ source of the
# tree, tests included, whatever the build's unity setting (tidy_units.py says how each is read);
# any finding fails, and so does a source left unread that tidy_exclude.txt does not name. The
# newest clang-tidy installed is used: from 19 on it no longer matches inside system headers, which
# halves the time here (scripts/install-deps.sh installs 22 where Debian has it). Skips (exit 77)
# where no clang-tidy is installed.
set -uo pipefail
src=$(cd "${1:?source dir}" && pwd)
build=${2:?build dir}
tidy=$(compgen -c clang-tidy- | grep -E '^clang-tidy-[0-9]+$' | sort -t- -k3 -n | tail -1)
[ -n "$tidy" ] || tidy=clang-tidy
command -v "$tidy" >/dev/null || { echo "skip: clang-tidy is not installed"; exit 77; }
[ -f "$build/compile_commands.json" ] || { echo "no $build/compile_commands.json"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
here=$(dirname "$0")
python3 "$here/tidy_units.py" plan "$src" "$build" "$work" "$tidy" || exit 1
mkdir -p "$work/logs"
# Findings in every file of the tree (a unity batch's files are headers to clang-tidy), none in
# generated or system files.
dirs=$(cd "$src" && git ls-files 2>/dev/null | grep / | cut -d/ -f1 | sort -u | paste -sd'|')
[ -n "$dirs" ] || dirs=$(cd "$src" && find . -mindepth 1 -maxdepth 1 -type d ! -name '.*' ! -name 'build*' -printf '%P\n' | paste -sd'|')
filter="^$src/($dirs)/"
# One clang-tidy per file, -H listing what it parsed (tidy_units.py counts it), both cores; the
# config named, as a unity batch of a build dir outside the tree has no .clang-tidy above it.
tidy() {
  xargs -P "$(nproc 2>/dev/null || echo 2)" -I{} sh -c \
    'log="$1/logs/$(echo "$4" | md5sum | cut -c1-16).log"; echo "main: $4" > "$log"
     "$3" -p "$1" --config-file="$5" --quiet --header-filter="$2" --extra-arg=-H "$4" >> "$log" 2>&1' \
    _ "$work" "$filter" "$tidy" {} "$src/.clang-tidy" < "$1"
}
tidy "$work/units"
# Headers no file included (a header of a backend this build leaves out, say): each on its own.
python3 "$here/tidy_units.py" headers "$src" "$work" || exit 1
tidy "$work/header_units"
findings=$(cat "$work"/logs/*.log | grep -E '(^|: )(warning|error): ' | sort -u)
python3 "$here/tidy_units.py" count "$src" "$work"
counted=$?
if [ -n "$findings" ]; then
  echo "$findings"
  exit 1
fi
[ $counted -eq 0 ] || exit 1
echo "clang-tidy: $("$tidy" --version | grep -o 'version [0-9.]*'), $(wc -l < "$work/units") translation units and $(wc -l < "$work/header_units") headers alone, no findings"
