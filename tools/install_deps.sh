#!/usr/bin/env bash
# Installs every Debian package that building and testing updraft needs.
# Idempotent: when everything is present it prints one line and exits.
# Usage: tools/install_deps.sh [--quiet]
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libzmq3-dev cppzmq-dev
  capnproto libcapnp-dev
  librocksdb-dev
  libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-openmp-dev
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev
  libpcre2-dev
  libssl-dev
  libboost1.81-dev
  python3 python3-venv
  curl iproute2
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  [ "${1:-}" = "--quiet" ] || echo "install_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install_deps: done"
