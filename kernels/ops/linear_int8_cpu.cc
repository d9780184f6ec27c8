// int8 weights on the CPU (gemv_cpu.h, "int8 weights"): quantization of weights and activation
// rows, and the reference loop every int8 kernel must match bit for bit.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/core/error.h"
#include "kernels/ops/gemv_cpu.h"

namespace updraft::ops::cpu {

float quantize_row_int8(const float* x, int64_t K, int8_t* q) {
  float amax = 0;
  bool finite = true;
  for (int64_t k = 0; k < K; ++k) {
    finite = finite && std::isfinite(x[k]);
    amax = std::max(amax, std::fabs(x[k]));
  }
  // A row so small that 127 / max overflows (below about 4e-37) quantizes to zeros, as zeros do.
  if (!finite || amax == 0 || !std::isfinite(127.f / amax)) {
    std::fill(q, q + K, int8_t{0});
    return finite ? 0.f : std::numeric_limits<float>::quiet_NaN();
  }
  const float inv = 127.f / amax;
  for (int64_t k = 0; k < K; ++k)
    q[k] = static_cast<int8_t>(std::clamp(std::nearbyint(x[k] * inv), -127.f, 127.f));
  return amax / 127.f;
}

Int8Weight quantize_weight_int8(const Tensor& w) {
  UPD_CHECK(w.is_cpu() && w.dim() == 2) << "quantize_weight_int8: expected a CPU [N, K] weight, got " << w.str();
  Int8Weight out;
  out.N = w.size(0);
  out.K = w.size(1);
  const std::vector<float> v = w.to_f32_vector();
  out.q.resize(static_cast<size_t>(out.N * out.K));
  out.scale.resize(static_cast<size_t>(out.N));
  if (out.K % 16 == 0 && cpu_has_avx512())  // the same bytes, without a libm call per element
    quantize_rows_int8_avx512(v.data(), out.N, out.K, out.q.data(), out.scale.data());
  else
    for (int64_t n = 0; n < out.N; ++n)
      out.scale[n] = quantize_row_int8(v.data() + n * out.K, out.K, out.q.data() + n * out.K);
  out.row_sums.assign(static_cast<size_t>(out.N), 0);
  for (int64_t n = 0; n < out.N; ++n)
    for (int64_t k = 0; k < out.K; ++k)
      out.row_sums[n] += out.q[n * out.K + k];
  if (out.K % 64 == 0 && cpu_has_amx_int8()) {
    out.panels.resize(static_cast<size_t>((out.N + 15) / 16 * 16 * out.K));
    // The bf16 panels' VNNI layout: a 4-byte k-quad where those have a bf16 pair.
    pack_panels_amx(reinterpret_cast<const uint16_t*>(out.q.data()), out.N, out.K / 2,
                    reinterpret_cast<uint16_t*>(out.panels.data()));
  }
  return out;
}

void linear_int8_reference(const int8_t* xq, const float* xscale, int64_t T, const Int8Weight& w, int64_t n_begin,
                           int64_t n_end, float* y, int64_t ldy) {
  const int64_t K = w.K;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = n_begin; n < n_end; ++n) {
      const int8_t* a = xq + t * K;
      const int8_t* b = w.q.data() + n * K;
      int32_t acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<int32_t>(a[k]) * static_cast<int32_t>(b[k]);
      y[t * ldy + n] = (static_cast<float>(acc) * xscale[t]) * w.scale[n];
    }
}

}  // namespace updraft::ops::cpu
