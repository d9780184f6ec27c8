// CUDA argmax and top-k over the last dimension. Elements are ranked by rank_key (value
// descending, then index ascending), which makes ties and the order of the result exact.
#include <cub/device/device_segmented_radix_sort.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/select.cuh"
#include "kernels/ops/backend.h"

namespace updraft::ops::cuda {
namespace {

using namespace ::updraft::cuda;

constexpr int kThreads = 1024;
constexpr int64_t kMaxBlockK = 1024;          // larger k falls back to sorting whole rows
constexpr int64_t kSortChunkElems = 1 << 23;  // rows sorted per cub call: bounds the scratch

// out[r] = the best-ranked index of row r: the first index among equal maxima.
template <typename T>
__global__ void __launch_bounds__(kThreads) argmax_kernel(const T* x, int64_t C, int32_t* out) {
  const T* xr = x + blockIdx.x * C;
  u64 best = 0;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
    best = max(best, rank_key(to_f32(xr[i]), i));
  best = block_max(best);
  if (threadIdx.x == 0)
    out[blockIdx.x] = best == 0 ? 0 : static_cast<int32_t>(rank_index(best));  // empty row: 0
}

// Top-k of one row for k <= kMaxBlockK: radix-select the k-th key, gather the k keys at or
// above it into shared memory and bitonic-sort them descending.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    topk_block_kernel(const T* x, int64_t C, int64_t k, float* values, int32_t* indices) {
  __shared__ SelectShared sh;
  __shared__ u64 picked[kMaxBlockK];
  __shared__ unsigned n_picked;
  const T* xr = x + blockIdx.x * C;
  auto item = [&](int64_t i, u64& key, u64& w) {
    key = rank_key(to_f32(xr[i]), i);
    w = 1;
    return true;
  };
  const u64 tau = k == C ? 0ull : block_select(C, static_cast<u64>(k), item, sh);  // keys are > 0

  int P = 1;  // sort size: a power of two >= k, padded with key 0 (ranks below every real key)
  while (P < k)
    P *= 2;
  for (int j = threadIdx.x; j < P; j += blockDim.x)
    picked[j] = 0;
  if (threadIdx.x == 0)
    n_picked = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const u64 key = rank_key(to_f32(xr[i]), i);
    if (key >= tau) {
      const unsigned slot = atomicAdd(&n_picked, 1u);
      if (slot < static_cast<unsigned>(P))
        picked[slot] = key;  // exactly k keys qualify (keys are unique)
    }
  }
  __syncthreads();
  for (int size = 2; size <= P; size *= 2) {
    for (int stride = size / 2; stride > 0; stride /= 2) {
      for (int j = threadIdx.x; j < P; j += blockDim.x) {
        const int partner = j ^ stride;
        if (partner > j) {
          const bool descending = (j & size) == 0;
          const u64 a = picked[j], b = picked[partner];
          if (descending ? a < b : a > b) {
            picked[j] = b;
            picked[partner] = a;
          }
        }
      }
      __syncthreads();
    }
  }
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
    const int64_t idx = rank_index(picked[j]);
    indices[blockIdx.x * k + j] = static_cast<int32_t>(idx);
    values[blockIdx.x * k + j] = to_f32(xr[idx]);  // the stored value itself (keeps -0)
  }
}

// keys[r, i] = rank_key(x[r, i], i) for a chunk of rows, plus the segment offsets r * C.
template <typename T>
__global__ void make_keys_kernel(const T* x, int64_t rows, int64_t C, u64* keys, int* offsets) {
  const int64_t n = rows * C;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x)
    keys[e] = rank_key(to_f32(x[e]), e % C);
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r <= rows; r += int64_t{gridDim.x} * blockDim.x)
    offsets[r] = static_cast<int>(r * C);
}

// The first k of each sorted row become values/indices.
template <typename T>
__global__ void gather_topk_kernel(const T* x, const u64* sorted, int64_t rows, int64_t C, int64_t k, float* values,
                                   int32_t* indices) {
  const int64_t n = rows * k;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / k, j = e % k;
    const int64_t idx = rank_index(sorted[r * C + j]);
    indices[e] = static_cast<int32_t>(idx);
    values[e] = to_f32(x[r * C + idx]);
  }
}

// Large k: sort every row's keys with cub (descending; keys are unique, so stability is moot).
template <typename T>
void topk_by_sort(const T* x, int64_t R, int64_t C, int64_t k, float* values, int32_t* indices) {
  UPD_CHECK(C <= INT32_MAX) << "topk: row length " << C << " too large for the sort fallback";
  const int64_t chunk = std::clamp<int64_t>(kSortChunkElems / C, 1, R);
  Scratch keys_in(static_cast<size_t>(chunk * C) * sizeof(u64));
  Scratch keys_out(static_cast<size_t>(chunk * C) * sizeof(u64));
  Scratch offsets(static_cast<size_t>(chunk + 1) * sizeof(int));
  size_t temp_bytes = 0;
  UPD_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortKeysDescending(
      nullptr, temp_bytes, keys_in.get<u64>(), keys_out.get<u64>(), static_cast<int>(chunk * C),
      static_cast<int>(chunk), offsets.get<int>(), offsets.get<int>() + 1, 0, 64, stream()));
  Scratch temp(temp_bytes);
  for (int64_t r0 = 0; r0 < R; r0 += chunk) {
    const int64_t rows = std::min(chunk, R - r0);
    make_keys_kernel<<<elementwise_blocks(rows * C), kElementwiseThreads, 0, stream()>>>(
        x + r0 * C, rows, C, keys_in.get<u64>(), offsets.get<int>());
    UPD_CUDA_CHECK_LAUNCH();
    UPD_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortKeysDescending(
        temp.get<void>(), temp_bytes, keys_in.get<u64>(), keys_out.get<u64>(), static_cast<int>(rows * C),
        static_cast<int>(rows), offsets.get<int>(), offsets.get<int>() + 1, 0, 64, stream()));
    gather_topk_kernel<<<elementwise_blocks(rows * k), kElementwiseThreads, 0, stream()>>>(
        x + r0 * C, keys_out.get<u64>(), rows, C, k, values + r0 * k, indices + r0 * k);
    UPD_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void argmax(const Tensor& x, Tensor& out) {
  const int64_t R = x.size(0), C = x.size(1);
  if (R == 0)
    return;
  UPD_CHECK(R <= INT32_MAX) << "argmax: too many rows for one launch: " << R;
  dispatch_f32_bf16(x.dtype(), "argmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    argmax_kernel<<<static_cast<unsigned>(R), row_threads(C), 0, stream()>>>(x.data<T>(), C, out.data<int32_t>());
    UPD_CUDA_CHECK_LAUNCH();
  });
}

void topk(const Tensor& x, int64_t k, Tensor& values, Tensor& indices) {
  const int64_t R = x.size(0), C = x.size(1);
  if (R == 0)
    return;
  UPD_CHECK(R <= INT32_MAX) << "topk: too many rows for one launch: " << R;
  dispatch_f32_bf16(x.dtype(), "topk", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (k <= kMaxBlockK) {
      topk_block_kernel<<<static_cast<unsigned>(R), kThreads, 0, stream()>>>(x.data<T>(), C, k, values.data<float>(),
                                                                             indices.data<int32_t>());
      UPD_CUDA_CHECK_LAUNCH();
    } else {
      topk_by_sort(x.data<T>(), R, C, k, values.data<float>(), indices.data<int32_t>());
    }
  });
}

}  // namespace updraft::ops::cuda
