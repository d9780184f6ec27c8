// int8 weights through AVX512-VNNI (gemv_cpu.h, "int8 weights"): vpdpbusd multiplies 64 unsigned
// bytes by 64 signed bytes and adds each lane's four products into a 32-bit sum. The activations
// are the unsigned operand, offset by 128 (xu = xq + 128, the sign bit flipped), and each row's
// sum is corrected by 128 * sum_k q[n, k] (Int8Weight::row_sums): every sum is exact in int32
// (wrapping on the way changes nothing: the true sum fits), so y has linear_int8_reference's
// bits whatever T is and however the rows are split.
//
// The weights come from Int8Weight::vnni_panels, 4 rows at a time, each 64-byte step of the 4
// rows one after another, so a thread reads one sequential stream (as the bf16 panels of
// gemv_bf16dot_avx512.cc; row-major rows, 3-8 streams at once, were as slow as bf16 panels at
// half the bytes). Compiled with -mavx512vnni; only called when cpu_has_avx512_vnni().
#include <immintrin.h>

#include <algorithm>

#include "kernels/core/error.h"
#include "kernels/ops/gemv_cpu.h"
#include "kernels/ops/row_blocks.h"

namespace updraft::ops::cpu {
namespace {

constexpr int64_t kTileT = 6;  // x rows per pass: 4 x 6 accumulators + 4 weight vectors + x in 32 zmm

// acc += the products of 64 unsigned bytes x and 64 signed bytes w, four per lane, in place. As
// inline assembly: GCC 12 copies the accumulator to another register before every
// _mm512_dpbusd_epi32 in these blocks (one extra instruction per product, and from 5 rows of x on
// spills to the stack), which made 5-6 rows slower than two passes of 3.
[[gnu::always_inline]] inline void dpbusd(__m512i& acc, __m512i x, __m512i w) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
}

// The 4 accumulators' sums as 4 int32 lanes (any order of adds: integer sums are exact).
[[gnu::always_inline]] inline __m128i sums4(const __m512i* a) {
  __m256i h[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    h[i] = _mm256_add_epi32(_mm512_castsi512_si256(a[i]), _mm512_extracti64x4_epi64(a[i], 1));
  __m128i q[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    q[i] = _mm_add_epi32(_mm256_castsi256_si128(h[i]), _mm256_extracti128_si256(h[i], 1));
  return _mm_hadd_epi32(_mm_hadd_epi32(q[0], q[1]), _mm_hadd_epi32(q[2], q[3]));
}

// y[t * ldy + n + r] for r < R, t < T: weight rows n .. n + R - 1 (all in the panel of n) against
// T rows of xu (row stride K). The panels are zero past K, so only the activations' last step
// loads under a mask (their bytes past K would multiply zeros anyway, but lie outside xu).
template <int T, int R, bool kFar>
void block(const uint8_t* xu, int64_t K, int64_t Kp, const int8_t* panels, const Int8Weight& w, const float* xscale,
           int64_t n, float* y, int64_t ldy) {
  __m512i acc[R][T];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t)
      acc[r][t] = _mm512_setzero_si512();
  const int8_t* p = panels + (n >> 2) * 4 * Kp + (n & 3) * 64;
  for (int64_t k = 0; k < Kp; k += 64, p += 256) {
    if constexpr (kFar)
      for (int l = 0; l < 4; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(p) + kPanelFarBytes + l * 64,
                     _MM_HINT_T1);  // only a hint past the end
    const __mmask64 m = K - k >= 64 ? ~__mmask64{0} : (__mmask64{1} << (K - k)) - 1;
    __m512i wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      wv[r] = _mm512_loadu_si512(p + r * 64);
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      const __m512i xv = _mm512_maskz_loadu_epi8(m, xu + t * K + k);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
        dpbusd(acc[r][t], xv, wv[r]);
    }
  }
  if constexpr (R == 4) {
    const __m128i offset = _mm_slli_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.row_sums.data() + n)), 7);
    const __m128 scale = _mm_loadu_ps(w.scale.data() + n);
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      __m512i col[4];
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r)
        col[r] = acc[r][t];
      const __m128 s = _mm_cvtepi32_ps(_mm_sub_epi32(sums4(col), offset));  // (xq + 128) . q - 128 sum q
      _mm_storeu_ps(y + t * ldy + n, _mm_mul_ps(_mm_mul_ps(s, _mm_set1_ps(xscale[t])), scale));
    }
  } else {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 6
      for (int t = 0; t < T; ++t) {
        const auto s = static_cast<int32_t>(static_cast<uint32_t>(_mm512_reduce_add_epi32(acc[r][t])) -
                                            (static_cast<uint32_t>(w.row_sums[n + r]) << 7));
        y[t * ldy + n + r] = (static_cast<float>(s) * xscale[t]) * w.scale[n + r];
      }
  }
}

// Weight rows [n0, n1): whole panels 4 rows at a time, rows outside a whole panel one at a time.
template <int T>
void rows_t(const uint8_t* xu, const float* xscale, const Int8Weight& w, int64_t n0, int64_t n1, float* y,
            int64_t ldy) {
  constexpr bool kFar = T >= 4;
  const int64_t K = w.K, Kp = vnni_panel_k(K);
  const int8_t* p = w.vnni_panels.data();
  for (int64_t n = n0; n < n1;) {
    if ((n & 3) == 0 && n + 4 <= n1) {
      block<T, 4, kFar>(xu, K, Kp, p, w, xscale, n, y, ldy);
      n += 4;
    } else {
      block<T, 1, false>(xu, K, Kp, p, w, xscale, n, y, ldy);
      ++n;
    }
  }
}

}  // namespace

void offset_rows_u8(const int8_t* xq, int64_t count, uint8_t* xu) {
  int64_t i = 0;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (; i + 64 <= count; i += 64)
    _mm512_storeu_si512(xu + i, _mm512_xor_si512(_mm512_loadu_si512(xq + i), flip));
  for (; i < count; ++i)
    xu[i] = static_cast<uint8_t>(static_cast<uint8_t>(xq[i]) ^ 0x80u);
}

void pack_panels_vnni(const int8_t* q, int64_t N, int64_t K, int8_t* out) {
  pack_panels4<64>(q, N, K, out);
}

void linear_int8_vnni(const uint8_t* xu, const float* xscale, int64_t T, const Int8Weight& w, int64_t n_begin,
                      int64_t n_end, float* y, int64_t ldy) {
  UPD_CHECK(static_cast<int64_t>(w.vnni_panels.size()) == vnni_panel_elems(w.N, w.K))
      << "linear_int8_vnni: the weight has no VNNI panels";
  using Fn = void (*)(const uint8_t*, const float*, const Int8Weight&, int64_t, int64_t, float*, int64_t);
  static constexpr Fn kByT[] = {rows_t<1>, rows_t<2>, rows_t<3>, rows_t<4>, rows_t<5>, rows_t<6>};
  // More than 6 rows: as few passes over the weights as the registers allow, of even height.
  const int64_t passes = (T + kTileT - 1) / kTileT;
  for (int64_t i = 0; i < passes; ++i) {
    const int64_t t0 = T * i / passes, tn = T * (i + 1) / passes - t0;
    kByT[tn - 1](xu + t0 * w.K, xscale + t0, w, n_begin, n_end, y + t0 * ldy, ldy);
  }
}

}  // namespace updraft::ops::cpu
