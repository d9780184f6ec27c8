// The policy's sampling distribution (temperature, top-k, top-p) and inverse-CDF sampling.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/ops/backend.h"

namespace updraft::ops::cpu {

void sampling_probs(const Tensor& logits, const Tensor& temperature, const Tensor& top_k, const Tensor& top_p,
                    Tensor& probs) {
  const int64_t R = logits.size(0), V = logits.size(1);
  const float* lp = logits.data<float>();
  const float* temp = temperature.data<float>();
  const int32_t* tk = top_k.data<int32_t>();
  const float* tp = top_p.data<float>();
  float* pp = probs.data<float>();
  std::vector<int32_t> order;
  for (int64_t r = 0; r < R; ++r) {
    const float* z = lp + r * V;
    float* p = pp + r * V;
    UPD_REQUIRE(temp[r] >= 0.f && std::isfinite(temp[r])) << "sampling: temperature " << temp[r] << " must be >= 0";
    UPD_REQUIRE(tp[r] > 0.f && tp[r] <= 1.f) << "sampling: top_p " << tp[r] << " must be in (0, 1]";
    UPD_REQUIRE(tk[r] >= 0) << "sampling: top_k " << tk[r] << " must be >= 0 (0 = off)";
    if (temp[r] == 0.f) {
      int64_t best = 0;
      for (int64_t i = 1; i < V; ++i)
        if (z[i] > z[best])
          best = i;
      std::fill(p, p + V, 0.f);
      p[best] = 1.f;
      continue;
    }
    softmax_row_scaled(z, 1.0f / temp[r], p, V);
    const bool use_k = tk[r] > 0 && tk[r] < V;
    const bool use_p = tp[r] < 1.f;
    if (!use_k && !use_p)
      continue;
    // Rank tokens by probability (descending, ties by lower index), then keep a prefix.
    order.resize(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    auto better = [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
    const int64_t limit = use_k ? tk[r] : V;
    if (limit < V)
      std::partial_sort(order.begin(), order.begin() + limit, order.end(), better);
    else
      std::sort(order.begin(), order.end(), better);
    float kept_mass = 0.f;
    for (int64_t j = 0; j < limit; ++j)
      kept_mass += p[order[static_cast<size_t>(j)]];
    int64_t keep = limit;
    if (use_p) {
      // top-p applies to the distribution renormalised after top-k.
      float cum = 0.f;
      keep = 0;
      while (keep < limit) {
        cum += p[order[static_cast<size_t>(keep)]] / kept_mass;
        ++keep;
        if (cum >= tp[r])
          break;
      }
    }
    float mass = 0.f;
    for (int64_t j = 0; j < keep; ++j)
      mass += p[order[static_cast<size_t>(j)]];
    std::vector<float> kept(static_cast<size_t>(keep));
    for (int64_t j = 0; j < keep; ++j)
      kept[static_cast<size_t>(j)] = p[order[static_cast<size_t>(j)]] / mass;
    std::fill(p, p + V, 0.f);
    for (int64_t j = 0; j < keep; ++j)
      p[order[static_cast<size_t>(j)]] = kept[static_cast<size_t>(j)];
  }
}

void sample_from_probs(const Tensor& probs, const Tensor& uniforms, Tensor& out) {
  const int64_t R = probs.size(0), V = probs.size(1);
  const float* pp = probs.data<float>();
  const float* u = uniforms.data<float>();
  int32_t* o = out.data<int32_t>();
  for (int64_t r = 0; r < R; ++r) {
    const float* p = pp + r * V;
    double total = 0.0;
    for (int64_t i = 0; i < V; ++i)
      total += p[i];
    UPD_REQUIRE(total > 0.0) << "sample_from_probs: row " << r << " has no probability mass";
    const double target = static_cast<double>(u[r]) * total;
    double cum = 0.0;
    int64_t pick = -1, last_nonzero = -1;
    for (int64_t i = 0; i < V; ++i) {
      if (p[i] <= 0.f)
        continue;
      last_nonzero = i;
      cum += p[i];
      if (cum > target) {
        pick = i;
        break;
      }
    }
    o[r] = static_cast<int32_t>(pick >= 0 ? pick : last_nonzero);  // rounding: fall back to the last token with mass
  }
}

}  // namespace updraft::ops::cpu
