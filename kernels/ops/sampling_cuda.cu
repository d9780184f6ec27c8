// CUDA sampling: the filtered policy distribution (sampling_probs) and inverse-CDF draws from
// it (sample_from_probs), one block per row. Top-k / top-p use block radix selection on
// (probability desc, index asc) keys instead of a full sort of the vocabulary.
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/select.cuh"
#include "kernels/ops/backend.h"

namespace updraft::ops::cuda {
namespace {

using namespace ::updraft::cuda;

constexpr int kThreads = 1024;
constexpr int kSampleThreads = 512;  // the f64 block scan spills registers at 1024 threads

// Probability mass as 2^-60 fixed point: integer sums are exact and order-independent, so the
// top-p cut is the same on every run. Sums of a row's probabilities stay below 2^61.
__device__ __forceinline__ u64 to_fixed(float p) {
  return static_cast<u64>(static_cast<double>(p) * 0x1p60);
}

// probs[r] = one-hot(argmax) when temperature is 0, else softmax(logits / t) restricted to the
// top_k best and then to the top_p nucleus (the mass is that of the top-k set, and the token
// that crosses top_p is kept), renormalised. Ties rank the lower index first.
__global__ void __launch_bounds__(kThreads)
    sampling_probs_kernel(const float* logits, const float* temperature, const int32_t* top_k, const float* top_p,
                          float* probs, int64_t V) {
  __shared__ SelectShared sh;
  const float* x = logits + blockIdx.x * V;
  float* p = probs + blockIdx.x * V;  // also the working buffer; thread i-ownership never changes
  const float t = temperature[blockIdx.x];

  if (t == 0.f) {  // greedy (block-uniform branch)
    u64 best = 0;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
      best = max(best, rank_key(x[i], i));
    const int64_t arg = rank_index(block_max(best));
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
      p[i] = i == arg ? 1.f : 0.f;
    return;
  }

  const float inv_t = 1.f / t;  // scale by the reciprocal, as the CPU backend does
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
    m = fmaxf(m, x[i] * inv_t);
  m = block_max(m);
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
    s += expf(x[i] * inv_t - m);
  s = block_sum(s);
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
    p[i] = expf(x[i] * inv_t - m) / s;

  const int64_t k = top_k[blockIdx.x];
  const float tp = top_p[blockIdx.x];
  const bool use_k = k > 0 && k < V, use_p = tp < 1.f;
  if (!use_k && !use_p)
    return;  // the plain softmax already sums to 1
  __syncthreads();

  // Every rank key is > 0, so tau = 0 keeps everything.
  const u64 tau_k = !use_k ? 0ull
                           : block_select(
                                 V, static_cast<u64>(k),
                                 [&](int64_t i, u64& key, u64& w) {
                                   key = rank_key(p[i], i);
                                   w = 1;
                                   return true;
                                 },
                                 sh);
  u64 tau = tau_k;
  if (use_p) {
    u64 mass = 0;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
      if (rank_key(p[i], i) >= tau_k)
        mass += to_fixed(p[i]);
    mass = block_sum(mass);
    // Keep a token iff the kept mass ranked above it is < top_p * mass (it has not yet been
    // reached). For integer W, W < x iff W < ceil(x). top_p <= 0 keeps the best token only.
    const double want = ceil(static_cast<double>(tp) * static_cast<double>(mass));
    const u64 target = want < 1.0 ? 1ull : static_cast<u64>(want);
    tau = block_select(
        V, target,
        [&](int64_t i, u64& key, u64& w) {
          key = rank_key(p[i], i);
          w = to_fixed(p[i]);
          return key >= tau_k;
        },
        sh);
  }

  float kept = 0.f;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
    if (rank_key(p[i], i) >= tau)
      kept += p[i];
  kept = block_sum(kept);
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
    p[i] = rank_key(p[i], i) >= tau ? p[i] / kept : 0.f;
}

// out[r] = smallest i with p[i] > 0 and cumsum(p)[i] > u * sum(p) (the cumsum skips
// non-positive entries), scanning the row in tiles with a block scan. Sums are in f64 like the
// CPU backend's, so the two agree except at vanishingly rare boundaries. If rounding leaves no
// such i, the last positive entry is returned (0 for a row without mass, which the CPU
// backend rejects with an error).
__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(const float* probs, const float* uniforms, int32_t* out, int64_t V) {
  using Scan = cub::BlockScan<double, kSampleThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  const float* p = probs + blockIdx.x * V;

  double total = 0.0;
  u64 last_nz = 0;  // index + 1 of the last positive entry
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    total += p[i];
    if (p[i] > 0.f)
      last_nz = static_cast<u64>(i) + 1;
  }
  total = block_sum(total);
  last_nz = block_max(last_nz);

  const double target = static_cast<double>(uniforms[blockIdx.x]) * total;
  int64_t found = -1;
  double running = 0.0;
  for (int64_t t0 = 0; t0 < V; t0 += kSampleThreads) {
    const int64_t i = t0 + threadIdx.x;
    const float v = i < V ? p[i] : 0.f;
    double incl, tile_sum;
    Scan(scan_storage).InclusiveSum(v > 0.f ? static_cast<double>(v) : 0.0, incl, tile_sum);
    __syncthreads();  // scan_storage is reused by the next tile
    const u64 first = block_min(v > 0.f && running + incl > target ? static_cast<u64>(i) : ~0ull);
    if (first != ~0ull) {  // block-uniform
      found = static_cast<int64_t>(first);
      break;
    }
    running += tile_sum;
  }
  if (threadIdx.x == 0)
    out[blockIdx.x] = static_cast<int32_t>(found >= 0 ? found : (last_nz > 0 ? static_cast<int64_t>(last_nz) - 1 : 0));
}

}  // namespace

void sampling_probs(const Tensor& logits, const Tensor& temperature, const Tensor& top_k, const Tensor& top_p,
                    Tensor& probs) {
  const int64_t R = logits.size(0), V = logits.size(1);
  if (R == 0 || V == 0)
    return;
  UPD_CHECK(R <= INT32_MAX && V <= INT32_MAX) << "sampling_probs: " << logits.str() << " too large";
  sampling_probs_kernel<<<static_cast<unsigned>(R), kThreads, 0, stream()>>>(
      logits.data<float>(), temperature.data<float>(), top_k.data<int32_t>(), top_p.data<float>(), probs.data<float>(),
      V);
  UPD_CUDA_CHECK_LAUNCH();
}

void sample_from_probs(const Tensor& probs, const Tensor& uniforms, Tensor& out) {
  const int64_t R = probs.size(0), V = probs.size(1);
  if (R == 0)
    return;
  UPD_CHECK(R <= INT32_MAX && V <= INT32_MAX) << "sample_from_probs: " << probs.str() << " too large";
  sample_kernel<<<static_cast<unsigned>(R), kSampleThreads, 0, stream()>>>(probs.data<float>(), uniforms.data<float>(),
                                                                           out.data<int32_t>(), V);
  UPD_CUDA_CHECK_LAUNCH();
}

}  // namespace updraft::ops::cuda
