// AVX-512 GEMV for decode: each weight element is loaded once from memory and used for all T
// input rows, so the kernel streams the weights at memory bandwidth. R weight rows are
// processed together so that R*T independent accumulator chains hide the FMA latency.
// Compiled with -mavx512*; only called when cpu_has_avx512().
#include <immintrin.h>

#include <algorithm>

#include "kernels/ops/gemv_cpu.h"

namespace updraft::ops::cpu {
namespace {

template <DType WT>
inline __m512 load16(const void* w, int64_t i) {
  if constexpr (WT == DType::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  } else if constexpr (WT == DType::BF16) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i));
    return _mm512_cvtph_ps(h);
  }
}

template <DType WT>
inline __m512 load16_masked(const void* w, int64_t i, __mmask16 m) {
  if constexpr (WT == DType::F32) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(w) + i);
  } else {
    __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(w) + i);
    if constexpr (WT == DType::BF16)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    else
      return _mm512_cvtph_ps(h);
  }
}

// Writes sum_k x[t,k] * w[n+r,k] to y[t*ldy + r] for r < R, t < T.
// While it works on rows n .. n+R-1 it prefetches the next R rows (contiguous in memory) at the
// rate it consumes the current ones: reading R rows side by side is R short interleaved streams
// that the hardware prefetchers pick up late when rows are short (K ~ 1024 ran at half speed).
template <DType WT, int T, int R>
void block(const float* x, int64_t K, const void* w, int64_t n, float* y, int64_t ldy) {
  constexpr int64_t kWBytes = WT == DType::F32 ? 4 : 2;
  constexpr int kLinesPerStep = std::max<int>(1, R * 16 * kWBytes / 64);
  const char* pf = static_cast<const char*>(w) + (n + R) * K * kWBytes;
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      acc[r][t] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
#pragma GCC unroll 8
    for (int l = 0; l < kLinesPerStep; ++l)
      _mm_prefetch(pf + l * 64, _MM_HINT_T0);
    pf += kLinesPerStep * 64;
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      wv[r] = load16<WT>(w, (n + r) * K + k);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      __m512 xv = _mm512_loadu_ps(x + t * K + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  if (k < K) {
    __mmask16 m = static_cast<__mmask16>((1u << (K - k)) - 1u);
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      wv[r] = load16_masked<WT>(w, (n + r) * K + k, m);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      __m512 xv = _mm512_maskz_loadu_ps(m, x + t * K + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
}

// R rows at a time: R*T accumulators (<= 24 zmm) hide the FMA latency and each x vector
// loaded serves R rows. x itself stays in L2 (T*K*4 bytes); blocking K to keep it in L1 was
// measured slower (it splits every weight row into short streams the prefetcher handles badly).
template <DType WT, int T>
void rows_t(const float* x, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  constexpr int R = T == 1 ? 8 : T <= 4 ? 4 : 3;
  int64_t n = n0;
  for (; n + R <= n1; n += R)
    block<WT, T, R>(x, K, w, n, y + n, ldy);
  for (; n < n1; ++n)
    block<WT, T, 1>(x, K, w, n, y + n, ldy);
}

template <DType WT>
void rows(const float* x, int64_t T, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  using Fn = void (*)(const float*, int64_t, const void*, int64_t, int64_t, float*, int64_t);
  static constexpr Fn kByT[] = {rows_t<WT, 1>, rows_t<WT, 2>, rows_t<WT, 3>, rows_t<WT, 4>,
                                rows_t<WT, 5>, rows_t<WT, 6>, rows_t<WT, 7>, rows_t<WT, 8>};
  kByT[T - 1](x, K, w, n0, n1, y, ldy);  // 1 <= T <= kGemvMaxT (checked by the caller)
}

}  // namespace

void gemv_rows_avx512(const float* x, int64_t T, int64_t K, const void* w, DType wt, int64_t n_begin, int64_t n_end,
                      float* y, int64_t ldy) {
  switch (wt) {
    case DType::F32:
      rows<DType::F32>(x, T, K, w, n_begin, n_end, y, ldy);
      break;
    case DType::BF16:
      rows<DType::BF16>(x, T, K, w, n_begin, n_end, y, ldy);
      break;
    case DType::F16:
      rows<DType::F16>(x, T, K, w, n_begin, n_end, y, ldy);
      break;
    default:
      break;
  }
}

}  // namespace updraft::ops::cpu
