// CUDA softmax / log-softmax over the last dimension: one block per row, f32, max-subtracted.
#include "kernels/cuda/common.cuh"
#include "kernels/ops/backend.h"

namespace updraft::ops::cuda {
namespace {

using namespace ::updraft::cuda;

// Three passes over the row (max, sum of exp, write); out may be x (f32): every write happens
// after both reductions, and each element is read and written by the same thread.
template <typename T>
__global__ void __launch_bounds__(1024) softmax_kernel(const T* x, float* out, int64_t C, bool log) {
  const T* xr = x + blockIdx.x * C;
  float* outr = out + blockIdx.x * C;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
    m = fmaxf(m, to_f32(xr[i]));
  m = block_max(m);
  if (m == -INFINITY)
    m = 0.f;  // all -inf: avoid inf - inf (as the CPU backend does)
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
    s += expf(to_f32(xr[i]) - m);
  s = block_sum(s);
  if (log) {
    const float lse = m + logf(s);
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
      outr[i] = to_f32(xr[i]) - lse;
  } else {
    const float inv = 1.f / s;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
      outr[i] = expf(to_f32(xr[i]) - m) * inv;
  }
}

}  // namespace

void softmax(const Tensor& x, Tensor& out, bool log) {
  const int64_t R = x.size(0), C = x.size(1);
  if (R == 0 || C == 0)
    return;
  UPD_CHECK(R <= INT32_MAX) << "softmax: too many rows for one launch: " << R;
  dispatch_f32_bf16(x.dtype(), "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_kernel<<<static_cast<unsigned>(R), row_threads(C), 0, stream()>>>(x.data<T>(), out.data<float>(), C, log);
    UPD_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace updraft::ops::cuda
