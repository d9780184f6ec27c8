// CUDA element-wise ops: silu_mul, add (out may alias an input) and dtype conversion.
#include "kernels/cuda/common.cuh"
#include "kernels/ops/backend.h"

namespace updraft::ops::cuda {
namespace {

using namespace ::updraft::cuda;

#define UPD_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

// out = gate / (1 + exp(-gate)) * up in f32 (expf, not __expf, for CPU parity), rounded once.
template <typename T>
__global__ void silu_mul_kernel(const T* gate, const T* up, T* out, int64_t n) {
  UPD_GRID_STRIDE(i, n) {
    const float g = to_f32(gate[i]);
    out[i] = from_f32<T>(g / (1.f + expf(-g)) * to_f32(up[i]));
  }
}

// out = a + b; no __restrict__ because out may be a or b (each element is read before written).
template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  UPD_GRID_STRIDE(i, n) out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

// dst = src through f32 (exact for all three sources) with dtype.h's RNE rounding, so the
// bits match the CPU backend's conversion.
template <typename S, typename D>
__global__ void convert_kernel(const S* src, D* dst, int64_t n) {
  UPD_GRID_STRIDE(i, n) dst[i] = from_f32<D>(to_f32(src[i]));
}

#undef UPD_GRID_STRIDE

}  // namespace

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0)
    return;
  dispatch_f32_bf16(out.dtype(), "silu_mul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    silu_mul_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream()>>>(gate.data<T>(), up.data<T>(),
                                                                                 out.data<T>(), n);
    UPD_CUDA_CHECK_LAUNCH();
  });
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0)
    return;
  dispatch_f32_bf16(out.dtype(), "add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream()>>>(a.data<T>(), b.data<T>(), out.data<T>(), n);
    UPD_CUDA_CHECK_LAUNCH();
  });
}

void convert(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (n == 0)
    return;
  if (src.dtype() == dst.dtype()) {  // a plain copy keeps every bit, NaN payloads included
    if (src.raw() != dst.raw())
      UPD_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, stream()));
    return;
  }
  dispatch_float(src.dtype(), "convert", [&](auto stag) {
    using S = typename decltype(stag)::type;
    dispatch_float(dst.dtype(), "convert", [&](auto dtag) {
      using D = typename decltype(dtag)::type;
      convert_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream()>>>(src.data<S>(), dst.data<D>(), n);
      UPD_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace updraft::ops::cuda
