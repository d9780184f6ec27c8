// CPU paged attention: work items of (sequence, kv head, up to 8 new rows); the query heads that
// share the kv head are scored together. Softmax in f32.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/ops/backend.h"
#include "kernels/ops/vec_math.h"

namespace updraft::ops::cpu {
namespace {

// Chunk j of a row of HD floats, zero past the row's end (HD need not be a multiple of 16). A
// half chunk (HD 56) is one 8-float load widened in registers: filling a zeroed vector in
// memory and loading it back stalls on store forwarding (it cost a third of the attention).
template <int HD>
[[gnu::always_inline]] inline v16f chunk(const float* row, int j) {
  constexpr int kTail = HD % 16;
  if (kTail == 0 || 16 * (j + 1) <= HD)
    return load16(row + 16 * j);
  if constexpr (kTail == 8) {
    typedef float v8f __attribute__((vector_size(32)));
    v8f h;
    std::memcpy(&h, row + 16 * j, sizeof(h));
    return __builtin_shufflevector(h, v8f{}, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  }
  v16f v{};
  std::memcpy(&v, row + 16 * j, sizeof(float) * kTail);
  return v;
}

// r[i] = sum of the lanes of p[i]: four rounds of pairwise shuffles and adds (15 adds for 16
// sums) instead of a horizontal reduction per dot product.
[[gnu::always_inline]] inline v16f lane_sums(v16f* p) {
  v16f t[8], u[4], v[2];
  for (int i = 0; i < 8; ++i)
    t[i] =
        __builtin_shufflevector(p[2 * i], p[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
        __builtin_shufflevector(p[2 * i], p[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  for (int i = 0; i < 4; ++i)
    u[i] = __builtin_shufflevector(t[2 * i], t[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
           __builtin_shufflevector(t[2 * i], t[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  for (int i = 0; i < 2; ++i)
    v[i] = __builtin_shufflevector(u[2 * i], u[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
           __builtin_shufflevector(u[2 * i], u[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  return __builtin_shufflevector(v[0], v[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
         __builtin_shufflevector(v[0], v[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

// sc[i] = exp(sc[i] - max) for i < n (16 at a time); returns their sum (lane sums, then the
// lanes in order: a fixed order for a given n).
[[gnu::always_inline]] inline float softmax_numerators(float* sc, int64_t n) {
  // The maximum 16 at a time (a scalar max is a chain of dependent compares: it took an eighth
  // of a long context's attention); a maximum is exact, so the lanes' order does not matter.
  v16f mv = -__builtin_inff() - v16f{};
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const v16f x = load16(sc + k);
    mv = x > mv ? x : mv;
  }
  if (k < n) {
    const v16f x = load16_partial(sc + k, n - k, -__builtin_inff());
    mv = x > mv ? x : mv;
  }
  float m = mv[0];
  for (int l = 1; l < 16; ++l)
    m = mv[l] > m ? mv[l] : m;
  v16f sum{};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const v16f e = exp16(load16(sc + i) - m);
    std::memcpy(sc + i, &e, sizeof(e));
    sum += e;
  }
  if (i < n) {
    const v16f e = exp16(load16_partial(sc + i, n - i, -__builtin_inff()) - m);
    std::memcpy(sc + i, &e, sizeof(float) * static_cast<size_t>(n - i));
    const v16i live = __builtin_convertvector(v16f{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, v16i) <
                      static_cast<int32_t>(n - i);
    sum += live ? e : v16f{};
  }
  float total = 0.f;
  for (int l = 0; l < 16; ++l)
    total += sum[l];
  return total;
}

// The generic loop, for head sizes without a specialisation (attend_rows below): the G query
// heads q[hh * HD ..] that share a kv head, over the nk visible key and value rows, in key order.
// Each output row depends only on its own query and keys, never on how many rows are computed
// together (decode and verification agree bitwise).
[[gnu::always_inline]] inline void attend_generic(const float* q, int64_t G, int64_t HD, const float* const* krows,
                                                  const float* const* vrows, int64_t nk, float scale, float* scores,
                                                  float* out) {
  for (int64_t n2 = 0; n2 < nk; ++n2) {
    const float* kr = krows[n2];
    for (int64_t hh = 0; hh < G; ++hh) {
      const float* qr = q + hh * HD;
      float dot = 0.f;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < HD; ++d)
        dot += qr[d] * kr[d];
      scores[hh * nk + n2] = dot * scale;
    }
  }
  for (int64_t hh = 0; hh < G; ++hh) {
    float* sc = scores + hh * nk;
    float* orow = out + hh * HD;
    std::memset(orow, 0, sizeof(float) * HD);
    if (nk == 0)
      continue;
    const float inv = 1.f / softmax_numerators(sc, nk);
    for (int64_t n2 = 0; n2 < nk; ++n2) {
      const float p = sc[n2] * inv;
      const float* vr = vrows[n2];
#pragma omp simd
      for (int64_t d = 0; d < HD; ++d)
        orow[d] += p * vr[d];
    }
  }
}

// Asks for the cache lines of m (may be <= 0: none) rows of HDc floats.
template <int HDc>
[[gnu::always_inline]] inline void prefetch_rows(const float* const* rows, int64_t m) {
  for (int64_t l = 0; l < m; ++l)
    for (int c = 0; c < HDc; c += 16)
      __builtin_prefetch(rows[l] + c, 0, 3);
}

// The scores of m (<= 16) keys for one query, each from its own 16-lane partial sums and then
// lane_sums, so a score does not depend on which keys or queries are computed beside it.
template <int HDc>
[[gnu::always_inline]] inline void score_chunk(const float* q, const float* const* krows, int64_t m, float scale,
                                               float* dst) {
  constexpr int J = (HDc + 15) / 16;
  v16f qv[J];
#pragma GCC unroll 8
  for (int j = 0; j < J; ++j)
    qv[j] = chunk<HDc>(q, j);
  v16f part[16];
  for (int l = 0; l < 16; ++l) {
    if (l >= m) {
      part[l] = v16f{};
      continue;
    }
    // Started from the first product, not from zero: no 16 vectors zeroed in memory for every 16
    // keys. (The compiler may fuse the first two products either way, so the last bits differ
    // from a zero start; every query still runs this same code whatever rows are beside it.)
    part[l] = qv[0] * chunk<HDc>(krows[l], 0);
#pragma GCC unroll 8
    for (int j = 1; j < J; ++j)
      part[l] += qv[j] * chunk<HDc>(krows[l], j);
  }
  const v16f sums = lane_sums(part) * scale;
  std::memcpy(dst, &sums, sizeof(float) * static_cast<size_t>(m));
}

// acc (J vectors in memory) += sc[n] * inv * v[n] for n < m, in key order.
template <int HDc>
[[gnu::always_inline]] inline void accumulate_values(float* acc_mem, const float* sc, float inv,
                                                     const float* const* vrows, int64_t m) {
  constexpr int J = (HDc + 15) / 16;
  v16f acc[J];
  std::memcpy(acc, acc_mem, sizeof(acc));
  for (int64_t n = 0; n < m; ++n) {
    const float p = sc[n] * inv;
#pragma GCC unroll 8
    for (int j = 0; j < J; ++j)
      acc[j] += p * chunk<HDc>(vrows[n], j);
  }
  std::memcpy(acc_mem, acc, sizeof(acc));
}

// Several query rows of one work item at once (its rows x the G heads of its kv head): the keys
// every row sees (`ns` of them: the prefix, and for causal rows the first row's new keys) are
// scored and weighed 16 at a time for all queries while those 16 are in L1, instead of each
// query streaming all of them from L2; then each row's own keys (a tree row's ancestors, a
// causal row's later keys) per query. Each query's scores, softmax and value sums are the same
// operations in the same order as over its keys alone, so its output is bitwise the same
// whatever rows are computed with it (a decode row is one such item of one row). extra_k/extra_v[r]: row r's own key
// and value rows.
template <int HDc>
[[gnu::always_inline]] inline void attend_rows(const float* q, float* out, int64_t rows, int64_t G, int64_t row_stride,
                                               const float* const* keys, const float* const* vals, int64_t ns,
                                               const std::vector<const float*>* extra_k,
                                               const std::vector<const float*>* extra_v, float scale,
                                               std::vector<float>& scores, std::vector<float>& acc) {
  constexpr int64_t JF = (HDc + 15) / 16 * 16;  // floats of a query's accumulators
  const int64_t Q = rows * G;
  int64_t ld = ns;
  for (int64_t r = 0; r < rows; ++r)
    ld = std::max(ld, ns + static_cast<int64_t>(extra_k[r].size()));
  ld += 16;
  scores.resize(static_cast<size_t>(Q * ld));
  acc.assign(static_cast<size_t>(Q * JF), 0.f);
  auto query = [&](int64_t qi) { return q + (qi / G) * row_stride + (qi % G) * HDc; };
  for (int64_t n0 = 0; n0 < ns; n0 += 16) {
    // Rows come from KV blocks anywhere in the cache: ask for the next 16 keys now, and for
    // these 16 keys' values, which the value pass below reads.
    prefetch_rows<HDc>(keys + n0 + 16, std::min<int64_t>(16, ns - n0 - 16));
    prefetch_rows<HDc>(vals + n0, std::min<int64_t>(16, ns - n0));
    for (int64_t qi = 0; qi < Q; ++qi)
      score_chunk<HDc>(query(qi), keys + n0, std::min<int64_t>(16, ns - n0), scale, scores.data() + qi * ld + n0);
  }
  std::vector<float> inv(static_cast<size_t>(Q));
  for (int64_t qi = 0; qi < Q; ++qi) {
    const std::vector<const float*>& ek = extra_k[qi / G];
    const int64_t ne = static_cast<int64_t>(ek.size()), nk = ns + ne;
    float* sc = scores.data() + qi * ld;
    for (int64_t e0 = 0; e0 < ne; e0 += 16)
      score_chunk<HDc>(query(qi), ek.data() + e0, std::min<int64_t>(16, ne - e0), scale, sc + ns + e0);
    inv[static_cast<size_t>(qi)] = nk == 0 ? 0.f : 1.f / softmax_numerators(sc, nk);
  }
  for (int64_t n0 = 0; n0 < ns; n0 += 16)
    for (int64_t qi = 0; qi < Q; ++qi)
      accumulate_values<HDc>(acc.data() + qi * JF, scores.data() + qi * ld + n0, inv[static_cast<size_t>(qi)],
                             vals + n0, std::min<int64_t>(16, ns - n0));
  for (int64_t qi = 0; qi < Q; ++qi) {
    const std::vector<const float*>& ev = extra_v[qi / G];
    accumulate_values<HDc>(acc.data() + qi * JF, scores.data() + qi * ld + ns, inv[static_cast<size_t>(qi)], ev.data(),
                           static_cast<int64_t>(ev.size()));
    std::memcpy(out + (qi / G) * row_stride + (qi % G) * HDc, acc.data() + qi * JF, sizeof(float) * HDc);
  }
}

// An item's key and value rows (kv head g of one sequence): all S of them, the first ns that
// every row of the item sees (the prefix, and for causal rows those the item's first row sees),
// and each row's own after them (a tree row's ancestors in the window, a causal row's later keys).
struct ItemKeys {
  std::vector<const float*> keys, vals;
  std::vector<std::vector<const float*>> extra_k, extra_v;
  int64_t ns = 0;
};

// blocks: the sequence's block table row; li0: the item's first row among the sequence's new
// rows; mask: that row's tree-mask row (nullptr: causal), rows tm_cols apart.
[[gnu::always_inline]] inline void gather_item(ItemKeys& it, const float* kp, const float* vp, const int32_t* blocks,
                                               int64_t BS, int64_t NKV, int64_t HD, int64_t g, int64_t S,
                                               int64_t prefix, int64_t li0, int64_t rows, const uint8_t* mask,
                                               int64_t tm_cols) {
  it.keys.resize(static_cast<size_t>(S));
  it.vals.resize(static_cast<size_t>(S));
  for (int64_t j0 = 0; j0 < S; j0 += BS) {  // block by block: no division per key
    const int64_t first = (static_cast<int64_t>(blocks[j0 / BS]) * BS * NKV + g) * HD;
    for (int64_t o = 0; o < std::min(BS, S - j0); ++o) {
      it.keys[static_cast<size_t>(j0 + o)] = kp + first + o * NKV * HD;
      it.vals[static_cast<size_t>(j0 + o)] = vp + first + o * NKV * HD;
    }
  }
  it.ns = mask != nullptr ? prefix : std::min(S, prefix + li0 + 1);
  it.extra_k.resize(static_cast<size_t>(rows));
  it.extra_v.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<const float*>& ek = it.extra_k[static_cast<size_t>(r)];
    std::vector<const float*>& ev = it.extra_v[static_cast<size_t>(r)];
    ek.clear();
    ev.clear();
    const int64_t end = mask != nullptr ? S : std::min(S, prefix + li0 + r + 1);
    for (int64_t j = it.ns; j < end; ++j)
      if (mask == nullptr || mask[r * tm_cols + (j - prefix)] != 0) {
        ek.push_back(it.keys[static_cast<size_t>(j)]);
        ev.push_back(it.vals[static_cast<size_t>(j)]);
      }
  }
}

// attend_rows at the head size's specialisation; false for head sizes without one.
[[gnu::always_inline]] inline bool rows_dispatch(int64_t HD, const float* q, float* out, int64_t rows, int64_t G,
                                                 int64_t row_stride, const float* const* keys, const float* const* vals,
                                                 int64_t ns, const std::vector<const float*>* ek,
                                                 const std::vector<const float*>* ev, float scale,
                                                 std::vector<float>& scores, std::vector<float>& acc) {
#define UPD_ROWS(H)                                                                          \
  case H:                                                                                    \
    attend_rows<H>(q, out, rows, G, row_stride, keys, vals, ns, ek, ev, scale, scores, acc); \
    return true;
  switch (HD) {
    UPD_ROWS(32)
    UPD_ROWS(56)
    UPD_ROWS(64)
    UPD_ROWS(80)
    UPD_ROWS(96)
    UPD_ROWS(128)
    default:
      return false;
  }
#undef UPD_ROWS
}

}  // namespace

// Built twice (AVX-512 and baseline x86-64), chosen at load time by the CPU's features, so
// the simd loops below use 16-wide vectors where the machine has them.
__attribute__((target_clones("avx512f", "default"))) void paged_attention(
    const Tensor& q, const PagedKv& kv, const Tensor& block_table, const Tensor& kv_len, const Tensor& q_start,
    const Tensor& tree_mask, const Tensor& mask_len, float scale, Tensor& out) {
  const int64_t NH = q.size(1), HD = q.size(2), NKV = kv.k_cache.size(1);
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

  // Work items: (sequence, kv head, chunk of at most kRowsPerItem of the sequence's new rows); an
  // item gathers its key and value rows once and attends each of its rows over the visible ones
  // (a causal row: a prefix of them; a tree row: its ancestors, gathered in key order).
  constexpr int64_t kRowsPerItem = 8;
  std::vector<std::array<int64_t, 3>> chunks;  // (sequence, first new row, rows): as even as possible
  int64_t work = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = qs[b + 1] - qs[b], parts = (n + kRowsPerItem - 1) / kRowsPerItem;
    for (int64_t p = 0; p < parts; ++p)
      chunks.push_back({b, qs[b] + n * p / parts, n * (p + 1) / parts - n * p / parts});
    work += n * kl[b];
  }
  const int64_t items = static_cast<int64_t>(chunks.size()) * NKV;
  // A chunk's NKV items (its heads, which share cache lines) on one thread, chunks alternating
  // between threads (a causal prefill's later chunks see more keys); with fewer chunks than
  // threads (a verification or a decode at batch 1) the heads are split between the threads.
  const int64_t threads = omp_get_max_threads();
  const int64_t per =
      static_cast<int64_t>(chunks.size()) >= threads ? NKV : std::max<int64_t>(1, (items + threads - 1) / threads);

#pragma omp parallel if (work * NH * HD > (1 << 15))
  {
    // Per-thread buffers kept across calls (a forward calls this once per layer).
    thread_local ItemKeys it;
    thread_local std::vector<const float*> krows, vrows;
    thread_local std::vector<float> scores, acc;
#pragma omp for schedule(static, per)
    for (int64_t item = 0; item < items; ++item) {
      const auto [b, r0, rows] = chunks[static_cast<size_t>(item / NKV)];
      const int64_t g = item % NKV, n = qs[b + 1] - qs[b], S = kl[b], prefix = S - (ml != nullptr ? ml[b] : n);
      gather_item(it, kp, vp, bt + b * MAXB, BS, NKV, HD, g, S, prefix, r0 - qs[b], rows,
                  tm != nullptr ? tm + r0 * tm_cols : nullptr, tm_cols);
      if (rows_dispatch(HD, qp + (r0 * NH + g * G) * HD, op + (r0 * NH + g * G) * HD, rows, G, NH * HD, it.keys.data(),
                        it.vals.data(), it.ns, it.extra_k.data(), it.extra_v.data(), scale, scores, acc))
        continue;
      for (int64_t r = 0; r < rows; ++r) {  // other head sizes: a row's visible keys, then the generic loop
        const std::vector<const float*>& ek = it.extra_k[static_cast<size_t>(r)];
        const std::vector<const float*>& ev = it.extra_v[static_cast<size_t>(r)];
        krows.assign(it.keys.begin(), it.keys.begin() + it.ns);
        krows.insert(krows.end(), ek.begin(), ek.end());
        vrows.assign(it.vals.begin(), it.vals.begin() + it.ns);
        vrows.insert(vrows.end(), ev.begin(), ev.end());
        const int64_t nk = static_cast<int64_t>(krows.size()), i = r0 + r;
        scores.resize(static_cast<size_t>(G * nk + 16));
        attend_generic(qp + (i * NH + g * G) * HD, G, HD, krows.data(), vrows.data(), nk, scale, scores.data(),
                       op + (i * NH + g * G) * HD);
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
