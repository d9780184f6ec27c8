// CPU paged attention: work items of (sequence, kv head, up to 32 new rows); the query heads that
// share the kv head are scored together, with AVX-512 two queries at a time over each key and
// value loaded (paged_attention_rows_cpu.h), with AVX2 a query over 8 keys and 3 queries over a
// value row at a time (paged_attention_avx2.cc), each 64-key block read once for all the item's
// rows; a generic loop otherwise. Softmax in f32.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/ops/backend.h"
#include "kernels/ops/gemv_cpu.h"
#include "kernels/ops/paged_attention_avx2.h"
#include "kernels/ops/paged_attention_rows_cpu.h"
#include "kernels/ops/vec_math.h"

namespace updraft::ops::cpu {

int64_t AttentionScratch::prepare(int64_t rows, int64_t G, int64_t ns, const std::vector<const float*>* extra_k,
                                  int64_t per_query) {
  int64_t ld = ns;
  for (int64_t r = 0; r < rows; ++r)
    ld = std::max(ld, ns + static_cast<int64_t>(extra_k[r].size()));
  ld += 16;
  scores.resize(static_cast<size_t>(rows * G * ld));
  acc.assign(static_cast<size_t>(rows * G * per_query), 0.f);
  return ld;
}

namespace {

using namespace attention_rows;

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

using Scratch = AttentionScratch;  // a thread's buffers for attend_rows, kept across calls

// accumulate_values for queries a and b over m value rows, their probabilities from column `from`.
template <int HDc>
[[gnu::always_inline]] inline void values_pair(Scratch& s, int64_t a, int64_t b, int64_t ld, int64_t from,
                                               const float* const* vrows, int64_t m, int64_t readable) {
  constexpr int64_t JF = (HDc + 15) / 16 * 16;
  float* const accs[2] = {s.acc.data() + a * JF, s.acc.data() + b * JF};
  const float* const pr[2] = {s.scores.data() + a * ld + from, s.scores.data() + b * ld + from};
  accumulate_values<HDc>(accs, pr, vrows, m, readable);
}

// Several query rows of one work item at once (its rows x the G heads of its kv head), two
// queries at a time: the keys every row sees (`ns` of them: the prefix, and for causal rows the
// first row's new keys) are scored, then weighed, a block of 64 at a time for every pair while
// the block is in L1, instead of each query streaming all of them from L2; then each row's own
// keys (a tree row's ancestors, a causal row's later keys). Each query's scores, softmax and
// value sums are the same operations in the same order as over its keys alone, so its output is
// bitwise the same whatever rows are computed with it (a decode row is one such item of one
// row). extra_k/extra_v[r]: row r's own key and value rows.
template <int HDc>
[[gnu::always_inline]] inline void attend_rows(const float* q, float* out, int64_t rows, int64_t G, int64_t row_stride,
                                               const float* const* keys, const float* const* vals, int64_t ns,
                                               const std::vector<const float*>* extra_k,
                                               const std::vector<const float*>* extra_v, float scale,
                                               Scratch& scratch) {
  std::vector<float>&scores = scratch.scores, &acc = scratch.acc;
  constexpr int64_t JF = (HDc + 15) / 16 * 16;  // floats of a query's accumulators
  const int64_t Q = rows * G, ld = scratch.prepare(rows, G, ns, extra_k, JF);
  auto query = [&](int64_t qi) { return q + (qi / G) * row_stride + (qi % G) * HDc; };
  // The queries in pairs within a row (a row's heads see the same keys); with G odd, a row's
  // last head pairs with itself (its two results are the same, written twice).
  const int64_t P = rows * ((G + 1) / 2);
  auto pair = [&](int64_t pi, int64_t i) {
    const int64_t r = pi / ((G + 1) / 2), h = 2 * (pi % ((G + 1) / 2)) + i;
    return r * G + std::min(h, G - 1);
  };
  constexpr int64_t kBlock = 64;  // keys scored (and weighed, below) per pass over the queries
  for (int64_t n0 = 0; n0 < ns; n0 += kBlock) {
    // Rows come from KV blocks anywhere in the cache: the first pair asks for the key rows 16 to
    // 32 ahead as it scores (and for the value rows 8 ahead as it weighs them, below), and for
    // both kFarRows ahead into L2; the other pairs find them in L1. (Asking for a block of 64 rows' keys and values at
    // once, as before, overran the core's outstanding misses: a decode row at 512-1024 keys took 1.1-1.35x as long.)
    for (int64_t pi = 0; pi < P; ++pi) {
      const int64_t a = pair(pi, 0), b = pair(pi, 1);
      const float* const qs[2] = {query(a), query(b)};
      float* const dst[2] = {scores.data() + a * ld + n0, scores.data() + b * ld + n0};
      score_chunk<HDc>(qs, keys + n0, std::min<int64_t>(kBlock, ns - n0), pi == 0 ? ns - n0 : 0, scale, dst);
    }
  }
  for (int64_t pi = 0; pi < P; ++pi) {
    const int64_t a = pair(pi, 0), b = pair(pi, 1);
    const std::vector<const float*>& ek = extra_k[a / G];  // a and b are heads of one row
    const int64_t ne = static_cast<int64_t>(ek.size()), nk = ns + ne;
    const float* const qs[2] = {query(a), query(b)};
    float* const dst[2] = {scores.data() + a * ld + ns, scores.data() + b * ld + ns};
    score_chunk<HDc>(qs, ek.data(), ne, ne, scale, dst);
    for (int64_t i = 0; i < (b != a ? 2 : 1); ++i) {  // a query paired with itself: its scores exponentiated once
      const int64_t qi = i == 0 ? a : b;
      if (nk > 0)
        normalize(scores.data() + qi * ld, nk, 1.f / softmax_numerators(scores.data() + qi * ld, nk));
    }
  }
  // values_pair, not a lambda: a lambda is not cloned with the function for AVX-512.
  for (int64_t n0 = 0; n0 < ns; n0 += kBlock)
    for (int64_t pi = 0; pi < P; ++pi)
      values_pair<HDc>(scratch, pair(pi, 0), pair(pi, 1), ld, n0, vals + n0, std::min<int64_t>(kBlock, ns - n0),
                       pi == 0 ? ns - n0 : 0);
  for (int64_t pi = 0; pi < P; ++pi) {
    const std::vector<const float*>& ev = extra_v[pair(pi, 0) / G];
    values_pair<HDc>(scratch, pair(pi, 0), pair(pi, 1), ld, ns, ev.data(), static_cast<int64_t>(ev.size()),
                     static_cast<int64_t>(ev.size()));
  }
  for (int64_t qi = 0; qi < Q; ++qi)
    std::memcpy(out + (qi / G) * row_stride + (qi % G) * HDc, acc.data() + qi * JF, sizeof(float) * HDc);
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
                                                 const std::vector<const float*>* ev, float scale, Scratch& scratch) {
#define UPD_ROWS(H)                                                                      \
  case H:                                                                                \
    attend_rows<H>(q, out, rows, G, row_stride, keys, vals, ns, ek, ev, scale, scratch); \
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

// Built three times (AVX-512, AVX2 and baseline x86-64), chosen at load time by the CPU's
// features, so the simd loops below use the widest vectors the machine has (on a Zen 1 host the
// AVX2 build's generic loop took 0.55-1.0x the baseline one's time at 64 keys and 2-10 rows and at
// 1024 keys and 10-16 rows, 0.7-1.3x elsewhere: kernels_bench, three runs taking turns).
__attribute__((target_clones("avx512f", "avx2", "default"))) void paged_attention(
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

  // Work items: (sequence, kv head, chunk of the sequence's new rows); an item gathers its key and
  // value rows once and attends each of its rows over the visible ones (a causal row: a prefix of
  // them; a tree row: its ancestors, gathered in key order). Every chunk reads the keys and values
  // again (at 1024 keys, 10 rows took 1.12x as long in two chunks of 5 as in one, 24 rows
  // 1.1-1.4x in three chunks), so a sequence's rows are split only as far as the threads need
  // items, into chunks of 8 to 32 rows (32: a causal prefill's chunks stay even across threads,
  // and an item's scores stay a few hundred KiB). A query's result does not depend on its chunk.
  const int64_t threads = omp_get_max_threads();
  const int64_t splits = std::max<int64_t>(1, threads / std::max<int64_t>(1, B * NKV));
  std::vector<std::array<int64_t, 3>> chunks;  // (sequence, first new row, rows): as even as possible
  int64_t work = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = qs[b + 1] - qs[b];
    const int64_t rows = std::clamp<int64_t>((n + splits - 1) / splits, 8, 32), parts = (n + rows - 1) / rows;
    for (int64_t p = 0; p < parts; ++p)
      chunks.push_back({b, qs[b] + n * p / parts, n * (p + 1) / parts - n * p / parts});
    work += n * kl[b];
  }
  const int64_t items = static_cast<int64_t>(chunks.size()) * NKV;
  // The specialised rows keep two queries' 16-float chunks and 16 keys' partial sums in registers:
  // AVX-512's 32 of 64 bytes. In 16-byte or 32-byte registers they spill (on an AVX2-only Zen 1
  // host the generic loop below ran the built-in policy's attention 2.3-3.3x as fast at 64 keys and
  // 1-16 rows, 1.4-2.7x at 1024 keys), so AVX2 machines run rows written for 16 ymm registers.
  const bool specialised = cpu_has_avx512(), avx2_rows = !specialised && cpu_has_avx2_fma();
  // A chunk's NKV items (its heads, which share cache lines) on one thread, chunks alternating
  // between threads (a causal prefill's later chunks see more keys); with fewer chunks than
  // threads (a verification or a decode at batch 1) the heads are split between the threads.
  const int64_t per =
      static_cast<int64_t>(chunks.size()) >= threads ? NKV : std::max<int64_t>(1, (items + threads - 1) / threads);

  // One item on the calling thread, with that thread's buffers (kept across calls: a forward
  // calls this once per layer). Inlined into the team and the loop below alike.
  const auto attend_item = [&](int64_t item) __attribute__((always_inline)) {
    thread_local ItemKeys it;
    thread_local std::vector<const float*> krows, vrows;
    thread_local Scratch scratch;
    const auto [b, r0, rows] = chunks[static_cast<size_t>(item / NKV)];
    const int64_t g = item % NKV, n = qs[b + 1] - qs[b], S = kl[b], prefix = S - (ml != nullptr ? ml[b] : n);
    gather_item(it, kp, vp, bt + b * MAXB, BS, NKV, HD, g, S, prefix, r0 - qs[b], rows,
                tm != nullptr ? tm + r0 * tm_cols : nullptr, tm_cols);
    if (specialised &&
        rows_dispatch(HD, qp + (r0 * NH + g * G) * HD, op + (r0 * NH + g * G) * HD, rows, G, NH * HD, it.keys.data(),
                      it.vals.data(), it.ns, it.extra_k.data(), it.extra_v.data(), scale, scratch))
      return;
    if (avx2_rows &&
        attend_rows_avx2(HD, qp + (r0 * NH + g * G) * HD, op + (r0 * NH + g * G) * HD, rows, G, NH * HD, it.keys.data(),
                         it.vals.data(), it.ns, it.extra_k.data(), it.extra_v.data(), scale, scratch))
      return;
    for (int64_t r = 0; r < rows; ++r) {  // otherwise: a row's visible keys, then the generic loop
      const std::vector<const float*>& ek = it.extra_k[static_cast<size_t>(r)];
      const std::vector<const float*>& ev = it.extra_v[static_cast<size_t>(r)];
      krows.assign(it.keys.begin(), it.keys.begin() + it.ns);
      krows.insert(krows.end(), ek.begin(), ek.end());
      vrows.assign(it.vals.begin(), it.vals.begin() + it.ns);
      vrows.insert(vrows.end(), ev.begin(), ev.end());
      const int64_t nk = static_cast<int64_t>(krows.size()), i = r0 + r;
      scratch.scores.resize(static_cast<size_t>(G * nk + 16));
      attend_generic(qp + (i * NH + g * G) * HD, G, HD, krows.data(), vrows.data(), nk, scale, scratch.scores.data(),
                     op + (i * NH + g * G) * HD);
    }
  };
  if (work * NH * HD > (1 << 15)) {
#pragma omp parallel for schedule(static, per)
    for (int64_t item = 0; item < items; ++item)
      attend_item(item);
  } else {  // not through the OpenMP runtime (kernels/ops/team_for.h)
    for (int64_t item = 0; item < items; ++item)
      attend_item(item);
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
