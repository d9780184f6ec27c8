#include <cmath>

#include "kernels/ops/backend.h"

namespace updraft::ops::cpu {

void rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
  const int64_t T = x.size(0), NH = x.size(1), HD = x.size(2), half = HD / 2;
  const int32_t* pos = positions.data<int32_t>();
  const float* inv = inv_freq.data<float>();
  float* xp = x.data<float>();
#pragma omp parallel for schedule(static) if (T * NH * HD > (1 << 15))
  for (int64_t t = 0; t < T; ++t) {
    float cs[512], sn[512];  // half <= 512 (head dims up to 1024)
    for (int64_t i = 0; i < half; ++i) {
      const float a = static_cast<float>(pos[t]) * inv[i];
      cs[i] = std::cos(a);
      sn[i] = std::sin(a);
    }
    for (int64_t h = 0; h < NH; ++h) {
      float* v = xp + (t * NH + h) * HD;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = b * cs[i] + a * sn[i];
      }
    }
  }
}

}  // namespace updraft::ops::cpu
