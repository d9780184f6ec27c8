#!/usr/bin/env bash
# The CUDA checks on a GPU host, from a bundle that tools/gpu_bundle.sh made of a CUDA build of
# this commit. Run from the checkout's root (the tests read tests/fixtures):
#
#   tools/gpu_check.sh BUNDLE.tar.xz LOG_DIR
#
# Runs every test that exercises the CUDA backend (op parity against the CPU references, the
# optimizer, the policy against transformers, the drafter against speculators, greedy
# speculation against plain decoding), then `updraft generate` on the policy fixture on both
# devices, and, where models/small is in the checkout, its decoding speed on the GPU and the group
# drafting benchmark there (spec_bench in the bundle). Each binary's output goes to
# LOG_DIR/<name>.log and a JUnit XML beside it; the exit status is the number of failed steps.
# Steps whose binaries the bundle lacks are reported as not run.
set -u
bundle=$1
logs=$2
mkdir -p "$logs"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
tar xJf "$bundle" -C "$root" || { echo "gpu_check: cannot unpack $bundle" >&2; exit 100; }
[[ $(cat "$root/COMMIT") == $(git rev-parse HEAD 2>/dev/null || cat "$root/COMMIT") ]] ||
  echo "gpu_check: warning: the bundle was built at $(cat "$root/COMMIT"), this checkout is elsewhere"
# CUDA's runtime libraries: the toolkit's, else those of a Python wheel (nvidia-cublas and kin).
cuda_dirs=$(find /usr/local/cuda*/ -name 'libcublasLt.so.13*' -printf '%h\n' 2>/dev/null | sort -u | head -1)
[[ -n $cuda_dirs ]] || cuda_dirs=$(find /opt /usr/lib -name 'libcublasLt.so.13*' -printf '%h\n' 2>/dev/null | sort -u | head -1)
cudart_dir=$(find "$cuda_dirs" /usr/local/cuda*/ /opt /usr/lib -name 'libcudart.so.13*' -printf '%h\n' 2>/dev/null | head -1)
echo "gpu_check: CUDA libraries from $cuda_dirs and $cudart_dir"
[[ -n $cuda_dirs && -n $cudart_dir ]] || { echo "gpu_check: no CUDA 13 runtime (libcublasLt, libcudart) found" >&2; exit 100; }
export LD_LIBRARY_PATH="$root/lib:$cuda_dirs:$cudart_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
export UPDRAFT_SOURCE_DIR=$PWD  # the fixtures, from this checkout
failed=0
run() {  # NAME COMMAND...: run, log, count a failure
  local name=$1
  shift
  echo "== $name"
  "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  if [[ $rc != 0 ]]; then
    failed=$((failed + 1))
    echo "   FAILED (exit $rc); the log's end:"
    tail -5 "$logs/$name.log" | cut -c1-300
  fi
  grep -E '^\[==========\] [0-9]+ tests? from .* ran|^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \] [0-9]+ test' \
    "$logs/$name.log" | head -40
}
# On a GPU host a skipped CUDA test means the device was not usable: a failure here. A bundle made
# with BINS= (tools/gpu_bundle.sh) may lack some binaries: those steps are reported as not run.
not_run=0
for t in kernels_core_test kernels_ops_test optim_test rollout_hf_test cuda_backend_test; do
  if [[ ! -x $root/bin/$t ]]; then
    echo "== $t: NOT RUN (not in the bundle)"
    not_run=$((not_run + 1))
    continue
  fi
  run "$t" "$root/bin/$t" --gtest_filter='*cuda*:*Cuda*-Device.CudaWithoutGpuIsAnError' --gtest_output="xml:$logs/$t.xml"
  if grep -q '^\[  SKIPPED \]' "$logs/$t.log"; then
    echo "   FAILED: CUDA tests were skipped"
    failed=$((failed + 1))
  fi
done
if [[ ! -x $root/bin/updraft ]]; then
  echo "== the CLI and the decoding speeds: NOT RUN (updraft is not in the bundle)"
  not_run=$((not_run + 1))
else
# The CLI end to end: greedy tokens on each device, plain and speculative (the fixture drafter).
# CPU and CUDA need not agree token for token (bf16 activations on CUDA, f32 on the CPU); plain
# and speculative decoding on CUDA must.
gen=("$root/bin/updraft" generate --model tests/fixtures/policy/llama --prompt-ids 1,5,9,13 --prompt-ids 2,4,6
  --max-new-tokens 24 --ignore-eos)
run generate_cpu "${gen[@]}" --device cpu
run generate_cuda "${gen[@]}" --device cuda
run generate_cuda_spec "${gen[@]}" --device cuda --draft tests/fixtures/drafter/spec_default --spec-steps 4
ids() { grep -o '"output_ids":\[[^]]*\]' "$logs/$1.log"; }
for g in generate_cpu generate_cuda generate_cuda_spec; do echo "$g: $(ids $g | tr '\n' ' ')"; done
if [[ -n $(ids generate_cuda) && $(ids generate_cuda) == "$(ids generate_cuda_spec)" ]]; then
  echo "== speculative decoding on CUDA gives plain decoding's tokens"
else
  echo "== FAILED: speculative and plain decoding on CUDA differ (or did not run)"
  failed=$((failed + 1))
fi
# Decoding speed on the built-in policy (not a check: the CUDA backend is untuned), three
# interleaved runs of each binary: this commit's on both devices, and on CUDA the bundle's
# baseline where it carries one.
if [[ -f models/small/model.safetensors ]]; then
  bins=(updraft)
  [[ -x $root/bin/updraft_baseline ]] && bins+=(updraft_baseline)
  for batch in 1 16; do
    prompts=()
    for i in $(seq "$batch"); do prompts+=(--prompt-ids "1,$((i + 4)),9,13"); done
    for rep in 1 2 3; do
      for b in "${bins[@]}" cpu; do
        dev=cuda bin=$b
        [[ $b == cpu ]] && dev=cpu bin=updraft
        name="speed_${b}_b${batch}_$rep"
        "$root/bin/$bin" generate --model models/small --device "$dev" "${prompts[@]}" --max-new-tokens 128 \
          --ignore-eos > "$logs/$name.log" 2>&1
        echo "$name ($dev): $(grep -o '[0-9.]* generated tokens/s, [0-9]* steps' "$logs/$name.log")"
      done
    done
  done
fi
fi
# Group drafting on the GPU (not a check): plain, the drafter alone, suffix drafts alone and both
# merged, groups of 8 at temperature 1, side by side (docs/benchmarks.md, "Session 33").
if [[ -x $root/bin/spec_bench && -f models/small-eagle3/model.safetensors ]]; then
  echo "== group drafting on CUDA (spec_bench --group 8 --device cuda)"
  "$root/bin/spec_bench" --model models/small --draft models/small-eagle3 --group 8 --temperature 1 \
    --sequences 32 --tokens 64 --reps 3 --adaptive --device cuda > "$logs/group8_cuda.log" 2>&1 ||
    { echo "   FAILED"; failed=$((failed + 1)); }
  grep -E '^(live|one sibling)|^  (plain|eagle|suffix|merged)' "$logs/group8_cuda.log"
fi
echo "gpu_check: $failed failed step(s), $not_run not run; logs in $logs"
exit "$failed"
