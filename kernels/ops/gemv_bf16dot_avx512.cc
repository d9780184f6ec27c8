// AVX-512 BF16 GEMV: bf16 weights times bf16-rounded activations with vdpbf16ps, which
// multiplies 32 bf16 pairs per instruction (exact products) and adds them into 16 f32 sums.
// Against the f32 kernel of gemv_avx512.cc it does twice the multiply-adds per instruction and
// no widening of the weights, which is what makes verification (4-10 rows) cost about as much
// as one decode row: at those T the f32 kernel is bound by its FMAs, not by memory.
// Compiled with -mavx512bf16; only called when cpu_has_avx512_bf16().
#include <immintrin.h>

#include <algorithm>
#include <chrono>

#include "kernels/ops/gemv_cpu.h"
#include "kernels/ops/lane_sums_avx512.h"
#include "kernels/ops/row_blocks.h"

namespace updraft::ops::cpu {
namespace {

// Writes sum_k x[t,k] * w[n+r,k] to y[t*ldy + n + r] for r < R, t < T. x rows are Kp apart
// and zero beyond K, so only the weight loads of the last step need a mask. Each step also
// prefetches R cache lines from pf on: the next R rows (into L1), or with kAhead R rows of
// the caller's next block (into L2), so that memory streams while this block computes.
template <int T, int R, bool kAhead>
void block(const uint16_t* x, int64_t K, int64_t Kp, const uint16_t* w, int64_t n, float* y, int64_t ldy,
           const char* pf) {
  constexpr int kLinesPerStep = R;  // R rows x 64 bytes per step
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      acc[r][t] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
#pragma GCC unroll 8
    for (int l = 0; l < kLinesPerStep; ++l)
      _mm_prefetch(pf + l * 64, kAhead ? _MM_HINT_T1 : _MM_HINT_T0);
    pf += kLinesPerStep * 64;
    __m512bh wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      wv[r] = (__m512bh)_mm512_loadu_si512(w + (n + r) * K + k);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + t * Kp + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], xv);
    }
  }
  if (k < K) {
    const __mmask32 m = static_cast<__mmask32>((uint64_t{1} << (K - k)) - 1u);
    __m512bh wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(m, w + (n + r) * K + k);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + t * Kp + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], xv);
    }
  }
  store_lane_sums<R, T>(acc, y, ldy, n);
}

// R*T accumulators plus R weight vectors stay within the 32 zmm registers.
template <int T>
void rows_t(const uint16_t* x, int64_t K, int64_t Kp, const uint16_t* w, int64_t n0, int64_t n1, float* y,
            int64_t ldy, const uint16_t* ahead) {
  constexpr int R = T <= 2 ? 8 : T <= 4 ? 5 : T <= 6 ? 4 : 3;
  for_row_blocks<R>(K, w, n0, n1, ahead, [&](auto rows, auto in_ahead, int64_t n, const char* pf) {
    block<T, decltype(rows)::value, decltype(in_ahead)::value>(x, K, Kp, w, n, y, ldy, pf);
  });
}

}  // namespace

void round_rows_bf16(const float* x, int64_t T, int64_t K, int64_t Kp, uint16_t* xb) {
  for (int64_t t = 0; t < T; ++t) {
    const float* src = x + t * K;
    uint16_t* dst = xb + t * Kp;
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + k + 16), _mm512_loadu_ps(src + k));
      _mm512_storeu_si512(dst + k, (__m512i)v);
    }
    for (; k < Kp; k += 16) {
      const int64_t left = std::clamp<int64_t>(K - k, 0, 16);
      const __mmask16 m = static_cast<__mmask16>((1u << left) - 1u);
      const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + k));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), (__m256i)v);
    }
  }
}

void gemv_rows_bf16dot(const uint16_t* xb, int64_t T, int64_t K, int64_t Kp, const uint16_t* w, int64_t n_begin,
                       int64_t n_end, float* y, int64_t ldy, const uint16_t* ahead) {
  using Fn = void (*)(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t,
                      const uint16_t*);
  static constexpr Fn kByT[] = {rows_t<1>, rows_t<2>, rows_t<3>, rows_t<4>,
                                rows_t<5>, rows_t<6>, rows_t<7>, rows_t<8>};
  kByT[T - 1](xb, K, Kp, w, n_begin, n_end, y, ldy, ahead);  // 1 <= T <= kGemvMaxT (checked by the caller)
}

namespace {
double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

double probe_dpbf16_rate() {
  // 12 independent chains (more than latency x issue width on any AVX-512 core); the best of 3.
  constexpr int kChains = 12;
  constexpr long kIters = 20000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    __m512 acc[kChains];
    for (int c = 0; c < kChains; ++c)
      acc[c] = _mm512_set1_ps(static_cast<float>(c));
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3c00);
    const double t0 = seconds_now();
    for (long i = 0; i < kIters; ++i) {
#pragma GCC unroll 12
      for (int c = 0; c < kChains; ++c)
        acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
      __asm__ volatile("" : "+v"(a));
    }
    const double dt = seconds_now() - t0;
    __m512 sum = acc[0];
    for (int c = 1; c < kChains; ++c)
      sum = _mm512_add_ps(sum, acc[c]);
    volatile float sink = _mm512_reduce_add_ps(sum);
    (void)sink;
    best = std::max(best, static_cast<double>(kIters) * kChains / dt);
  }
  return best;
}

}  // namespace updraft::ops::cpu
