#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/ops/backend.h"
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

}  // namespace

// Vectorised (exp16: within 2 ulp of exp); masked entries (-inf) get probability exactly 0.
__attribute__((target_clones("avx512f", "default"))) void softmax(const Tensor& x, Tensor& out, bool log) {
  const int64_t R = x.size(0), C = x.size(1);
  const float* xp = x.data<float>();
  float* op = out.data<float>();
#pragma omp parallel for schedule(static) if (R * C > (1 << 15))
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = xp + r * C;
    float* orow = op + r * C;
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
// them, kept sorted as topk orders them (value descending, ties to the lower index): a forward
// scan inserts a value only ahead of smaller ones, so an equal later index stays behind.
__attribute__((target_clones("avx512f", "default"))) void top_log_softmax(const Tensor& x, int64_t k, Tensor& values,
                                                                          Tensor& indices) {
  const int64_t R = x.size(0), C = x.size(1);
  const float* xp = x.data<float>();
  float* vo = values.data<float>();
  int32_t* io = indices.data<int32_t>();
#pragma omp parallel for schedule(static) if (R * C > (1 << 15))
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = xp + r * C;
    float* v = vo + r * k;
    int32_t* id = io + r * k;
    float m = 0.f, s = 0.f;
    row_stats(xr, C, m, s);
    const float lse = m + std::log(s);
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
}

}  // namespace updraft::ops::cpu
