// CUDA rotary embedding (NeoX rotate-half), in place; one thread per (token, head, pair).
#include "kernels/cuda/common.cuh"
#include "kernels/ops/backend.h"

namespace updraft::ops::cuda {
namespace {

using namespace ::updraft::cuda;

// Rotates the pair (i, i + half) of one head row by angle pos * inv_freq[i], computed in f32
// as Hugging Face does; sincosf (not __sincosf) keeps full accuracy for large positions.
template <typename T>
__global__ void rope_kernel(T* x, const int32_t* pos, const float* inv_freq, int64_t n_pairs, int64_t NH,
                            int64_t half) {
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n_pairs;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx % half, head_row = idx / half, t = head_row / NH;
    T* row = x + head_row * 2 * half;
    const float a = static_cast<float>(pos[t]) * inv_freq[i];
    float s, c;
    sincosf(a, &s, &c);
    const float x0 = to_f32(row[i]), x1 = to_f32(row[i + half]);
    row[i] = from_f32<T>(x0 * c - x1 * s);
    row[i + half] = from_f32<T>(x1 * c + x0 * s);
  }
}

}  // namespace

void rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
  const int64_t NH = x.size(1), half = x.size(2) / 2;
  const int64_t n_pairs = x.size(0) * NH * half;
  if (n_pairs == 0)
    return;
  dispatch_f32_bf16(x.dtype(), "rope", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rope_kernel<<<elementwise_blocks(n_pairs), kElementwiseThreads, 0, stream()>>>(
        x.data<T>(), positions.data<int32_t>(), inv_freq.data<float>(), n_pairs, NH, half);
    UPD_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace updraft::ops::cuda
