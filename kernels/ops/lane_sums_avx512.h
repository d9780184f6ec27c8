// Internal, AVX-512 translation units only: the lane sums of 8 accumulators at once, for the
// GEMV kernels' last step. Four rounds of shuffles and adds (about 3 instructions per sum, where
// a horizontal reduction per accumulator takes about 9). Every accumulator's 16 lanes are added
// in the same fixed tree whatever its position among the 8 and whatever the others hold, so a
// kernel's output row does not depend on how many rows it is computed with.
#pragma once

#include <immintrin.h>

namespace updraft::ops::cpu {

// r[i] = the sum of a[i]'s 16 lanes, i < 8.
[[gnu::always_inline]] inline __m256 lane_sums8(const __m512* a) {
  __m512 t[4], u[2];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)  // 256-bit halves: [a'(2i) | a'(2i+1)], a'[j] = a[j] + a[j + 8]
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i)  // 128-bit quarters: accumulators 4i .. 4i+3, a''[j] = a'[j] + a'[j + 4]
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0xDD));
  // Quarter q: [A0, B0, A1, B1] for A = accumulator q, B = accumulator 4 + q.
  const __m512 v = _mm512_add_ps(_mm512_unpacklo_ps(u[0], u[1]), _mm512_unpackhi_ps(u[0], u[1]));
  const __m512 w = _mm512_add_ps(v, _mm512_shuffle_ps(v, v, 0x4E));  // lane 0: A0 + A1, lane 1: B0 + B1
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, w));
}

// Stores the lane sums of acc[R][T] to y[t * ldy + n + r]: groups of 8, the last padded with zeros.
// With R = 4 the groups are taken row of x by row of x (t-major), so that each group's sums are
// two rows' 4 adjacent outputs, stored 4 at a time from the register (the same sums: a lane
// tree does not depend on an accumulator's place in its group). Against one float at a time
// through the stack, at the built-in policy's shapes with the weights in L3 (Zen 4, taking
// turns): 0.91-0.95x the time at 5, 6 and 10 rows of x, 0.97-0.98x at 2-4, 1.0x at 1.
template <int R, int T>
[[gnu::always_inline]] inline void store_lane_sums(const __m512 (&acc)[R][T], float* y, int64_t ldy, int64_t n) {
  constexpr int kCount = R * T, kGroups = (kCount + 7) / 8;
  if constexpr (R == 4) {
    __m512 flat[kGroups * 8];
#pragma GCC unroll 32
    for (int i = 0; i < kGroups * 8; ++i)
      flat[i] = i < kCount ? acc[i % 4][i / 4] : _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int g = 0; g < kGroups; ++g) {
      const __m256 sums = lane_sums8(flat + 8 * g);  // rows 2g and 2g + 1 of x, outputs n .. n + 3 each
      _mm_storeu_ps(y + (2 * g) * ldy + n, _mm256_castps256_ps128(sums));
      if (2 * g + 1 < T)
        _mm_storeu_ps(y + (2 * g + 1) * ldy + n, _mm256_extractf128_ps(sums, 1));
    }
    return;
  }
  __m512 flat[kGroups * 8];
#pragma GCC unroll 32
  for (int i = 0; i < kGroups * 8; ++i)
    flat[i] = i < kCount ? acc[i / T][i % T] : _mm512_setzero_ps();
  alignas(32) float sums[kGroups * 8];
#pragma GCC unroll 4
  for (int g = 0; g < kGroups; ++g)
    _mm256_store_ps(sums + 8 * g, lane_sums8(flat + 8 * g));
#pragma GCC unroll 32
  for (int i = 0; i < kCount; ++i)
    y[(i % T) * ldy + n + i / T] = sums[i];
}

}  // namespace updraft::ops::cpu
