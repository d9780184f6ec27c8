// CUDA RMSNorm: one block per row, statistics in f32 whatever the storage type.
#include "kernels/cuda/common.cuh"
#include "kernels/ops/backend.h"

namespace updraft::ops::cuda {
namespace {

using namespace ::updraft::cuda;

// out[r,:] = x[r,:] * (1 / sqrt(mean(x^2) + eps)) * w, rounded once to T. x and out may be the
// same memory: each element is read and then written by the same thread after the reduction.
template <typename T, typename W>
__global__ void __launch_bounds__(1024) rms_norm_kernel(const T* x, const W* w, T* out, int64_t H, float eps) {
  const T* xr = x + blockIdx.x * H;
  T* outr = out + blockIdx.x * H;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    const float v = to_f32(xr[i]);
    ss += v * v;
  }
  ss = block_sum(ss);
  const float inv = 1.f / sqrtf(ss / static_cast<float>(H) + eps);  // IEEE sqrt/div, not rsqrtf
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    outr[i] = from_f32<T>(to_f32(xr[i]) * inv * to_f32(w[i]));
}

}  // namespace

void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  const int64_t R = x.size(0), H = x.size(1);
  if (R == 0 || H == 0)
    return;
  UPD_CHECK(R <= INT32_MAX) << "rms_norm: too many rows for one launch: " << R;
  dispatch_f32_bf16(x.dtype(), "rms_norm", [&](auto xtag) {
    using T = typename decltype(xtag)::type;
    dispatch_f32_bf16(w.dtype(), "rms_norm", [&](auto wtag) {
      using W = typename decltype(wtag)::type;
      rms_norm_kernel<<<static_cast<unsigned>(R), row_threads(H), 0, stream()>>>(x.data<T>(), w.data<W>(),
                                                                                 out.data<T>(), H, eps);
      UPD_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace updraft::ops::cuda
