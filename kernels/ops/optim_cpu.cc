#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ops/gemv_cpu.h"
#include "kernels/ops/optim_avx512.h"
#include "kernels/ops/optim_backend.h"

namespace updraft::ops::cpu {

void sum_squares(const Tensor& x, double& out) {
  const int64_t n = x.numel();
  const float* p = x.data<float>();
  const int64_t chunks = (n + kSumSquaresChunk - 1) / kSumSquaresChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
  const bool wide = cpu_has_avx512();
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kSumSquaresChunk, end = std::min(n, begin + kSumSquaresChunk);
    if (wide) {
      partial[static_cast<size_t>(c)] = sum_squares_chunk_avx512(p, begin, end);
      continue;
    }
    // Eight interleaved accumulators: independent additions the compiler can vectorise while
    // the order of every addition stays fixed.
    double acc[8] = {};
    int64_t i = begin;
    for (; i + 8 <= end; i += 8)
      for (int j = 0; j < 8; ++j)
        acc[j] += static_cast<double>(p[i + j]) * static_cast<double>(p[i + j]);
    for (int j = 0; i < end; ++i, ++j)
      acc[j] += static_cast<double>(p[i]) * static_cast<double>(p[i]);
    partial[static_cast<size_t>(c)] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
  double total = 0;
  for (double s : partial)
    total += s;
  out = total;
}

void scale_(Tensor& x, float s) {
  const int64_t n = x.numel();
  float* p = x.data<float>();
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    p[i] *= s;
}

// Each operation rounds once: the baseline x86-64 target has no FMA for the compiler to contract
// into, which keeps this bitwise equal to the CUDA kernel (OptimCudaParity checks it); the
// AVX-512 loop does the same operations (optim_avx512.cc).
void adamw_update(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, const AdamWCoefficients& c) {
  const int64_t n = value.numel();
  float* pw = value.data<float>();
  const float* pg = grad.data<float>();
  float* pm = m.data<float>();
  float* pv = v.data<float>();
  const bool wide = cpu_has_avx512();
  constexpr int64_t kChunk = int64_t{1} << 14;
#pragma omp parallel for schedule(static) if (n > (1 << 15))
  for (int64_t b = 0; b < n; b += kChunk) {
    const int64_t end = std::min(n, b + kChunk);
    for (int64_t i = wide ? adamw_range_avx512(pw, pg, pm, pv, b, end, c) : b; i < end; ++i) {
      const float g = pg[i] * c.grad_scale;
      const float p = pw[i] * c.decay;
      const float mi = c.beta1 * pm[i] + c.one_minus_beta1 * g;
      const float vi = c.beta2 * pv[i] + c.one_minus_beta2 * (g * g);
      const float denom = std::sqrt(vi) / c.bc2_sqrt + c.eps;
      pm[i] = mi;
      pv[i] = vi;
      pw[i] = p - c.step_size * (mi / denom);
    }
  }
}

}  // namespace updraft::ops::cpu
