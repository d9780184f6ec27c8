// int8 weights through AVX512-VNNI (gemv_cpu.h, "int8 weights"): vpdpbusd multiplies 64 unsigned
// bytes by 64 signed bytes and adds each lane's four products into a 32-bit sum. The activations
// are the unsigned operand, offset by 128 (xu = xq + 128, the sign bit flipped), and each row's
// sum is corrected by 128 * sum_k q[n, k] (Int8Weight::row_sums): every sum is exact in int32,
// so y has linear_int8_reference's bits whatever T is and however the rows are split.
// Compiled with -mavx512vnni; only called when cpu_has_avx512_vnni().
#include <immintrin.h>

#include <algorithm>

#include "kernels/ops/gemv_cpu.h"

namespace updraft::ops::cpu {
namespace {

// y[t * ldy + n + r] for r < R, t < T: R weight rows against T activation rows, the weight bytes
// loaded once per 64-byte step for all T rows; the last step loads under a mask (zeros add 0).
template <int T, int R>
void block(const uint8_t* xu, int64_t K, const Int8Weight& w, const float* xscale, int64_t n, float* y, int64_t ldy) {
  __m512i acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      acc[r][t] = _mm512_setzero_si512();
  const int8_t* wq = w.q.data() + n * K;
  for (int64_t k = 0; k < K; k += 64) {
    const __mmask64 m = K - k >= 64 ? ~__mmask64{0} : (__mmask64{1} << (K - k)) - 1;
    __m512i wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      wv[r] = _mm512_maskz_loadu_epi8(m, wq + r * K + k);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512i xv = _mm512_maskz_loadu_epi8(m, xu + t * K + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], xv, wv[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      // The exact sum of (xq + 128) * q, less 128 * sum q: int64 on the way, as the offset sum may
      // pass 2^31 where the true one does not.
      const int64_t offset = int64_t{128} * w.row_sums[n + r];
      const auto s = static_cast<int32_t>(static_cast<int64_t>(_mm512_reduce_add_epi32(acc[r][t])) - offset);
      y[t * ldy + n + r] = (static_cast<float>(s) * xscale[t]) * w.scale[n + r];
    }
}

// Weight rows [n0, n1) in blocks of R (then single rows) against T <= 8 activation rows.
// R * T accumulators plus R weight vectors stay within the 32 zmm registers.
template <int T>
void rows_t(const uint8_t* xu, const float* xscale, const Int8Weight& w, int64_t n0, int64_t n1, float* y,
            int64_t ldy) {
  constexpr int R = T <= 2 ? 8 : T <= 4 ? 5 : T <= 6 ? 4 : 3;
  int64_t n = n0;
  for (; n + R <= n1; n += R)
    block<T, R>(xu, w.K, w, xscale, n, y, ldy);
  for (; n < n1; ++n)
    block<T, 1>(xu, w.K, w, xscale, n, y, ldy);
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

void linear_int8_vnni(const uint8_t* xu, const float* xscale, int64_t T, const Int8Weight& w, int64_t n_begin,
                      int64_t n_end, float* y, int64_t ldy) {
  using Fn = void (*)(const uint8_t*, const float*, const Int8Weight&, int64_t, int64_t, float*, int64_t);
  static constexpr Fn kByT[] = {rows_t<1>, rows_t<2>, rows_t<3>, rows_t<4>, rows_t<5>, rows_t<6>, rows_t<7>, rows_t<8>};
  for (int64_t t0 = 0; t0 < T; t0 += 8) {
    const int64_t tn = std::min<int64_t>(8, T - t0);
    kByT[tn - 1](xu + t0 * w.K, xscale + t0, w, n_begin, n_end, y + t0 * ldy, ldy);
  }
}

}  // namespace updraft::ops::cpu
