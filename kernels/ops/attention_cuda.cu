// CUDA attention: one block per (query, head), keys visited in tiles with an online softmax in
// f32. Straightforward rather than fast (no split over keys); the mask logic mirrors
// attention_visible() in attention.cc.
#include "kernels/cuda/common.cuh"
#include "kernels/ops/backend.h"

namespace updraft::ops::cuda {
namespace {

using namespace ::updraft::cuda;

constexpr int kThreads = 128;  // 4 warps; each warp scores one key at a time
constexpr int kKeyTile = 32;   // keys scored per round of the online softmax

struct Mask {
  MaskKind kind;
  int64_t q_offset;     // Causal, Tree; TTT: the row of the first query
  const uint8_t* tree;  // Tree: [T, T] on the device
  int64_t steps;        // TTT
};

// The keys a query can possibly see, enumerated as candidates c = 0 .. n-1, so causal and TTT
// rows never visit keys that are masked anyway. Causal: keys 0 .. q_offset + i. TTT (query i is
// row r = q_offset + i of R = q_offset + T): step-0 keys 0 .. r, then the diagonal key s*R + r of
// each step s = 1 .. steps. Tree: every key, filtered
// by tree_visible().
__device__ __forceinline__ int64_t num_candidates(const Mask& m, int64_t S, int64_t i) {
  switch (m.kind) {
    case MaskKind::Causal:
      return m.q_offset + i + 1;
    case MaskKind::Tree:
      return S;
    case MaskKind::TTT:
      return m.q_offset + i + 1 + m.steps;
  }
  return 0;
}

__device__ __forceinline__ int64_t candidate_key(const Mask& m, int64_t T, int64_t i, int64_t c) {
  if (m.kind != MaskKind::TTT)
    return c;
  const int64_t r = m.q_offset + i;
  return c > r ? (c - r) * (m.q_offset + T) + r : c;
}

// Tree: the committed prefix is visible to all; node j is visible iff tree_mask[i, j].
__device__ __forceinline__ bool tree_visible(const Mask& m, int64_t T, int64_t i, int64_t j) {
  return m.kind != MaskKind::Tree || j < m.q_offset || m.tree[i * T + (j - m.q_offset)] != 0;
}

template <typename E>
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const E* q, const E* k, const E* v, E* out, float* lse, Mask mask, int64_t T, int64_t S,
                     int64_t NH, int64_t NKV, int64_t HD, float scale) {
  extern __shared__ float smem[];
  float* q_s = smem;       // [HD] the query in f32
  float* acc = smem + HD;  // [HD] unnormalised output; element d is owned by thread d % blockDim
  __shared__ float score[kKeyTile];
  __shared__ float prob[kKeyTile];
  __shared__ int64_t key[kKeyTile];

  const int64_t i = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
  const E* qr = q + (i * NH + h) * HD;
  for (int64_t d = threadIdx.x; d < HD; d += blockDim.x) {
    q_s[d] = to_f32(qr[d]);
    acc[d] = 0.f;
  }
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int64_t n = num_candidates(mask, S, i);
  float m_run = -INFINITY, l_run = 0.f;
  for (int64_t c0 = 0; c0 < n; c0 += kKeyTile) {
    const int tile = static_cast<int>(min(static_cast<int64_t>(kKeyTile), n - c0));
    // 1. scores of the tile (masked keys get -inf), one warp per key.
    for (int t = warp; t < tile; t += nwarps) {
      const int64_t j = candidate_key(mask, T, i, c0 + t);
      float s = -INFINITY;
      if (tree_visible(mask, T, i, j)) {  // warp-uniform branch
        const E* kr = k + (j * NKV + kvh) * HD;
        float dot = 0.f;
        for (int64_t d = lane; d < HD; d += 32)
          dot += q_s[d] * to_f32(kr[d]);
        s = warp_reduce(dot, SumOp{}) * scale;
      }
      if (lane == 0) {
        score[t] = s;
        key[t] = j;
      }
    }
    __syncthreads();
    // 2. new running max (every thread computes the same value) and the tile's exponentials.
    float m_new = m_run;
    for (int t = 0; t < tile; ++t)
      m_new = fmaxf(m_new, score[t]);
    const bool none = m_new == -INFINITY;  // nothing visible yet: avoid exp(-inf - -inf)
    const float corr = none ? 1.f : expf(m_run - m_new);
    if (threadIdx.x < tile)
      prob[threadIdx.x] = none ? 0.f : expf(score[threadIdx.x] - m_new);
    __syncthreads();
    // 3. rescale and accumulate; the sums run in the same order in every thread.
    float p_sum = 0.f;
    for (int t = 0; t < tile; ++t)
      p_sum += prob[t];
    l_run = l_run * corr + p_sum;
    m_run = m_new;
    for (int64_t d = threadIdx.x; d < HD; d += blockDim.x) {
      float a = acc[d] * corr;
      for (int t = 0; t < tile; ++t)
        if (prob[t] != 0.f)
          a += prob[t] * to_f32(v[(key[t] * NKV + kvh) * HD + d]);
      acc[d] = a;
    }
    __syncthreads();  // score/prob/key are rewritten by the next tile
  }

  // A query that sees no key at all (possible only with an empty tree-mask row and no
  // prefix) gets zeros and lse = -inf rather than NaN.
  E* outr = out + (i * NH + h) * HD;
  for (int64_t d = threadIdx.x; d < HD; d += blockDim.x)
    outr[d] = from_f32<E>(l_run > 0.f ? acc[d] / l_run : 0.f);
  if (lse != nullptr && threadIdx.x == 0)
    lse[i * NH + h] = l_run > 0.f ? m_run + logf(l_run) : -INFINITY;
}

}  // namespace

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
               const Tensor& tree_mask_dev, float scale, Tensor& out, Tensor* lse) {
  const int64_t T = q.size(0), NH = q.size(1), HD = q.size(2), S = k.size(0), NKV = k.size(1);
  if (T == 0 || NH == 0 || HD == 0)
    return;
  UPD_CHECK(T * NH <= INT32_MAX) << "attention: T*NH=" << T * NH << " too large for one launch";
  UPD_CHECK(HD <= 4096) << "attention: head dim " << HD << " exceeds the CUDA kernel's shared memory plan";
  Mask m{mask.kind, mask.q_offset, nullptr, mask.ttt_steps};
  if (mask.kind == MaskKind::Tree)
    m.tree = tree_mask_dev.data<uint8_t>();
  float* lse_ptr = lse != nullptr ? lse->data<float>() : nullptr;
  const size_t smem = static_cast<size_t>(2 * HD) * sizeof(float);
  dispatch_f32_bf16(q.dtype(), "attention", [&](auto tag) {
    using E = typename decltype(tag)::type;
    attention_kernel<<<static_cast<unsigned>(T * NH), kThreads, smem, stream()>>>(
        q.data<E>(), k.data<E>(), v.data<E>(), out.data<E>(), lse_ptr, m, T, S, NH, NKV, HD, scale);
    UPD_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace updraft::ops::cuda
