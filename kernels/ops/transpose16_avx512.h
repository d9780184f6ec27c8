// A 16 x 16 transpose of 32-bit lanes in registers, for the AMX kernels' B-tile packing. Only for
// files compiled with AVX-512 (always inlined: 64-byte vectors never cross a call).
#pragma once

#include <immintrin.h>

namespace updraft::ops::cpu {

// In place: v[r] lane i becomes v[i] lane r (a 16 x 16 transpose of 32-bit lanes): unpacks of
// 32- and 64-bit lanes within each 128-bit lane, then two rounds of 128-bit lane shuffles.
[[gnu::always_inline]] inline void transpose_16x16(__m512i v[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
  __m512i u[16];  // u[4g + j], 128-bit lane L: rows 4g .. 4g + 3 at column 4L + j
  for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), x1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
    v[j] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    v[4 + j] = _mm512_shuffle_i32x4(x0, y0, 0xDD);
    v[8 + j] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    v[12 + j] = _mm512_shuffle_i32x4(x1, y1, 0xDD);
  }
}

}  // namespace updraft::ops::cpu
