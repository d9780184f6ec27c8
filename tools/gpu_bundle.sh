#!/usr/bin/env bash
# Packs the CUDA checks for a GPU host that has the NVIDIA driver and the CUDA 13 runtime
# libraries (libcudart, libcublas, libcublasLt) but none of this project's other dependencies:
# the test binaries and the CLI from a CUDA build, stripped, with every shared library they load
# except the C library, the C++ runtime and CUDA's own, into one xz-compressed tarball.
#
#   tools/gpu_bundle.sh [BUILD_DIR] [OUT.tar.xz]     (defaults: build, gpu-bundle.tar.xz)
#
# BASELINE=path/to/updraft (optional): an updraft binary of an earlier commit, carried as
# bin/updraft_baseline so that the decoding speeds are measured side by side in one run.
#
# Run the checks there with tools/gpu_check.sh OUT.tar.xz LOG_DIR from a checkout of the same
# commit (the tests read tests/fixtures).
set -euo pipefail
build=${1:-build}
out=${2:-gpu-bundle.tar.xz}
bins=(tests/kernels_core_test tests/kernels_ops_test tests/optim_test tests/rollout_hf_test tests/cuda_backend_test bin/updraft
  bin/spec_bench)
# BINS="tests/cuda_backend_test bin/spec_bench" (optional): pack only these (a smaller bundle, for a
# host whose transfers are limited; tools/gpu_check.sh needs the full set).
if [[ -n ${BINS:-} ]]; then read -ra bins <<< "$BINS"; fi

grep -q 'UPDRAFT_WITH_CUDA=1' "$build/build.ninja" 2>/dev/null ||
  { echo "gpu_bundle: $build is not a CUDA build (configure with -DUPDRAFT_CUDA=ON)" >&2; exit 1; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for b in "${bins[@]}"; do
  [[ -x $build/$b ]] || { echo "gpu_bundle: $build/$b is missing: build it first" >&2; exit 1; }
  strip -o "$stage/bin/$(basename "$b")" "$build/$b"
done
if [[ -n ${BASELINE:-} ]]; then strip -o "$stage/bin/updraft_baseline" "$BASELINE"; fi
# Libraries the GPU host provides itself: glibc's, the compiler runtime's and CUDA's.
host_libs='^(libc|libm|libdl|libpthread|librt|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt)\.so'
if for b in "$stage"/bin/*; do ldd "$b"; done | grep 'not found'; then
  echo "gpu_bundle: a library above is missing here" >&2
  exit 1
fi
for b in "$stage"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
  if ! basename "$lib" | grep -Eq "$host_libs"; then cp -L "$lib" "$stage/lib/"; fi
done
git -C "$(dirname "$0")/.." rev-parse HEAD > "$stage/COMMIT"
tar cf - -C "$stage" . | xz -6 -T2 > "$out"
echo "gpu_bundle: $out ($(du -h "$out" | cut -f1)): $(ls "$stage/bin" | tr '\n' ' ')+ $(ls "$stage/lib" | wc -l) libraries"
