#include <cmath>
#include <limits>

#include "kernels/ops/backend.h"

namespace updraft::ops::cpu {
namespace {

float row_logsumexp(const float* z, int64_t C) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < C; ++i)
    m = std::max(m, z[i]);
  float s = 0.f;
  for (int64_t i = 0; i < C; ++i)
    s += std::exp(z[i] - m);
  return m + std::log(s);
}

}  // namespace

void cross_entropy(const Tensor& logits, const Tensor& target, Tensor& loss) {
  const int64_t R = logits.size(0), C = logits.size(1);
  const float* z = logits.data<float>();
  const int32_t* tg = target.data<int32_t>();
  float* l = loss.data<float>();
  for (int64_t r = 0; r < R; ++r)
    UPD_CHECK(tg[r] < C) << "cross_entropy: target " << tg[r] << " in row " << r << " >= C=" << C;
#pragma omp parallel for schedule(static) if (R * C > (1 << 15))
  for (int64_t r = 0; r < R; ++r) {
    if (tg[r] < 0) {
      l[r] = 0.f;
      continue;
    }
    l[r] = row_logsumexp(z + r * C, C) - z[r * C + tg[r]];
  }
}

void soft_cross_entropy(const Tensor& logits, const Tensor& teacher, Tensor& loss) {
  const int64_t R = logits.size(0), C = logits.size(1);
  const float* z = logits.data<float>();
  const float* p = teacher.data<float>();
  float* l = loss.data<float>();
#pragma omp parallel for schedule(static) if (R * C > (1 << 15))
  for (int64_t r = 0; r < R; ++r) {
    const float* zr = z + r * C;
    const float* pr = p + r * C;
    const float lse = row_logsumexp(zr, C);
    float acc = 0.f;
    for (int64_t i = 0; i < C; ++i)
      if (pr[i] != 0.f)
        acc -= pr[i] * (zr[i] - lse);
    l[r] = acc;
  }
}

}  // namespace updraft::ops::cpu
