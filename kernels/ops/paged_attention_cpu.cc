// CPU paged attention: one work item per (new token, kv head); the query heads that share the
// kv head are scored together so each key row is read once per item. Softmax in f32.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/ops/backend.h"

namespace updraft::ops::cpu {

// Built twice (AVX-512 and baseline x86-64), chosen at load time by the CPU's features, so
// the simd loops below use 16-wide vectors where the machine has them.
__attribute__((target_clones("avx512f", "default"))) void paged_attention(
    const Tensor& q, const PagedKv& kv, const Tensor& block_table, const Tensor& kv_len, const Tensor& q_start,
    const Tensor& tree_mask, const Tensor& mask_len, float scale, Tensor& out) {
  const int64_t T = q.size(0), NH = q.size(1), HD = q.size(2), NKV = kv.k_cache.size(1);
  const int64_t G = NH / NKV, B = block_table.size(0), MAXB = block_table.size(1), BS = kv.block_size;
  const int32_t* qs = q_start.data<int32_t>();
  const int32_t* kl = kv_len.data<int32_t>();
  const int32_t* bt = block_table.data<int32_t>();
  const uint8_t* tm = tree_mask.defined() ? tree_mask.data<uint8_t>() : nullptr;
  const int64_t tm_cols = tree_mask.defined() ? tree_mask.size(1) : 0;
  const int32_t* ml = mask_len.defined() ? mask_len.data<int32_t>() : nullptr;
  const float* qp = q.data<float>();
  const float* kp = kv.k_cache.data<float>();
  const float* vp = kv.v_cache.data<float>();
  float* op = out.data<float>();

  std::vector<int32_t> seq_of(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = qs[b]; i < qs[b + 1]; ++i)
      seq_of[i] = static_cast<int32_t>(b);
  int64_t work = 0;
  for (int64_t b = 0; b < B; ++b)
    work += (qs[b + 1] - qs[b]) * kl[b];

#pragma omp parallel if (work * NH * HD > (1 << 15))
  {
    std::vector<int64_t> keys;
    std::vector<float> scores;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < T * NKV; ++item) {
      const int64_t i = item / NKV, g = item % NKV, b = seq_of[i];
      const int64_t n = qs[b + 1] - qs[b], S = kl[b], prefix = S - (ml != nullptr ? ml[b] : n), li = i - qs[b];
      keys.clear();
      for (int64_t j = 0; j < S; ++j) {
        const int64_t lj = j - prefix;
        const bool vis = lj < 0 || (tm != nullptr ? tm[i * tm_cols + lj] != 0 : lj <= li);
        if (vis)
          keys.push_back((static_cast<int64_t>(bt[b * MAXB + j / BS]) * BS + j % BS) * NKV + g);
      }
      const int64_t nk = static_cast<int64_t>(keys.size());
      scores.assign(static_cast<size_t>(G * nk), 0.f);
      for (int64_t n2 = 0; n2 < nk; ++n2) {
        const float* kr = kp + keys[n2] * HD;
        for (int64_t hh = 0; hh < G; ++hh) {
          const float* qr = qp + (i * NH + g * G + hh) * HD;
          float dot = 0.f;
#pragma omp simd reduction(+ : dot)
          for (int64_t d = 0; d < HD; ++d)
            dot += qr[d] * kr[d];
          scores[hh * nk + n2] = dot * scale;
        }
      }
      for (int64_t hh = 0; hh < G; ++hh) {
        float* sc = scores.data() + hh * nk;
        float* orow = op + (i * NH + g * G + hh) * HD;
        std::memset(orow, 0, sizeof(float) * HD);
        if (nk == 0)
          continue;
        const float m = *std::max_element(sc, sc + nk);
        float sum = 0.f;
        for (int64_t n2 = 0; n2 < nk; ++n2) {
          sc[n2] = std::exp(sc[n2] - m);
          sum += sc[n2];
        }
        const float inv = 1.f / sum;
        for (int64_t n2 = 0; n2 < nk; ++n2) {
          const float p = sc[n2] * inv;
          const float* vr = vp + keys[n2] * HD;
#pragma omp simd
          for (int64_t d = 0; d < HD; ++d)
            orow[d] += p * vr[d];
        }
      }
    }
  }
}

void copy_rows(const Tensor& src, const Tensor& src_idx, Tensor& dst, const Tensor& dst_idx) {
  const int64_t M = src_idx.size(0);
  const size_t row_bytes = src.nbytes() / static_cast<size_t>(src.size(0));
  const int32_t* si = src_idx.data<int32_t>();
  const int32_t* di = dst_idx.data<int32_t>();
  const auto* s = static_cast<const uint8_t*>(src.raw());
  auto* d = static_cast<uint8_t*>(dst.raw());
  for (int64_t m = 0; m < M; ++m)
    if (s + si[m] * row_bytes != d + di[m] * row_bytes)
      std::memcpy(d + di[m] * row_bytes, s + si[m] * row_bytes, row_bytes);
}

}  // namespace updraft::ops::cpu
