// AVX-512 BF16 GEMV: bf16 weights times bf16-rounded activations with vdpbf16ps, which
// multiplies 32 bf16 pairs per instruction (exact products) and adds them into 16 f32 sums.
// Against the f32 kernel of gemv_avx512.cc it does twice the multiply-adds per instruction and
// no widening of the weights, which is what makes verification (4-10 rows) cost about as much
// as one decode row: at those T the f32 kernel is bound by its FMAs, not by memory.
// Compiled with -mavx512bf16; only called when cpu_has_avx512_bf16().
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <iterator>

#include "kernels/ops/gemv_cpu.h"
#include "kernels/ops/lane_sums_avx512.h"
#include "kernels/ops/row_blocks.h"

namespace updraft::ops::cpu {
namespace {

// Where weight row n + r's values of step k (32 at a time) start: row-major [N, K], or the
// 4-row panels of pack_panels_bf16dot (a block's rows never cross a panel: n + r stays within
// the panel of n).
struct RowMajor {
  const uint16_t* w;
  int64_t K;
  const uint16_t* at(int64_t n, int r, int64_t k) const { return w + (n + r) * K + k; }
};
struct Panels4 {
  const uint16_t* p;
  int64_t Kp;
  const uint16_t* at(int64_t n, int r, int64_t k) const { return p + (n >> 2) * 4 * Kp + k * 4 + ((n & 3) + r) * 32; }
};

// kFar: the panels' own stream, kPanelFarBytes ahead of the step, into L2 (row_blocks.h).
enum Prefetch { kNone, kNextRows, kAhead, kFar };

// Writes sum_k x[t,k] * w[n+r,k] to y[t*ldy + n + r] for r < R, t < T. x rows are Kp apart
// and zero beyond K, so only the weight loads of the last step need a mask. With kNextRows each
// step also prefetches kLines (default R) cache lines from pf on: the next R rows (into L1); with
// kAhead as many of the caller's next block (into L2), so that memory streams while this block
// computes; with kFar (the panels, from 2 rows of x on), kPanelFarBytes ahead in the same stream,
// into L2.
template <int T, int R, Prefetch kPf, typename Src, int kLines = R>
void block(const uint16_t* x, int64_t K, int64_t Kp, Src src, int64_t n, float* y, int64_t ldy, const char* pf) {
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      acc[r][t] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    if constexpr (kPf != kNone) {
#pragma GCC unroll 8
      for (int l = 0; l < kLines; ++l)  // 64 bytes of each of kLines rows per step
        _mm_prefetch(pf + l * 64, kPf == kNextRows ? _MM_HINT_T0 : _MM_HINT_T1);
      pf += kLines * 64;
    }
    __m512bh wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      wv[r] = (__m512bh)_mm512_loadu_si512(src.at(n, r, k));
      __asm__("" : "+v"(wv[r]));  // loaded once a step: GCC 12 reloaded them for every row of x at T = 3
    }
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
      wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(m, src.at(n, r, k));
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

// R*T accumulators plus R weight vectors stay within the 32 zmm registers. Row-major weights
// take R rows at a time (several streams, prefetched a block ahead by software).
template <int T>
void rows_t(const uint16_t* x, int64_t K, int64_t Kp, const uint16_t* w, int64_t n0, int64_t n1, float* y,
            int64_t ldy, const uint16_t* ahead) {
  constexpr int R = T <= 2 ? 8 : T <= 4 ? 5 : T <= 6 ? 4 : 3;
  for_row_blocks<R>(K, w, n0, n1, ahead, [&](auto rows, auto in_ahead, int64_t n, const char* pf) {
    constexpr Prefetch kPf = decltype(in_ahead)::value ? kAhead : kNextRows;
    block<T, decltype(rows)::value, kPf>(x, K, Kp, RowMajor{w, K}, n, y, ldy, pf);
  });
}

// The panels a panel at a time, so that the weights are one stream. Up to 6 rows of x, all 4 rows
// of a panel at once (4T accumulators and 4 weight vectors fit the 32 registers); 7 and 8 rows,
// rows 0-1 of the panel, then rows 2-3 from L1 (2T accumulators), so that the weights are still
// read from memory once (the first pass fetches the stream for both). From 2 rows of x on, a
// step's products take long enough that the hardware's prefetch falls behind, so the kernel also
// prefetches far ahead (one row: no gain). Measured on Zen 4 against 6-row tiles (7 rows as
// 4 + 3), at the built-in policy's shapes: 7 rows 0.78-0.79x the time, 8 rows 0.92-0.95x; 3 rows
// with the far prefetch 0.70-0.77x.
template <int T>
void panels_t(const uint16_t* x, int64_t K, int64_t Kp, const uint16_t* p, int64_t n0, int64_t n1, float* y,
              int64_t ldy, const uint16_t* ahead) {
  // for_row_blocks' prefetch pointers walk the panels at their row length, Kp.
  for_row_blocks<4>(Kp, p, n0, n1, ahead, [&](auto rows, auto in_ahead, int64_t n, const char* pf) {
    constexpr Prefetch kPf = decltype(in_ahead)::value ? kAhead : T == 1 ? kNone : kFar;
    const char* far = reinterpret_cast<const char*>(p + n * Kp) + kPanelFarBytes;  // (only a hint past the end)
    const Panels4 src{p, Kp};
    if constexpr (T > kDotPanelsFullT && decltype(rows)::value == 4) {
      block<T, 2, kPf, Panels4, 4>(x, K, Kp, src, n, y, ldy, kPf == kFar ? far : pf);
      block<T, 2, kNone, Panels4>(x, K, Kp, src, n + 2, y, ldy, nullptr);
    } else {
      block<T, decltype(rows)::value, kPf>(x, K, Kp, src, n, y, ldy, kPf == kFar ? far : pf);
    }
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

void gemv_panels_bf16dot(const uint16_t* xb, int64_t T, int64_t K, int64_t Kp, const uint16_t* panels, int64_t n_begin,
                         int64_t n_end, float* y, int64_t ldy, const uint16_t* ahead) {
  using Fn =
      void (*)(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t, const uint16_t*);
  static constexpr Fn kByT[] = {panels_t<1>, panels_t<2>, panels_t<3>, panels_t<4>,
                                panels_t<5>, panels_t<6>, panels_t<7>, panels_t<8>};
  static_assert(std::size(kByT) == kDotPanelsMaxT);
  kByT[T - 1](xb, K, Kp, panels, n_begin, n_end, y, ldy, ahead);  // 1 <= T <= kDotPanelsMaxT
}

void pack_panels_bf16dot(const uint16_t* w, int64_t N, int64_t K, uint16_t* out) {
  pack_panels4<32>(w, N, K, out);
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
