// Attention rows on AVX2 + FMA (paged_attention_avx2.h), for CPUs without AVX-512, where the
// two-query rows of paged_attention_rows_cpu.h spill their 32 vectors of 16 floats. Here a query's
// scores come 8 keys at a time (8 accumulators, the query's chunks loaded as the products go), and
// its value sums up to 4 chunks of 8 floats for up to 3 queries at a time (12 accumulators): every
// key and value row is read once per 64-key block for all of an item's queries, from L1 after the
// first. Compiled with -mavx2 -mfma; only called when cpu_has_avx2_fma().
#include "kernels/ops/paged_attention_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/ops/paged_attention_rows_cpu.h"

namespace updraft::ops::cpu {
namespace {

using attention_rows::kFarRows;
using attention_rows::normalize;
using attention_rows::prefetch_rows;
using attention_rows::softmax_numerators;

// Lane l of the result: the sum of a[l]'s 8 lanes, ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)),
// whatever the other vectors hold; lo: keys 0-3, hi: keys 4-7. (The halves are added in 128-bit
// vectors: Zen 1 splits a 256-bit lane permute into 8 micro-ops.)
[[gnu::always_inline]] inline void lane_sums8(const __m256 (&a)[8], __m128& lo, __m128& hi) {
  const __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  lo = _mm_add_ps(_mm256_castps256_ps128(h0), _mm256_extractf128_ps(h0, 1));
  hi = _mm_add_ps(_mm256_castps256_ps128(h1), _mm256_extractf128_ps(h1, 1));
}

// dst[i] = scale * (qr . krows[i]) for i < m, where qr and the key rows hold J chunks of 8. Each
// key's products are summed chunk by chunk in its own accumulator, then by lane_sums8: a score
// does not depend on the keys beside it (a short group repeats its first key, its extra sums
// unused). Key rows up to `readable` are asked for 8 and kFarRows ahead (0: none).
template <int J>
[[gnu::always_inline]] inline void score_keys(const float* qr, const float* const* krows, int64_t m, int64_t readable,
                                              float scale, float* dst) {
  const __m128 sv = _mm_set1_ps(scale);
  for (int64_t c0 = 0; c0 < m; c0 += 8) {
    const int64_t mm = std::min<int64_t>(8, m - c0);
    prefetch_rows<8 * J>(krows + c0 + 8, std::min<int64_t>(8, readable - c0 - 8));
    prefetch_rows<8 * J, 2>(krows + c0 + kFarRows, std::min<int64_t>(8, readable - c0 - kFarRows));
    const float* k[8];
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l)
      k[l] = krows[c0 + (l < mm ? l : 0)];
    __m256 acc[8];
    const __m256 q0 = _mm256_loadu_ps(qr);
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l)
      acc[l] = _mm256_mul_ps(q0, _mm256_loadu_ps(k[l]));
#pragma GCC unroll 16
    for (int j = 1; j < J; ++j) {
      const __m256 qj = _mm256_loadu_ps(qr + 8 * j);
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l)
        acc[l] = _mm256_fmadd_ps(qj, _mm256_loadu_ps(k[l] + 8 * j), acc[l]);
    }
    __m128 lo, hi;
    lane_sums8(acc, lo, hi);
    lo = _mm_mul_ps(lo, sv);
    hi = _mm_mul_ps(hi, sv);
    if (mm == 8) {
      _mm_storeu_ps(dst + c0, lo);
      _mm_storeu_ps(dst + c0 + 4, hi);
    } else {
      alignas(16) float part[8];
      _mm_store_ps(part, lo);
      _mm_store_ps(part + 4, hi);
      std::memcpy(dst + c0, part, sizeof(float) * static_cast<size_t>(mm));
    }
  }
}

// Chunks [d0, d0 + C) of Qb queries' accumulators (acc[i]: query i's, in memory) += pr[i][n] *
// vrows[n] for n < m, in key order, each value chunk loaded once for the Qb queries. Value rows
// up to `readable` are asked for 8 and kFarRows ahead as the sums go (0: none).
template <int J, int Qb, int C>
[[gnu::always_inline]] inline void value_chunks(float* const* acc_mem, const float* const* pr,
                                                const float* const* vrows, int64_t m, int d0, int64_t readable) {
  __m256 acc[Qb][C];
#pragma GCC unroll 4
  for (int i = 0; i < Qb; ++i)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c)
      acc[i][c] = _mm256_loadu_ps(acc_mem[i] + 8 * (d0 + c));
  for (int64_t n = 0; n < m; ++n) {
    if (n + 8 < readable)
      prefetch_rows<8 * J>(vrows + n + 8, 1);
    if (n + kFarRows < readable)
      prefetch_rows<8 * J, 2>(vrows + n + kFarRows, 1);
    const float* v = vrows[n] + 8 * d0;
    __m256 p[Qb];
#pragma GCC unroll 4
    for (int i = 0; i < Qb; ++i)
      p[i] = _mm256_broadcast_ss(pr[i] + n);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const __m256 vc = _mm256_loadu_ps(v + 8 * c);
#pragma GCC unroll 4
      for (int i = 0; i < Qb; ++i)
        acc[i][c] = _mm256_fmadd_ps(p[i], vc, acc[i][c]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < Qb; ++i)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c)
      _mm256_storeu_ps(acc_mem[i] + 8 * (d0 + c), acc[i][c]);
}

// Qb queries' value sums over m rows, 4 chunks at a time (the first pass asks for the rows ahead).
template <int J, int Qb>
[[gnu::always_inline]] inline void value_group(float* const* acc_mem, const float* const* pr, const float* const* vrows,
                                               int64_t m, int64_t readable) {
  int d0 = 0;
  for (; d0 + 4 <= J; d0 += 4)
    value_chunks<J, Qb, 4>(acc_mem, pr, vrows, m, d0, d0 == 0 ? readable : 0);
  if constexpr (J % 4 != 0)
    value_chunks<J, Qb, J % 4>(acc_mem, pr, vrows, m, d0, d0 == 0 ? readable : 0);
}

// Value sums of queries [q0, q0 + count) (count <= 3) over m rows, probabilities from column
// `from` of their score rows.
template <int J>
void values(AttentionScratch& s, int64_t q0, int64_t count, int64_t ld, int64_t from, const float* const* vrows,
            int64_t m, int64_t readable) {
  float* accs[3];
  const float* pr[3];
  for (int64_t i = 0; i < count; ++i) {
    accs[i] = s.acc.data() + (q0 + i) * 8 * J;
    pr[i] = s.scores.data() + (q0 + i) * ld + from;
  }
  if (count == 3)
    value_group<J, 3>(accs, pr, vrows, m, readable);
  else if (count == 2)
    value_group<J, 2>(accs, pr, vrows, m, readable);
  else
    value_group<J, 1>(accs, pr, vrows, m, readable);
}

// The item's queries (rows x G heads, qi = r * G + h): the shared keys scored a 64-key block at a
// time for every query while the block is in L1, then each row's own keys; each query's softmax;
// then the shared values, a block at a time for every 3 queries, and each row's own values.
template <int J>
void attend(const float* q, float* out, int64_t rows, int64_t G, int64_t row_stride, const float* const* keys,
            const float* const* vals, int64_t ns, const std::vector<const float*>* extra_k,
            const std::vector<const float*>* extra_v, float scale, AttentionScratch& scratch) {
  constexpr int64_t HD = 8 * J, kBlock = 64;
  const int64_t Q = rows * G, ld = scratch.prepare(rows, G, ns, extra_k, HD);
  float* scores = scratch.scores.data();
  auto query = [&](int64_t qi) { return q + (qi / G) * row_stride + (qi % G) * HD; };
  for (int64_t n0 = 0; n0 < ns; n0 += kBlock)
    for (int64_t qi = 0; qi < Q; ++qi)
      score_keys<J>(query(qi), keys + n0, std::min(kBlock, ns - n0), qi == 0 ? ns - n0 : 0, scale,
                    scores + qi * ld + n0);
  for (int64_t qi = 0; qi < Q; ++qi) {
    const std::vector<const float*>& ek = extra_k[qi / G];
    const int64_t ne = static_cast<int64_t>(ek.size()), nk = ns + ne;
    score_keys<J>(query(qi), ek.data(), ne, ne, scale, scores + qi * ld + ns);
    if (nk > 0)
      normalize(scores + qi * ld, nk, 1.f / softmax_numerators(scores + qi * ld, nk));
  }
  for (int64_t n0 = 0; n0 < ns; n0 += kBlock)
    for (int64_t q0 = 0; q0 < Q; q0 += 3)
      values<J>(scratch, q0, std::min<int64_t>(3, Q - q0), ld, n0, vals + n0, std::min(kBlock, ns - n0),
                q0 == 0 ? ns - n0 : 0);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<const float*>& ev = extra_v[r];
    const int64_t ne = static_cast<int64_t>(ev.size());
    for (int64_t h0 = 0; h0 < G; h0 += 3)
      values<J>(scratch, r * G + h0, std::min<int64_t>(3, G - h0), ld, ns, ev.data(), ne, ne);
  }
  for (int64_t qi = 0; qi < Q; ++qi)
    std::memcpy(out + (qi / G) * row_stride + (qi % G) * HD, scratch.acc.data() + qi * HD, sizeof(float) * HD);
}

}  // namespace

bool attend_rows_avx2(int64_t HD, const float* q, float* out, int64_t rows, int64_t G, int64_t row_stride,
                      const float* const* keys, const float* const* vals, int64_t ns,
                      const std::vector<const float*>* extra_k, const std::vector<const float*>* extra_v, float scale,
                      AttentionScratch& scratch) {
#define UPD_AVX2_ROWS(H)                                                                          \
  case H:                                                                                         \
    attend<H / 8>(q, out, rows, G, row_stride, keys, vals, ns, extra_k, extra_v, scale, scratch); \
    return true;
  switch (HD) {
    UPD_AVX2_ROWS(32)
    UPD_AVX2_ROWS(56)
    UPD_AVX2_ROWS(64)
    UPD_AVX2_ROWS(80)
    UPD_AVX2_ROWS(96)
    UPD_AVX2_ROWS(128)
    default:
      return false;
  }
#undef UPD_AVX2_ROWS
}

}  // namespace updraft::ops::cpu
