// Naive double-precision reference implementations of every op, written from the contracts
// in kernels/ops/*.h as directly as possible (no blocking, no vectorisation). The parity
// test compares every backend against these.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/ops/attention.h"

namespace updraft::ref {

using Vec = std::vector<double>;

// c[M,N] = op(a)·op(b) with a stored [a_rows, a_cols], b [b_rows, b_cols].
inline Vec gemm(const Vec& a, bool ta, int64_t ar, int64_t ac, const Vec& b, bool tb, int64_t br, int64_t bc) {
  const int64_t M = ta ? ac : ar, K = ta ? ar : ac, N = tb ? br : bc;
  Vec c(static_cast<size_t>(M * N), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        double av = ta ? a[k * ac + m] : a[m * ac + k];
        double bv = tb ? b[n * bc + k] : b[k * bc + n];
        s += av * bv;
      }
      c[m * N + n] = s;
    }
  return c;
}

inline Vec rms_norm(const Vec& x, const Vec& w, int64_t R, int64_t H, double eps) {
  Vec o(x.size());
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < H; ++i)
      ss += x[r * H + i] * x[r * H + i];
    double inv = 1.0 / std::sqrt(ss / H + eps);
    for (int64_t i = 0; i < H; ++i)
      o[r * H + i] = x[r * H + i] * inv * w[i];
  }
  return o;
}

inline Vec rope(const Vec& x, const std::vector<int32_t>& pos, const std::vector<float>& inv_freq, int64_t T,
                int64_t NH, int64_t HD) {
  Vec o = x;
  const int64_t half = HD / 2;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < half; ++i) {
        // The angle is formed in f32 like the contract (and Hugging Face) says.
        double a = static_cast<double>(static_cast<float>(pos[t]) * inv_freq[i]);
        double x1 = x[(t * NH + h) * HD + i], x2 = x[(t * NH + h) * HD + i + half];
        o[(t * NH + h) * HD + i] = x1 * std::cos(a) - x2 * std::sin(a);
        o[(t * NH + h) * HD + i + half] = x2 * std::cos(a) + x1 * std::sin(a);
      }
  return o;
}

inline Vec silu_mul(const Vec& g, const Vec& u) {
  Vec o(g.size());
  for (size_t i = 0; i < g.size(); ++i)
    o[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
  return o;
}

inline Vec softmax(const Vec& x, int64_t R, int64_t C, bool log) {
  Vec o(x.size());
  for (int64_t r = 0; r < R; ++r) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < C; ++i)
      m = std::max(m, x[r * C + i]);
    double s = 0;
    for (int64_t i = 0; i < C; ++i)
      s += std::exp(x[r * C + i] - m);
    for (int64_t i = 0; i < C; ++i)
      o[r * C + i] = log ? x[r * C + i] - m - std::log(s) : std::exp(x[r * C + i] - m) / s;
  }
  return o;
}

// Returns out [T,NH,HD] and lse [T,NH].
inline std::pair<Vec, Vec> attention(const Vec& q, const Vec& k, const Vec& v, const ops::AttentionMask& mask,
                                     int64_t T, int64_t NH, int64_t HD, int64_t S, int64_t NKV, double scale) {
  Vec out(static_cast<size_t>(T * NH * HD), 0.0), lse(static_cast<size_t>(T * NH));
  const int64_t group = NH / NKV;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t g = h / group;
      std::vector<double> sc(static_cast<size_t>(S), -std::numeric_limits<double>::infinity());
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < S; ++j) {
        if (!ops::attention_visible(mask, T, i, j))
          continue;
        double d = 0;
        for (int64_t e = 0; e < HD; ++e)
          d += q[(i * NH + h) * HD + e] * k[(j * NKV + g) * HD + e];
        sc[j] = d * scale;
        m = std::max(m, sc[j]);
      }
      double s = 0;
      for (int64_t j = 0; j < S; ++j)
        if (sc[j] > -std::numeric_limits<double>::infinity())
          s += std::exp(sc[j] - m);
      for (int64_t j = 0; j < S; ++j) {
        if (sc[j] == -std::numeric_limits<double>::infinity())
          continue;
        double p = std::exp(sc[j] - m) / s;
        for (int64_t e = 0; e < HD; ++e)
          out[(i * NH + h) * HD + e] += p * v[(j * NKV + g) * HD + e];
      }
      lse[i * NH + h] = m + std::log(s);
    }
  return {out, lse};
}

// Indices of the top k of row x (descending, ties -> lower index).
inline std::vector<int32_t> topk(const double* x, int64_t C, int64_t k) {
  std::vector<int32_t> idx(static_cast<size_t>(C));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [x](int32_t a, int32_t b) { return x[a] > x[b]; });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

// The sampling distribution of one row (see sampling.h).
inline Vec sampling_probs(const double* z, int64_t V, double temp, int32_t top_k, double top_p) {
  Vec p(static_cast<size_t>(V), 0.0);
  if (temp == 0) {
    p[static_cast<size_t>(topk(z, V, 1)[0])] = 1;
    return p;
  }
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < V; ++i)
    m = std::max(m, z[i] / temp);
  double s = 0;
  for (int64_t i = 0; i < V; ++i)
    s += (p[i] = std::exp(z[i] / temp - m));
  for (auto& x : p)
    x /= s;
  std::vector<int32_t> order = topk(p.data(), V, V);
  int64_t keep = (top_k > 0 && top_k < V) ? top_k : V;
  double kept = 0;
  for (int64_t j = 0; j < keep; ++j)
    kept += p[order[j]];
  if (top_p < 1) {
    double cum = 0;
    int64_t n = 0;
    while (n < keep) {
      cum += p[order[n]] / kept;
      ++n;
      if (cum >= top_p)
        break;
    }
    keep = n;
  }
  Vec out(static_cast<size_t>(V), 0.0);
  double mass = 0;
  for (int64_t j = 0; j < keep; ++j)
    mass += p[order[j]];
  for (int64_t j = 0; j < keep; ++j)
    out[order[j]] = p[order[j]] / mass;
  return out;
}

}  // namespace updraft::ref
