// CUDA per-row losses over logits [R, C]: one block per row, f32 log-sum-exp.
#include "kernels/cuda/common.cuh"
#include "kernels/ops/backend.h"

namespace updraft::ops::cuda {
namespace {

using namespace ::updraft::cuda;

// logsumexp of one row, max-subtracted; every thread of the block gets it.
template <typename T>
__device__ float row_logsumexp(const T* z, int64_t C) {
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
    m = fmaxf(m, to_f32(z[i]));
  m = block_max(m);
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
    s += expf(to_f32(z[i]) - m);
  return m + logf(block_sum(s));
}

// loss[r] = lse(z[r]) - z[r, target[r]]; target < 0 is an ignored row (0). A target >= C,
// which the CPU backend rejects, cannot throw here and yields NaN.
template <typename T>
__global__ void __launch_bounds__(1024)
    cross_entropy_kernel(const T* logits, const int32_t* target, float* loss, int64_t C) {
  const int64_t tgt = target[blockIdx.x];
  if (tgt < 0) {  // block-uniform
    if (threadIdx.x == 0)
      loss[blockIdx.x] = 0.f;
    return;
  }
  const T* z = logits + blockIdx.x * C;
  const float lse = row_logsumexp(z, C);
  if (threadIdx.x == 0)
    loss[blockIdx.x] = tgt < C ? lse - to_f32(z[tgt]) : NAN;
}

// loss[r] = -sum_c p[r, c] * (z[r, c] - lse(z[r])); classes with p == 0 contribute nothing
// (so a -inf logit with zero teacher mass gives 0, not NaN, and all-zero rows give 0).
template <typename T>
__global__ void __launch_bounds__(1024)
    soft_cross_entropy_kernel(const T* logits, const float* teacher, float* loss, int64_t C) {
  const T* z = logits + blockIdx.x * C;
  const float* p = teacher + blockIdx.x * C;
  const float lse = row_logsumexp(z, C);
  float acc = 0.f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
    if (p[i] != 0.f)
      acc += p[i] * (to_f32(z[i]) - lse);
  acc = block_sum(acc);
  if (threadIdx.x == 0)
    loss[blockIdx.x] = -acc;
}

}  // namespace

void cross_entropy(const Tensor& logits, const Tensor& target, Tensor& loss) {
  const int64_t R = logits.size(0), C = logits.size(1);
  if (R == 0)
    return;
  UPD_CHECK(R <= INT32_MAX) << "cross_entropy: too many rows for one launch: " << R;
  dispatch_f32_bf16(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cross_entropy_kernel<<<static_cast<unsigned>(R), row_threads(C), 0, stream()>>>(
        logits.data<T>(), target.data<int32_t>(), loss.data<float>(), C);
    UPD_CUDA_CHECK_LAUNCH();
  });
}

void soft_cross_entropy(const Tensor& logits, const Tensor& teacher, Tensor& loss) {
  const int64_t R = logits.size(0), C = logits.size(1);
  if (R == 0)
    return;
  UPD_CHECK(R <= INT32_MAX) << "soft_cross_entropy: too many rows for one launch: " << R;
  dispatch_f32_bf16(logits.dtype(), "soft_cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    soft_cross_entropy_kernel<<<static_cast<unsigned>(R), row_threads(C), 0, stream()>>>(
        logits.data<T>(), teacher.data<float>(), loss.data<float>(), C);
    UPD_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace updraft::ops::cuda
