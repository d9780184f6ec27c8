#!/usr/bin/env bash
# The README's test command: installs what the build needs, builds (CUDA backend on when
# nvcc is present), and runs the fast test tier. Usage:
#   tools/test.sh            fast tier (what CI runs)
#   tools/test.sh --all      every test, slow tier included
# BUILD_DIR (default build) and JOBS (default: number of cores) can be overridden.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh --quiet
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUPDRAFT_CUDA=AUTO >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
label_args=(-L fast)
if [ "${1:-}" = "--all" ]; then label_args=(); fi
cd "$BUILD_DIR"
# Tests run two at a time on a 2-core machine: OpenMP threads that spin while waiting would
# starve the other test's threads, so waiting threads sleep.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
ctest "${label_args[@]}" -j "$JOBS" --output-on-failure --timeout 600
