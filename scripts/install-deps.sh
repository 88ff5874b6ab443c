#!/usr/bin/env bash
# Installs what sax needs from Debian's packages, only when something is missing (repeat runs
# stay fast). CUDA is never installed: where a toolkit exists the build finds it.
set -euo pipefail

packages=(build-essential cmake openmpi-bin libopenmpi-dev nlohmann-json3-dev libcli11-dev
          libopenblas-dev libgtest-dev libgmock-dev libbenchmark-dev iproute2 iptables util-linux
          libnetfilter-queue-dev pkg-config python3 python3-matplotlib clang-format clang-tidy libeigen3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have empty package lists.
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
