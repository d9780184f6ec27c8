#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/ops/backend.h"
#include "kernels/ops/team_for.h"
#include "kernels/ops/vec_math.h"

namespace updraft::ops::cpu {

namespace {

// The sum of squares in 16 lanes (element i into lane i mod 16), then the lanes added in one
// fixed tree: a row's result does not depend on the rows beside it. (A single running sum was a
// chain of H dependent adds: 0.7 us a row of 448, a tenth of a 5-row verification's forward.)
[[gnu::always_inline]] inline void norm_row(const float* xr, const float* wp, int64_t H, float eps, float* orow) {
  v16f acc{};
  int64_t i = 0;
  for (; i + 16 <= H; i += 16) {
    const v16f v = load16(xr + i);
    acc += v * v;
  }
  if (i < H) {
    const v16f v = load16_partial(xr + i, H - i, 0.f);
    acc += v * v;
  }
  float lanes[16];
  std::memcpy(lanes, &acc, sizeof lanes);
  for (int width = 8; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l)
      lanes[l] += lanes[l + width];
  const float inv = 1.0f / std::sqrt(lanes[0] / static_cast<float>(H) + eps);
  int64_t j = 0;
  for (; j + 16 <= H; j += 16) {
    const v16f o = load16(xr + j) * inv * load16(wp + j);
    std::memcpy(orow + j, &o, sizeof o);
  }
  for (; j < H; ++j)
    orow[j] = xr[j] * inv * wp[j];
}

}  // namespace

// Built for AVX-512 and baseline x86-64, chosen at load time (as paged_attention).
__attribute__((target_clones("avx512f", "default"))) void rms_norm(const Tensor& x, const Tensor& w, float eps,
                                                                   Tensor& out) {
  const int64_t R = x.size(0), H = x.size(1);
  // 16-bit weights widened once per call into the caller's buffer (no allocation per call).
  thread_local std::vector<float> widened;
  const float* wp = w.dtype() == DType::F32 ? w.data<float>() : nullptr;
  if (wp == nullptr) {
    widened.resize(static_cast<size_t>(H));
    const auto* h = w.data<uint16_t>();
    const bool bf16 = w.dtype() == DType::BF16;
    int64_t i = 0;
    for (; bf16 && i + 16 <= H; i += 16) {  // a bf16 is the top half of its f32: 16 at a time
      typedef uint16_t v16h __attribute__((vector_size(32)));
      typedef uint32_t v16u __attribute__((vector_size(64)));
      v16h b;
      std::memcpy(&b, h + i, sizeof b);
      const v16u f = __builtin_convertvector(b, v16u) << 16;
      std::memcpy(widened.data() + i, &f, sizeof f);
    }
    for (; i < H; ++i)
      widened[static_cast<size_t>(i)] = bf16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
    wp = widened.data();
  }
  const float* xp = x.data<float>();
  float* op = out.data<float>();
  UPD_TEAM_FOR(R * H > (1 << 16), r, R, norm_row(xp + r * H, wp, H, eps, op + r * H));
}

}  // namespace updraft::ops::cpu
