// CPU attention: for each (query, head) gather the visible keys, score them, softmax in f32
// and mix the values. Work items are independent, so (query, head) pairs run in parallel.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops/backend.h"

namespace updraft::ops::cpu {
// Visible key indices of query i, in increasing order.
void visible_keys(const AttentionMask& m, const uint8_t* tree, int64_t T, int64_t i, std::vector<int64_t>& out) {
  out.clear();
  switch (m.kind) {
    case MaskKind::Causal:
      for (int64_t j = 0; j <= m.q_offset + i; ++j)
        out.push_back(j);
      break;
    case MaskKind::Tree:
      for (int64_t j = 0; j < m.q_offset; ++j)
        out.push_back(j);
      for (int64_t j = 0; j < T; ++j)
        if (tree[i * T + j])
          out.push_back(m.q_offset + j);
      break;
    case MaskKind::TTT: {
      const int64_t row = m.q_offset + i, R = m.q_offset + T;
      for (int64_t j = 0; j <= row; ++j)
        out.push_back(j);
      for (int64_t s = 1; s <= m.ttt_steps; ++s)
        out.push_back(s * R + row);
      break;
    }
  }
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
               const Tensor& tree_mask_dev, float scale, Tensor& out, Tensor* lse) {
  const int64_t T = q.size(0), NH = q.size(1), HD = q.size(2), NKV = k.size(1);
  const int64_t group = NH / NKV;
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  float* op = out.data<float>();
  float* lp = lse != nullptr ? lse->data<float>() : nullptr;
  const uint8_t* tree = mask.kind == MaskKind::Tree ? tree_mask_dev.data<uint8_t>() : nullptr;
  const int64_t S = k.size(0);

#pragma omp parallel if (T * NH * S * HD > (1 << 16))
  {
    std::vector<int64_t> keys;
    std::vector<float> scores;
#pragma omp for schedule(dynamic, 4)
    for (int64_t item = 0; item < T * NH; ++item) {
      const int64_t i = item / NH, h = item % NH, g = h / group;
      visible_keys(mask, tree, T, i, keys);
      const float* qv = qp + (i * NH + h) * HD;
      float* ov = op + (i * NH + h) * HD;
      scores.resize(keys.size());
      float m = -std::numeric_limits<float>::infinity();
      for (size_t n = 0; n < keys.size(); ++n) {
        const float* kv = kp + (keys[n] * NKV + g) * HD;
        float dot = 0.f;
        for (int64_t d = 0; d < HD; ++d)
          dot += qv[d] * kv[d];
        scores[n] = dot * scale;
        m = std::max(m, scores[n]);
      }
      for (int64_t d = 0; d < HD; ++d)
        ov[d] = 0.f;
      if (keys.empty()) {
        if (lp)
          lp[i * NH + h] = -std::numeric_limits<float>::infinity();
        continue;
      }
      float sum = 0.f;
      for (size_t n = 0; n < keys.size(); ++n) {
        scores[n] = std::exp(scores[n] - m);
        sum += scores[n];
      }
      const float inv = 1.0f / sum;
      for (size_t n = 0; n < keys.size(); ++n) {
        const float p = scores[n] * inv;
        const float* vv = vp + (keys[n] * NKV + g) * HD;
        for (int64_t d = 0; d < HD; ++d)
          ov[d] += p * vv[d];
      }
      if (lp)
        lp[i * NH + h] = m + std::log(sum);
    }
  }
}

}  // namespace updraft::ops::cpu
