// AVX-512 BF16 GEMV: bf16 weights times bf16-rounded activations with vdpbf16ps, which
// multiplies 32 bf16 pairs per instruction (exact products) and adds them into 16 f32 sums.
// Against the f32 kernel of gemv_avx512.cc it does twice the multiply-adds per instruction and
// no widening of the weights, which is what makes verification (4-16 rows) cost little more than
// one decode row: at those T the f32 kernel is bound by its FMAs, not by memory.
//
// The outputs are the vector lanes: a weight panel holds 32 output rows, and for each pair of k
// the 32 rows' two values (128 bytes, two vectors of 16 lanes x 2 values). Each step broadcasts a
// row of x's pair of values to every lane and adds its products into the 16 outputs of each
// vector, so a sum is one chain of vdpbf16ps over the k-pairs in order: no lanes to add at the end,
// and a result that is the same whatever T is or however the rows are split (decode and
// verification agree bitwise). Up to 14 rows of x take a panel in one pass (2 x T accumulators;
// 13-14 rows in one pass took 0.88-0.90x the time of two); 15-16 rows take two passes, 12 rows
// and the rest, the second reading the panel from L1/L2. One panel at a time keeps a thread's
// panels one sequential stream (two at once, 4 x T accumulators, ran 1.05-1.11x slower from
// memory at 1-5 rows: two streams for the prefetchers). In one thread with the weights in L2
// this ran at 94-98% of the instruction's peak from 3 rows on (the former kernel, 4 rows by T in
// registers and their lanes added at the end: 77-87%).
// Compiled with -mavx512bf16; only called when cpu_has_avx512_bf16().
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>

#include "kernels/ops/gemv_cpu.h"
#include "kernels/ops/row_blocks.h"
#include "kernels/ops/transpose16_avx512.h"

namespace updraft::ops::cpu {
namespace {

constexpr int64_t kLanes = 32;  // output rows per panel

// w [N, K] rows [n0, n0 + 32) as one panel (rows past n1 and k past K zero), row stride ldw:
// for each 32 values of k, 16 rows at a time, each row's 16 k-pairs (32-bit lanes) transposed
// in registers so that a vector holds one k-pair of the 16 rows.
void pack_panel(const uint16_t* w, int64_t ldw, int64_t K, int64_t Kp, int64_t n0, int64_t n1, uint16_t* out) {
  const int64_t rows = std::min(kLanes, n1 - n0);
  for (int64_t k = 0; k < Kp; k += 32) {
    const int64_t left = std::clamp<int64_t>(K - k, 0, 32);
    const __mmask32 m = left == 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << left) - 1u);
#pragma GCC unroll 2
    for (int64_t h = 0; h < 2; ++h) {  // rows 0-15, then 16-31
      __m512i v[16];
#pragma GCC unroll 16
      for (int64_t r = 0; r < 16; ++r)
        v[r] =
            16 * h + r < rows ? _mm512_maskz_loadu_epi16(m, w + (n0 + 16 * h + r) * ldw + k) : _mm512_setzero_si512();
      transpose_16x16(v);
#pragma GCC unroll 16
      for (int64_t j = 0; j < 16; ++j)  // k-pair k / 2 + j: 32 rows' pairs, these 16 rows' half
        _mm512_storeu_si512(out + (k / 2 + j) * 2 * kLanes + 32 * h, v[j]);
    }
  }
}

// y[t, n + i] = sum over k-pairs of x[t] . panel rows i (i < valid), for T rows of x, from the
// panel at p: its two vectors of 16 outputs x T rows of x in registers. With kFar the panels'
// stream is fetched kPanelFarBytes ahead into L2 (from 4 rows of x on, a step's products hold
// the out-of-order window long enough that the hardware's prefetch falls behind; at 2-3 rows the
// hints cost more than they bring: the built-in policy's forward took 0.82-0.90x the time without
// them, against 0.98-1.08x at 4-6 rows).
template <int T, bool kFar>
void panel_rows(const uint16_t* x, int64_t Kp, const uint16_t* p, float* y, int64_t ldy, int64_t valid) {
  __m512 acc[2][T];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t)
    acc[0][t] = acc[1][t] = _mm512_setzero_ps();
  const char* pf = reinterpret_cast<const char*>(p) + kPanelFarBytes;  // (only a hint past the end)
  for (int64_t k = 0; k < Kp; k += 2) {
    if constexpr (kFar) {
      _mm_prefetch(pf, _MM_HINT_T1);
      _mm_prefetch(pf + 64, _MM_HINT_T1);
      pf += 2 * kLanes * sizeof(uint16_t);
    }
    __m512bh w0 = (__m512bh)_mm512_loadu_si512(p + k * kLanes);
    __m512bh w1 = (__m512bh)_mm512_loadu_si512(p + k * kLanes + 32);
    __asm__("" : "+v"(w0), "+v"(w1));  // loaded once a step, kept in registers for every row of x
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      int32_t pair;
      std::memcpy(&pair, x + t * Kp + k, sizeof(pair));
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
      acc[0][t] = _mm512_dpbf16_ps(acc[0][t], w0, xv);
      acc[1][t] = _mm512_dpbf16_ps(acc[1][t], w1, xv);
    }
  }
#pragma GCC unroll 2
  for (int r = 0; r < 2; ++r) {
    const int64_t left = valid - 16 * r;
    if (left <= 0)
      break;
    const __mmask16 m = left >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << left) - 1u);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t)
      _mm512_mask_storeu_ps(y + t * ldy + 16 * r, m, acc[r][t]);
  }
}

// Rows [n0, n1) (n0 at a panel's start) of T <= 16 rows of x from the panels at `panels`.
template <int T>
void panels_t(const uint16_t* x, int64_t Kp, const uint16_t* panels, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  constexpr bool kFar = T >= 4;
  for (int64_t n = n0; n < n1; n += kLanes) {
    const uint16_t* p = panels + n * Kp;
    if constexpr (T <= 14) {
      panel_rows<T, kFar>(x, Kp, p, y + n, ldy, n1 - n);
    } else {  // two passes of rows, the second reading the panel from L1/L2
      constexpr int kA = 12;  // 12 + 3 or 4: 0.94-0.96x the time of two even passes
      panel_rows<kA, kFar>(x, Kp, p, y + n, ldy, n1 - n);
      panel_rows<T - kA, false>(x + kA * Kp, Kp, p, y + kA * ldy + n, ldy, n1 - n);
    }
  }
}

using PanelsFn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t);
constexpr PanelsFn kPanelsByT[] = {panels_t<1>,  panels_t<2>,  panels_t<3>,  panels_t<4>,  panels_t<5>,  panels_t<6>,
                                   panels_t<7>,  panels_t<8>,  panels_t<9>,  panels_t<10>, panels_t<11>, panels_t<12>,
                                   panels_t<13>, panels_t<14>, panels_t<15>, panels_t<16>};
static_assert(std::size(kPanelsByT) == kDotPanelsMaxT);

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

void gemv_panels_bf16dot(const uint16_t* xb, int64_t T, int64_t Kp, const uint16_t* panels, int64_t n_begin,
                         int64_t n_end, float* y, int64_t ldy) {
  kPanelsByT[T - 1](xb, Kp, panels, n_begin, n_end, y, ldy);  // n_begin a multiple of 32
}

void pack_panels_bf16dot(const uint16_t* w, int64_t N, int64_t K, uint16_t* out) {
  const int64_t Kp = (K + 31) / 32 * 32, panels = (N + kLanes - 1) / kLanes;
#pragma omp parallel for schedule(static) if (N * K > (1 << 18))
  for (int64_t i = 0; i < panels; ++i)
    pack_panel(w, K, K, Kp, i * kLanes, N, out + i * kLanes * Kp);
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
