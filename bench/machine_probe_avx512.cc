#include <immintrin.h>

#include "bench/machine_probe.h"

namespace updraft::bench {

double read_sum_avx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

double read_sum8_avx512(const float* p, size_t stride, size_t n) {
  // Eight streams advancing together, 32-byte loads (measured faster than 64-byte ones on
  // Zen 4, where a 512-bit load is split in two anyway).
  __m256 a[8];
  for (int s = 0; s < 8; ++s)
    a[s] = _mm256_setzero_ps();
  for (size_t i = 0; i + 8 <= n; i += 8)
    for (int s = 0; s < 8; ++s)
      a[s] = _mm256_add_ps(a[s], _mm256_load_ps(p + s * stride + i));
  for (int s = 1; s < 8; ++s)
    a[0] = _mm256_add_ps(a[0], a[s]);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(a[0]), _mm256_extractf128_ps(a[0], 1));
  h = _mm_hadd_ps(h, h);
  h = _mm_hadd_ps(h, h);
  return _mm_cvtss_f32(h);
}

double fma_loop_avx512(long iters) {
  __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
  __m512 a[12];
  for (int j = 0; j < 12; ++j)
    a[j] = _mm512_set1_ps(static_cast<float>(j));
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j)
      a[j] = _mm512_fmadd_ps(a[j], b, c);
  }
  __m512 s = a[0];
  for (int j = 1; j < 12; ++j)
    s = _mm512_add_ps(s, a[j]);
  return _mm512_reduce_add_ps(s);
}

}  // namespace updraft::bench
