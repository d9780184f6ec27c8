#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/ops/backend.h"
#include "kernels/ops/team_for.h"
#include "kernels/ops/vec_math.h"

namespace updraft::ops::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The row's largest value and sum of exp(x - max) (lanes summed in one fixed order); a masked
// entry (-inf) adds exactly 0, as does a row of them (its max taken as 0).
[[gnu::always_inline]] inline void row_stats(const float* x, int64_t C, float& max_out, float& sum_out) {
  v16f m = kNegInf - v16f{};
  int64_t i = 0;
  for (; i + 16 <= C; i += 16) {
    const v16f v = load16(x + i);
    m = v > m ? v : m;
  }
  float mx = kNegInf;
  for (int l = 0; l < 16; ++l)
    mx = std::max(mx, m[l]);
  for (; i < C; ++i)
    mx = std::max(mx, x[i]);
  if (mx == kNegInf)
    mx = 0.f;  // all -inf: avoid inf - inf
  v16f s{};
  const v16f mv = mx - v16f{};
  for (i = 0; i + 16 <= C; i += 16) {
    const v16f v = load16(x + i);
    const v16f e = exp16(v - mv);
    s += v == kNegInf ? v16f{} : e;
  }
  if (i < C) {
    const v16f v = load16_partial(x + i, C - i, kNegInf);
    const v16f e = exp16(v - mv);
    s += v == kNegInf ? v16f{} : e;
  }
  float sum = 0.f;
  for (int l = 0; l < 16; ++l)
    sum += s[l];
  max_out = mx;
  sum_out = sum;
}

// out[i] = exp(x[i] - max) / sum from row_stats' figures (out may be x); -inf entries exactly 0.
[[gnu::always_inline]] inline void write_probs(const float* x, int64_t C, float max, float sum, float* out) {
  const float inv = 1.0f / sum;
  const v16f mv = max - v16f{};
  for (int64_t i = 0; i < C; i += 16) {
    const int64_t n = std::min<int64_t>(16, C - i);
    const v16f v = load16_partial(x + i, n, kNegInf);
    const v16f p = exp16(v - mv) * inv;
    const v16f o = v == kNegInf ? v16f{} : p;
    std::memcpy(out + i, &o, sizeof(float) * static_cast<size_t>(n));
  }
}

// The k best of (x[i] - lse, i) in a strict total order: value descending, ties to the lower index.
// Only the entries within the narrowest of a few distances of the row's best that holds k of them
// are ranked (else the whole row): every entry left out is below the k-th best, so the result is
// the whole row's. lse finite: no NaN or +inf in the row (either makes row_stats' sum NaN), so
// the order is total.
[[gnu::always_inline]] inline void top_ranked(const float* xr, int64_t C, float lse, float best, int64_t k, float* v,
                                              int32_t* id) {
  // Bands: within 0.5, 0.75, 1, 1.5, ..., 32 of the best (each about 1.4x the last).
  constexpr int kBands = 13;
  constexpr float kBelow[kBands] = {0.5f, 0.75f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, 8.f, 12.f, 16.f, 24.f, 32.f};
  v16i in[kBands] = {};  // per lane, minus the entries within each band
  const v16f lv = lse - v16f{};
  for (int64_t i = 0; i < C; i += 16) {
    const v16f lp = (i + 16 <= C ? load16(xr + i) : load16_partial(xr + i, C - i, kNegInf)) - lv;
    for (int b = 0; b < kBands; ++b)
      in[b] += lp >= best - kBelow[b];  // -1 where true
  }
  float t = kNegInf;  // the least value ranked
  for (int b = 0; b < kBands && t == kNegInf; ++b) {
    int64_t n = 0;
    for (int l = 0; l < 16; ++l)
      n -= in[b][l];
    if (n >= k)
      t = best - kBelow[b];
  }
  thread_local std::vector<std::pair<float, int32_t>> ranked;
  ranked.clear();
  const v16f tv = t - v16f{};
  for (int64_t i = 0; i < C; i += 16) {  // in index order
    const v16f lp = (i + 16 <= C ? load16(xr + i) : load16_partial(xr + i, C - i, kNegInf)) - lv;
    const v16i keep = lp >= tv;
    for (int l = 0; l < 16; ++l)
      if (keep[l] != 0 && i + l < C)
        ranked.emplace_back(lp[l], static_cast<int32_t>(i + l));
  }
  std::partial_sort(ranked.begin(), ranked.begin() + k, ranked.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  for (int64_t j = 0; j < k; ++j) {
    v[j] = ranked[static_cast<size_t>(j)].first;
    id[j] = ranked[static_cast<size_t>(j)].second;
  }
}

[[gnu::always_inline]] inline void softmax_row(const float* xr, int64_t C, bool log, float* orow) {
  float m = 0.f, s = 0.f;
  row_stats(xr, C, m, s);
  if (log) {
    const float lse = m + std::log(s);
    for (int64_t i = 0; i < C; ++i)
      orow[i] = xr[i] - lse;
  } else {
    write_probs(xr, C, m, s, orow);
  }
}

// top_log_softmax's row (below).
[[gnu::always_inline]] inline void top_log_softmax_row(const float* xr, int64_t C, int64_t k, float* v, int32_t* id) {
  float m = 0.f, s = 0.f;
  row_stats(xr, C, m, s);
  const float lse = m + std::log(s);
  if (k >= 32 && std::isfinite(lse)) {
    top_ranked(xr, C, lse, m - lse, k, v, id);
    return;
  }
  int64_t n = 0;  // filled so far
  for (int64_t i = 0; i < C; ++i) {
    const float lp = xr[i] - lse;
    if (n == k && !(lp > v[k - 1]))
      continue;
    int64_t j = n < k ? n++ : k - 1;
    for (; j > 0 && lp > v[j - 1]; --j) {
      v[j] = v[j - 1];
      id[j] = id[j - 1];
    }
    v[j] = lp;
    id[j] = static_cast<int32_t>(i);
  }
}

}  // namespace

// Vectorised (exp16: within 2 ulp of exp); masked entries (-inf) get probability exactly 0.
__attribute__((target_clones("avx512f", "default"))) void softmax(const Tensor& x, Tensor& out, bool log) {
  const int64_t R = x.size(0), C = x.size(1);
  const float* xp = x.data<float>();
  float* op = out.data<float>();
  UPD_TEAM_FOR(R * C > (1 << 15), r, R, softmax_row(xp + r * C, C, log, op + r * C));
}

__attribute__((target_clones("avx512f", "default"))) void softmax_row_scaled(const float* x, float scale, float* out,
                                                                             int64_t C) {
  for (int64_t i = 0; i < C; ++i)
    out[i] = x[i] * scale;
  float m = 0.f, s = 0.f;
  row_stats(out, C, m, s);
  write_probs(out, C, m, s, out);
}

// The k best of log_softmax's values for the row, x[i] - lse computed as the log path computes
// them, kept sorted as topk orders them (value descending, ties to the lower index). From k = 32
// on a finite row goes to top_ranked; otherwise (small k, or a NaN or +inf in the row, which
// makes every value NaN) a forward scan inserts a value only ahead of smaller ones, so an equal
// later index stays behind. The selection alone over 1024 normal logits (sd 1, 3 or 6), one
// thread, both in one process taking turns, median of 20000: the scan 0.6-1.0 us at k = 2-16,
// 1.8 at 32, 4.4 at 64 (a sampling chain's fetch: drafter/proposer.h); top_ranked 1.2-1.4, 1.4-1.5
// and 1.9-2.0, with the same output.
__attribute__((target_clones("avx512f", "default"))) void top_log_softmax(const Tensor& x, int64_t k, Tensor& values,
                                                                          Tensor& indices) {
  const int64_t R = x.size(0), C = x.size(1);
  const float* xp = x.data<float>();
  float* vo = values.data<float>();
  int32_t* io = indices.data<int32_t>();
  UPD_TEAM_FOR(R * C > (1 << 15), r, R, top_log_softmax_row(xp + r * C, C, k, vo + r * k, io + r * k));
}

}  // namespace updraft::ops::cpu
