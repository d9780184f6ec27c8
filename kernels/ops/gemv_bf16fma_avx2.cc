// bf16-weight GEMV on AVX2 + FMA, for CPUs without AVX-512 (AMD Zen 1-3, Intel client cores):
// the AVX-512 kernel's scheme (gemv_bf16fma_avx512.cc) in 256-bit vectors. Each 32-byte load of
// 16 bf16 weights is widened in two integer ops (the even elements shifted up, the odd ones
// masked) and multiplied with the matching even and odd activations, split apart once per call by
// split_rows_bf16fma (the same step-major layout: a 32-k step's 16 even activations are the even
// elements of both 16-weight halves, 8 each). Every output is one accumulator of 8 lanes, walked
// over the k-steps in order (per step: the first half's even then odd products, then the
// second's), then its lanes summed in a fixed tree, so a row's bits do not depend on T, on how
// many weight rows are blocked with it, or on the split of the rows among threads.
// Compiled with -mavx2 -mfma; only called when cpu_has_avx2_fma().
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <iterator>

#include "kernels/ops/gemv_cpu.h"
#include "kernels/ops/row_blocks.h"

namespace updraft::ops::cpu {
namespace {

// The lane sums of a[0..3] as one 128-bit vector: each accumulator's 8 lanes added in the same
// tree ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), whatever its neighbours hold.
[[gnu::always_inline]] inline __m128 lane_sums4(const __m256* a) {
  const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 h = _mm256_hadd_ps(h01, h23);
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

template <int R, int T>
[[gnu::always_inline]] inline void store_sums(const __m256 (&acc)[R][T], float* y, int64_t ldy, int64_t n) {
  constexpr int kCount = R * T, kGroups = (kCount + 3) / 4;
  __m256 flat[kGroups * 4];
#pragma GCC unroll 32
  for (int i = 0; i < kGroups * 4; ++i)
    flat[i] = i < kCount ? acc[i / T][i % T] : _mm256_setzero_ps();
  alignas(16) float sums[kGroups * 4];
#pragma GCC unroll 8
  for (int g = 0; g < kGroups; ++g)
    _mm_store_ps(sums + 4 * g, lane_sums4(flat + 4 * g));
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      y[t * ldy + n + r] = sums[r * T + t];
}

// One 32-k step of R weight rows (ws[r]: the row's 32 weights at this step) against T rows of
// activations (xk: the first row's 32 split values at this step, row t's at xk + t * 32). In four
// parts, the first half's even weights, its odd ones, then the second half's: each part widens R
// rows, then every activation vector is loaded once into a register for the R rows (R*T
// accumulators, R weights and one activation: at most 16 ymm).
template <int T, int R>
[[gnu::always_inline]] inline void step(const uint16_t* const (&ws)[R], const float* xk, __m256 (&acc)[R][T]) {
  const __m256i odd_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
#pragma GCC unroll 4
  for (int part = 0; part < 4; ++part) {
    const int h = part / 2;
    const bool odd = part % 2 == 1;
    __m256 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws[r] + 16 * h));
      wv[r] = _mm256_castsi256_ps(odd ? _mm256_and_si256(v, odd_mask) : _mm256_slli_epi32(v, 16));
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_load_ps(xk + t * 32 + (odd ? 16 : 0) + 8 * h);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
}

// Writes sum_k x[t,k] * w[n+r,k] to y[t*ldy + n + r] for r < R, t < T, where xs holds the T rows
// within split activations of `stride` rows (xs: the first one's values at k = 0); pf: R lines
// fetched per step (the next rows, or the caller's next block), as the AVX-512 kernel does.
template <int T, int R, bool kAhead>
void block(const float* xs, int64_t stride, int64_t K, const uint16_t* w, int64_t n, float* y, int64_t ldy,
           const char* pf) {
  __m256 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      acc[r][t] = _mm256_setzero_ps();
  const int64_t full = K / 32 * 32;
  const uint16_t* ws[R];
  for (int64_t k = 0; k < full; k += 32) {
#pragma GCC unroll 8
    for (int l = 0; l < R; ++l)
      _mm_prefetch(pf + l * 64, kAhead ? _MM_HINT_T1 : _MM_HINT_T0);
    pf += R * 64;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      ws[r] = w + (n + r) * K + k;
    step<T, R>(ws, xs + k * stride, acc);
  }
  if (full < K) {  // the last, partial step through zero-padded copies (AVX2 has no 16-bit masked loads)
    alignas(32) uint16_t tail[R][32] = {};
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      std::memcpy(tail[r], w + (n + r) * K + full, static_cast<size_t>(K - full) * sizeof(uint16_t));
      ws[r] = tail[r];
    }
    step<T, R>(ws, xs + full * stride, acc);
  }
  store_sums<R, T>(acc, y, ldy, n);
}

// R weight rows at a time: R*T accumulators, R widened weights and one activation within the 16
// ymm registers. Zen 1 loads one ymm a cycle and issues one ymm FMA, so an activation load should
// serve three rows or more: beyond 4 rows of x, chunks of 4 (3 + 2 for the last 5) run over the
// same 3 weight rows, the later chunks reading them from L1 (a row's bits are the same in any
// chunk). Raw kernel, 36 MiB of weights, 2 threads of a Zen 1 host (80 GFLOP/s measured FMA
// peak), medians of 3 in GFLOP/s: chunks of 4 gave 65-70 at 7-16 rows of x, chunks of 3 57-62
// (1.09-1.19x slower at 7, 8 and 10-16 rows; 3 + 3 and 4 + 2 ran alike at 6 rows).
template <int T>
constexpr int rows_for() {  // weight rows per block: 1 and 2 rows of x run as one chunk
  return T == 1 ? 4 : T == 2 ? 5 : 3;
}
template <int Rows>
constexpr int next_chunk() {
  return Rows == 5 ? 3 : std::min(Rows, 4);
}

// Rows [T0, T) of x against the R weight rows at n, in chunks of next_chunk's sizes.
template <int T0, int T, int R, bool kAhead>
[[gnu::always_inline]] inline void chunks(const float* xs, int64_t K, const uint16_t* w, int64_t n, float* y,
                                          int64_t ldy, const char* pf) {
  constexpr int C = next_chunk<T - T0>();
  block<C, R, kAhead>(xs + T0 * 32, T, K, w, n, y + T0 * ldy, ldy, pf);
  if constexpr (T0 + C < T)
    chunks<T0 + C, T, R, kAhead>(xs, K, w, n, y, ldy, pf);
}

template <int T>
void rows_t(const float* xs, int64_t K, const uint16_t* w, int64_t n0, int64_t n1, float* y, int64_t ldy,
            const uint16_t* ahead) {
  constexpr int R = rows_for<T>();
  for_row_blocks<R>(K, w, n0, n1, ahead, [&](auto rows, auto in_ahead, int64_t n, const char* pf) {
    chunks<0, T, decltype(rows)::value, decltype(in_ahead)::value>(xs, K, w, n, y, ldy, pf);
  });
}

// v rounded to bf16 and back, as f32_to_bf16 rounds (to nearest, ties to even, carrying into the
// exponent; a NaN quieted and truncated).
[[gnu::always_inline]] inline __m256 round_bf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
  const __m256i bits = _mm256_blendv_epi8(rounded, quiet, nan);
  return _mm256_castsi256_ps(_mm256_and_si256(bits, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

// The even then the odd elements of a (8) and b (8 more), each as 8 in order.
[[gnu::always_inline]] inline void deinterleave(__m256 a, __m256 b, __m256& even, __m256& odd) {
  // shuffle_ps works within 128-bit halves: (a0 a2 b0 b2 | a4 a6 b4 b6), then the 64-bit pairs
  // reordered to (a0 a2 a4 a6 b0 b2 b4 b6).
  even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8));
  odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8));
}

}  // namespace

void split_steps_bf16fma_avx2(const float* x, int64_t T, int64_t K, int64_t end, float* xs) {
  for (int64_t t = 0; t < T; ++t) {
    const float* src = x + t * K;
    for (int64_t k = 0; k < end; k += 32) {
      float* dst = xs + k * T + t * 32;
      __m256 even[2], odd[2];
      for (int h = 0; h < 2; ++h)  // elements k + 16h .. k + 16h + 15
        deinterleave(round_bf16(_mm256_loadu_ps(src + k + 16 * h)), round_bf16(_mm256_loadu_ps(src + k + 16 * h + 8)),
                     even[h], odd[h]);
      _mm256_storeu_ps(dst, even[0]);
      _mm256_storeu_ps(dst + 8, even[1]);
      _mm256_storeu_ps(dst + 16, odd[0]);
      _mm256_storeu_ps(dst + 24, odd[1]);
    }
  }
}

void gemv_rows_bf16fma_avx2(const float* xs, int64_t T, int64_t K, int64_t /*Kp*/, const uint16_t* w, int64_t n_begin,
                            int64_t n_end, float* y, int64_t ldy, const uint16_t* ahead) {
  using Fn = void (*)(const float*, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t, const uint16_t*);
  static constexpr Fn kByT[] = {rows_t<1>,  rows_t<2>,  rows_t<3>,  rows_t<4>,  rows_t<5>,  rows_t<6>,
                                rows_t<7>,  rows_t<8>,  rows_t<9>,  rows_t<10>, rows_t<11>, rows_t<12>,
                                rows_t<13>, rows_t<14>, rows_t<15>, rows_t<16>};
  static_assert(std::size(kByT) == kAvx2MaxT);
  kByT[T - 1](xs, K, w, n_begin, n_end, y, ldy, ahead);  // 1 <= T <= kAvx2MaxT (checked by the caller)
}

}  // namespace updraft::ops::cpu
