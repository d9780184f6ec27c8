// AVX-512 versions of the optimiser's element loops (optim_cpu.cc), bit for bit the same as the
// scalar ones: the same operations in the same order per element, each rounded once (this file
// is compiled with -ffp-contract=off, so no multiply-add is fused), and sum_squares keeps its
// eight interleaved double accumulators as the eight lanes of one register.
// Compiled with -mavx512*; only called when cpu_has_avx512().
#include "kernels/ops/optim_avx512.h"

#include <immintrin.h>

#include <cmath>

namespace updraft::ops::cpu {

double sum_squares_chunk_avx512(const float* p, int64_t begin, int64_t end) {
  __m512d acc = _mm512_setzero_pd();
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m512d x = _mm512_cvtps_pd(_mm256_loadu_ps(p + i));
    acc = _mm512_add_pd(acc, _mm512_mul_pd(x, x));
  }
  alignas(64) double a[8];
  _mm512_store_pd(a, acc);
  for (int j = 0; i < end; ++i, ++j)
    a[j] += static_cast<double>(p[i]) * static_cast<double>(p[i]);
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

int64_t adamw_range_avx512(float* pw, const float* pg, float* pm, float* pv, int64_t begin, int64_t end,
                           const AdamWCoefficients& c) {
  const __m512 decay = _mm512_set1_ps(c.decay), b1 = _mm512_set1_ps(c.beta1), ob1 = _mm512_set1_ps(c.one_minus_beta1);
  const __m512 b2 = _mm512_set1_ps(c.beta2), ob2 = _mm512_set1_ps(c.one_minus_beta2);
  const __m512 bc2 = _mm512_set1_ps(c.bc2_sqrt), eps = _mm512_set1_ps(c.eps), lr = _mm512_set1_ps(c.step_size);
  const __m512 gs = _mm512_set1_ps(c.grad_scale);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(pg + i), gs);
    const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(pw + i), decay);
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(pm + i)), _mm512_mul_ps(ob1, g));
    const __m512 vi =
        _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(pv + i)), _mm512_mul_ps(ob2, _mm512_mul_ps(g, g)));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2), eps);
    _mm512_storeu_ps(pm + i, mi);
    _mm512_storeu_ps(pv + i, vi);
    _mm512_storeu_ps(pw + i, _mm512_sub_ps(p, _mm512_mul_ps(lr, _mm512_div_ps(mi, denom))));
  }
  return i;
}

}  // namespace updraft::ops::cpu
