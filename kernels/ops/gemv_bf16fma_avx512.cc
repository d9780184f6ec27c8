// bf16-weight GEMV on the f32 FMA units: each 64-byte load of 32 bf16 weights is widened in two
// integer ops (the even elements shifted up, the odd ones masked) and multiplied with the
// matching even and odd halves of the activations, split apart once per call. On CPUs where
// vdpbf16ps is missing (AVX-512 without BF16) it replaces widening into f32 panels for sgemm,
// and it keeps every row the same whatever T is; products are exact either way (bf16 times bf16
// fits an f32), only the summation order differs from the other kernels.
// Compiled with -mavx512*; only called when cpu_has_avx512().
#include <immintrin.h>

#include <algorithm>

#include "kernels/core/dtype.h"
#include "kernels/ops/gemv_cpu.h"
#include "kernels/ops/lane_sums_avx512.h"
#include "kernels/ops/row_blocks.h"

namespace updraft::ops::cpu {
namespace {

// Writes sum_k x[t,k] * w[n+r,k] to y[t*ldy + n + r] for r < R, t < T. xs: step-major, for each
// 32-k step the T rows' 16 even then 16 odd activations (f32, zero beyond K), so one pointer
// walks it with constant offsets; pf: as in gemv_bf16dot_avx512.cc, R lines prefetched per step
// (the next rows, or the caller's next block).
template <int T, int R, bool kAhead>
void block(const float* xs, int64_t K, int64_t Kp, const uint16_t* w, int64_t n, float* y, int64_t ldy,
           const char* pf) {
  const __m512i odd_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      acc[r][t] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 32) {
#pragma GCC unroll 8
    for (int l = 0; l < R; ++l)
      _mm_prefetch(pf + l * 64, kAhead ? _MM_HINT_T1 : _MM_HINT_T0);
    pf += R * 64;
    __m512 we[R], wo[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i v = k + 32 <= K ? _mm512_loadu_si512(w + (n + r) * K + k)
                                    : _mm512_maskz_loadu_epi16(static_cast<__mmask32>((uint64_t{1} << (K - k)) - 1u),
                                                               w + (n + r) * K + k);
      we[r] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      wo[r] = _mm512_castsi512_ps(_mm512_and_si512(v, odd_mask));
    }
    const float* xk = xs + k * T;
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 xe = _mm512_load_ps(xk + t * 32), xo = _mm512_load_ps(xk + t * 32 + 16);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r][t] = _mm512_fmadd_ps(wo[r], xo, _mm512_fmadd_ps(we[r], xe, acc[r][t]));
    }
  }
  store_lane_sums<R, T>(acc, y, ldy, n);
}

// R rows at a time: R*T accumulators, 2R widened weight vectors and 2 activation vectors stay
// within the 32 zmm registers.
template <int T>
void rows_t(const float* xs, int64_t K, int64_t Kp, const uint16_t* w, int64_t n0, int64_t n1, float* y,
            int64_t ldy, const uint16_t* ahead) {
  constexpr int R = T == 1 ? 8 : T == 2 ? 6 : T == 3 ? 5 : T <= 5 ? 4 : T <= 7 ? 3 : 2;
  for_row_blocks<R>(K, w, n0, n1, ahead, [&](auto rows, auto in_ahead, int64_t n, const char* pf) {
    block<T, decltype(rows)::value, decltype(in_ahead)::value>(xs, K, Kp, w, n, y, ldy, pf);
  });
}

}  // namespace

void gemv_rows_bf16fma(const float* xs, int64_t T, int64_t K, int64_t Kp, const uint16_t* w, int64_t n_begin,
                       int64_t n_end, float* y, int64_t ldy, const uint16_t* ahead) {
  using Fn = void (*)(const float*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t,
                      const uint16_t*);
  static constexpr Fn kByT[] = {rows_t<1>, rows_t<2>, rows_t<3>, rows_t<4>,
                                rows_t<5>, rows_t<6>, rows_t<7>, rows_t<8>};
  kByT[T - 1](xs, K, Kp, w, n_begin, n_end, y, ldy, ahead);  // 1 <= T <= kGemvMaxT (checked by the caller)
}

}  // namespace updraft::ops::cpu
