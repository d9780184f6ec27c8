// Shared helpers of the CUDA backend: f32 load/store of the storage types, warp and block
// reductions, (value desc, index asc) ranking keys, dtype dispatch, launch shapes and
// stream-ordered scratch memory. Included only by .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/core/dtype.h"
#include "kernels/core/tensor.h"
#include "kernels/cuda/cuda_check.h"

namespace updraft::cuda {

using u64 = unsigned long long;  // the 64-bit type the shuffle/atomic intrinsics take

// ---- host-side launch helpers ------------------------------------------------------------

constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

inline cudaStream_t stream() {
  return current_stream();
}

constexpr int kElementwiseThreads = 256;

// Blocks for a grid-stride loop over n elements (n > 0); capped, the loop covers the rest.
inline unsigned elementwise_blocks(int64_t n, int threads = kElementwiseThreads) {
  return static_cast<unsigned>(std::clamp<int64_t>(ceil_div(n, threads), 1, 65536));
}

// Threads for a one-block-per-row kernel over rows of c elements: a power of two in [32, max].
inline int row_threads(int64_t c, int max_threads = 1024) {
  int t = 32;
  while (t < max_threads && t < c)
    t *= 2;
  return t;
}

// ---- dtype dispatch -------------------------------------------------------------------------

template <typename T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) with T the device element type of an f32 or bf16 tensor.
template <typename F>
void dispatch_f32_bf16(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32:
      f(Tag<float>{});
      return;
    case DType::BF16:
      f(Tag<__nv_bfloat16>{});
      return;
    default:
      UPD_FAIL() << op << ": dtype " << dtype_name(t) << " is not supported on CUDA";
  }
}

// Same for the three float storage types (f32, bf16, f16).
template <typename F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32:
      f(Tag<float>{});
      return;
    case DType::BF16:
      f(Tag<__nv_bfloat16>{});
      return;
    case DType::F16:
      f(Tag<__half>{});
      return;
    default:
      UPD_FAIL() << op << ": dtype " << dtype_name(t) << " is not supported on CUDA";
  }
}

// ---- f32 load/store -------------------------------------------------------------------------
// Conversions go through dtype.h so that rounding (RNE) and NaN handling are bit-identical
// to the CPU backend.

__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) {
  return bf16_to_f32(__bfloat16_as_ushort(v));
}
__device__ __forceinline__ float to_f32(__half v) {
  return f16_to_f32(__half_as_ushort(v));
}

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __ushort_as_bfloat16(f32_to_bf16(v));
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __ushort_as_half(f32_to_f16(v));
}

// ---- reductions -----------------------------------------------------------------------------

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ __forceinline__ u64 operator()(u64 a, u64 b) const { return a > b ? a : b; }
};
struct MinOp {
  __device__ __forceinline__ u64 operator()(u64 a, u64 b) const { return a < b ? a : b; }
};

template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Reduces v over the block (blockDim.x a multiple of 32); every thread gets the result. The
// combination order is fixed, so results are deterministic. Must be reached by all threads.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();  // a previous call may still be reading `partial`
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  v = lane < nwarps ? partial[lane] : identity;
  return warp_reduce(v, op);  // every warp folds the same partials
}

__device__ __forceinline__ float block_sum(float v) {
  return block_reduce(v, SumOp{}, 0.f);
}
__device__ __forceinline__ u64 block_sum(u64 v) {
  return block_reduce(v, SumOp{}, 0ull);
}
__device__ __forceinline__ double block_sum(double v) {
  return block_reduce(v, SumOp{}, 0.0);
}
__device__ __forceinline__ float block_max(float v) {
  return block_reduce(v, MaxOp{}, -INFINITY);
}
__device__ __forceinline__ u64 block_max(u64 v) {
  return block_reduce(v, MaxOp{}, 0ull);
}
__device__ __forceinline__ u64 block_min(u64 v) {
  return block_reduce(v, MinOp{}, ~0ull);
}

// ---- ranking keys ---------------------------------------------------------------------------
// rank_key(v, i) orders elements by value descending, then index ascending, as one unsigned
// integer (larger = ranks first), so argmax/top-k/top-p become integer max/select problems with
// exact, deterministic tie-breaking. NaN ranks below -inf; -0 and +0 are equal.

__device__ __forceinline__ uint32_t ordered_bits(float v) {
  if (v != v)
    return 0u;
  if (v == 0.f)
    v = 0.f;
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ u64 rank_key(float v, int64_t i) {
  return (static_cast<u64>(ordered_bits(v)) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(i));
}

__device__ __forceinline__ int64_t rank_index(u64 key) {
  return static_cast<int64_t>(~static_cast<uint32_t>(key));
}

// ---- stream-ordered scratch -----------------------------------------------------------------

// Device memory that lives until the end of the scope, allocated and freed in the order of
// the current stream (so freeing does not wait for, or race with, queued kernels).
class Scratch {
 public:
  explicit Scratch(size_t bytes) : stream_(stream()) {
    if (bytes > 0)
      UPD_CUDA_CHECK(cudaMallocAsync(&p_, bytes, stream_));
  }
  ~Scratch() {
    if (p_ != nullptr)
      cudaFreeAsync(p_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* get() const {
    return static_cast<T*>(p_);
  }

 private:
  cudaStream_t stream_;
  void* p_ = nullptr;
};

}  // namespace updraft::cuda
