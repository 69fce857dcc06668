#!/usr/bin/env bash
# Installs the Debian packages bagpipe needs, only those that are missing.
#   scripts/deps.sh          build + run + test dependencies
#   scripts/deps.sh --bench  also what the benchmarks and plots use
set -euo pipefail
pkgs=(gcc make libc6-dev libopenmpi-dev openmpi-bin libopenblas-dev zlib1g-dev gnuplot-nox
      python3 python3-torch python3-numpy clang-14 libclang-rt-14-dev)
[ "${1:-}" = "--bench" ] && pkgs+=(iproute2)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
