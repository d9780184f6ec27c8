#include <cmath>
#include <limits>

#include "kernels/ops/backend.h"

namespace updraft::ops::cpu {

void softmax(const Tensor& x, Tensor& out, bool log) {
  const int64_t R = x.size(0), C = x.size(1);
  const float* xp = x.data<float>();
  float* op = out.data<float>();
#pragma omp parallel for schedule(static) if (R * C > (1 << 15))
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = xp + r * C;
    float* orow = op + r * C;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < C; ++i)
      m = std::max(m, xr[i]);
    if (m == -std::numeric_limits<float>::infinity())
      m = 0.f;  // all -inf: avoid inf - inf
    float s = 0.f;
    for (int64_t i = 0; i < C; ++i)
      s += std::exp(xr[i] - m);
    if (log) {
      const float lse = m + std::log(s);
      for (int64_t i = 0; i < C; ++i)
        orow[i] = xr[i] - lse;
    } else {
      const float inv = 1.0f / s;
      for (int64_t i = 0; i < C; ++i)
        orow[i] = std::exp(xr[i] - m) * inv;
    }
  }
}

}  // namespace updraft::ops::cpu
