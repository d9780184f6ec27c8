// CUDA paged attention: one block per (new token, query head), keys visited in tiles with an
// online softmax in f32, key slots looked up through the sequence's block table. The index
// tensors (CPU) are packed into one device buffer per call. copy_rows: one block per row pair.
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/ops/backend.h"

namespace updraft::ops::cuda {
namespace {

using namespace ::updraft::cuda;

constexpr int kThreads = 128;
constexpr int kKeyTile = 32;

struct Meta {
  const int32_t* row_seq;      // [T]
  const int32_t* block_table;  // [B, MAXB]
  const int32_t* kv_len;       // [B]
  const int32_t* q_start;      // [B+1]
  const int32_t* mask_len;     // [B] or null
  const uint8_t* tree;         // [T, tm_cols] or null
  int64_t tm_cols, MAXB, BS;
};

template <typename E>
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(const E* q, const E* kc, const E* vc, E* out, Meta m,
                                                                   int64_t NH, int64_t NKV, int64_t HD, float scale) {
  extern __shared__ float smem[];
  float* q_s = smem;
  float* acc = smem + HD;
  __shared__ float score[kKeyTile];
  __shared__ float prob[kKeyTile];
  __shared__ int64_t slot[kKeyTile];

  const int64_t i = blockIdx.x / NH, h = blockIdx.x % NH, g = h / (NH / NKV);
  const int64_t b = m.row_seq[i];
  const int64_t n = m.q_start[b + 1] - m.q_start[b], S = m.kv_len[b], li = i - m.q_start[b];
  const int64_t prefix = S - (m.mask_len != nullptr ? m.mask_len[b] : n);
  const int64_t last = m.tree != nullptr ? S : prefix + li + 1;  // keys beyond are never visible
  const E* qr = q + (i * NH + h) * HD;
  for (int64_t d = threadIdx.x; d < HD; d += blockDim.x) {
    q_s[d] = to_f32(qr[d]);
    acc[d] = 0.f;
  }
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  float m_run = -INFINITY, l_run = 0.f;
  for (int64_t j0 = 0; j0 < last; j0 += kKeyTile) {
    const int tile = static_cast<int>(min(static_cast<int64_t>(kKeyTile), last - j0));
    for (int t = warp; t < tile; t += nwarps) {
      const int64_t j = j0 + t, lj = j - prefix;
      const bool vis = lj < 0 || m.tree == nullptr || m.tree[i * m.tm_cols + lj] != 0;
      const int64_t s_id = static_cast<int64_t>(m.block_table[b * m.MAXB + j / m.BS]) * m.BS + j % m.BS;
      float s = -INFINITY;
      if (vis) {
        const E* kr = kc + (s_id * NKV + g) * HD;
        float dot = 0.f;
        for (int64_t d = lane; d < HD; d += 32)
          dot += q_s[d] * to_f32(kr[d]);
        s = warp_reduce(dot, SumOp{}) * scale;
      }
      if (lane == 0) {
        score[t] = s;
        slot[t] = s_id;
      }
    }
    __syncthreads();
    float m_new = m_run;
    for (int t = 0; t < tile; ++t)
      m_new = fmaxf(m_new, score[t]);
    const bool none = m_new == -INFINITY;
    const float corr = none ? 1.f : expf(m_run - m_new);
    if (threadIdx.x < tile)
      prob[threadIdx.x] = none ? 0.f : expf(score[threadIdx.x] - m_new);
    __syncthreads();
    float p_sum = 0.f;
    for (int t = 0; t < tile; ++t)
      p_sum += prob[t];
    l_run = l_run * corr + p_sum;
    m_run = m_new;
    for (int64_t d = threadIdx.x; d < HD; d += blockDim.x) {
      float a = acc[d] * corr;
      for (int t = 0; t < tile; ++t)
        if (prob[t] != 0.f)
          a += prob[t] * to_f32(vc[(slot[t] * NKV + g) * HD + d]);
      acc[d] = a;
    }
    __syncthreads();
  }
  E* outr = out + (i * NH + h) * HD;
  for (int64_t d = threadIdx.x; d < HD; d += blockDim.x)
    outr[d] = from_f32<E>(l_run > 0.f ? acc[d] / l_run : 0.f);
}

__global__ void copy_rows_kernel(const uint8_t* src, uint8_t* dst, const int32_t* idx, int64_t M, int64_t row_bytes) {
  const int64_t m = blockIdx.x;
  const uint8_t* s = src + idx[m] * row_bytes;
  uint8_t* d = dst + idx[M + m] * row_bytes;
  if (s == d)
    return;
  for (int64_t x = threadIdx.x; x < row_bytes; x += blockDim.x)
    d[x] = s[x];
}

}  // namespace

void paged_attention(const Tensor& q, const PagedKv& kv, const Tensor& block_table, const Tensor& kv_len,
                     const Tensor& q_start, const Tensor& tree_mask, const Tensor& mask_len, float scale, Tensor& out) {
  const int64_t T = q.size(0), NH = q.size(1), HD = q.size(2), NKV = kv.k_cache.size(1);
  const int64_t B = block_table.size(0), MAXB = block_table.size(1);
  UPD_CHECK(T * NH <= INT32_MAX && HD <= 4096) << "paged_attention: launch too large";
  const int32_t* qs = q_start.data<int32_t>();
  const int64_t n_ml = mask_len.defined() ? B : 0;
  std::vector<int32_t> meta(static_cast<size_t>(T + B * MAXB + B + B + 1 + n_ml));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = qs[b]; r < qs[b + 1]; ++r)
      meta[r] = static_cast<int32_t>(b);
  std::copy_n(block_table.data<int32_t>(), B * MAXB, meta.begin() + T);
  std::copy_n(kv_len.data<int32_t>(), B, meta.begin() + T + B * MAXB);
  std::copy_n(qs, B + 1, meta.begin() + T + B * MAXB + B);
  if (n_ml > 0)
    std::copy_n(mask_len.data<int32_t>(), B, meta.begin() + T + B * MAXB + 2 * B + 1);
  const size_t tm_bytes = tree_mask.defined() ? tree_mask.nbytes() : 0;
  Scratch buf(meta.size() * sizeof(int32_t) + tm_bytes);
  int32_t* dm = buf.get<int32_t>();
  UPD_CUDA_CHECK(cudaMemcpyAsync(dm, meta.data(), meta.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream()));
  Meta m{
      dm, dm + T, dm + T + B * MAXB, dm + T + B * MAXB + B, n_ml > 0 ? dm + T + B * MAXB + 2 * B + 1 : nullptr, nullptr,
      0,  MAXB,   kv.block_size};
  if (tm_bytes > 0) {
    auto* tm = reinterpret_cast<uint8_t*>(dm + meta.size());
    UPD_CUDA_CHECK(cudaMemcpyAsync(tm, tree_mask.raw(), tm_bytes, cudaMemcpyHostToDevice, stream()));
    m.tree = tm;
    m.tm_cols = tree_mask.size(1);
  }
  const size_t smem = static_cast<size_t>(2 * HD) * sizeof(float);
  dispatch_f32_bf16(q.dtype(), "paged_attention", [&](auto tag) {
    using E = typename decltype(tag)::type;
    paged_attention_kernel<<<static_cast<unsigned>(T * NH), kThreads, smem, stream()>>>(
        q.data<E>(), kv.k_cache.data<E>(), kv.v_cache.data<E>(), out.data<E>(), m, NH, NKV, HD, scale);
    UPD_CUDA_CHECK_LAUNCH();
  });
  // The pageable host sources above are staged before cudaMemcpyAsync returns; meta may go.
}

void copy_rows(const Tensor& src, const Tensor& src_idx, Tensor& dst, const Tensor& dst_idx) {
  const int64_t M = src_idx.size(0);
  UPD_CHECK(M <= INT32_MAX) << "copy_rows: too many rows for one launch";
  const int64_t row_bytes = static_cast<int64_t>(src.nbytes()) / src.size(0);
  std::vector<int32_t> idx(static_cast<size_t>(2 * M));
  std::copy_n(src_idx.data<int32_t>(), M, idx.begin());
  std::copy_n(dst_idx.data<int32_t>(), M, idx.begin() + M);
  Scratch buf(idx.size() * sizeof(int32_t));
  UPD_CUDA_CHECK(
      cudaMemcpyAsync(buf.get<int32_t>(), idx.data(), idx.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream()));
  copy_rows_kernel<<<static_cast<unsigned>(M), 256, 0, stream()>>>(
      static_cast<const uint8_t*>(src.raw()), static_cast<uint8_t*>(dst.raw()), buf.get<int32_t>(), M, row_bytes);
  UPD_CUDA_CHECK_LAUNCH();
}

}  // namespace updraft::ops::cuda
