#include <cmath>

#include "kernels/ops/backend.h"

namespace updraft::ops::cpu {

void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  const int64_t R = x.size(0), H = x.size(1);
  const Tensor wf = w.dtype() == DType::F32 ? w : w.to_dtype(DType::F32);
  const float* wp = wf.data<float>();
  const float* xp = x.data<float>();
  float* op = out.data<float>();
#pragma omp parallel for schedule(static) if (R * H > (1 << 14))
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = xp + r * H;
    float* orow = op + r * H;
    float ss = 0.f;
    for (int64_t i = 0; i < H; ++i)
      ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(H) + eps);
    for (int64_t i = 0; i < H; ++i)
      orow[i] = xr[i] * inv * wp[i];
  }
}

}  // namespace updraft::ops::cpu
