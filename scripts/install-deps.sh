#!/usr/bin/env bash
# Installs what sax needs from Debian's packages, only when something is missing (repeat runs
# stay fast). CUDA is never installed: where a toolkit exists the build finds it.
set -euo pipefail

packages=(build-essential cmake openmpi-bin libopenmpi-dev nlohmann-json3-dev libcli11-dev
          libopenblas-dev libgtest-dev libgmock-dev libbenchmark-dev iproute2 iptables util-linux
          libnetfilter-queue-dev pkg-config python3 python3-matplotlib clang-format clang-tidy libeigen3-dev ccache zlib1g-dev
          clang libclang-rt-dev)
# clang builds the sanitizer tree (scripts/sanitize.sh) and the planning-only check. The lint's
# clang-tidy: the newest Debian has (tests/lint/clang_tidy.sh picks the newest installed;
# 22 lints the tree in about half the time 14 takes here, matching nothing inside system headers).
tidy=clang-tidy-22
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ] && { installed "$tidy" || ! apt-cache show "$tidy" >/dev/null 2>&1; }; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  # A fresh machine may have empty package lists.
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! installed "$tidy" && apt-cache show "$tidy" >/dev/null 2>&1; then
  echo "install-deps: installing $tidy"
  $SUDO apt-get install -y -qq --no-install-recommends "$tidy" >/dev/null
fi
