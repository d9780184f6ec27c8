#!/usr/bin/env bash
# The README's first command: installs what is needed, builds, and runs `updraft <args>`
# (default: `updraft demo`; until the demo lands, `updraft --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh --quiet
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUPDRAFT_CUDA=AUTO >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target updraft
if [ $# -eq 0 ]; then
  if "$BUILD_DIR/bin/updraft" demo --help >/dev/null 2>&1; then set -- demo; else set -- --help; fi
fi
exec "$BUILD_DIR/bin/updraft" "$@"
