// Internal to paged_attention_cpu.cc: the vector steps of its attention rows (GCC vector
// extensions, always inlined into the function that is cloned for AVX-512 and baseline x86-64).
// Every step computes a query's results by the same operations in the same order whatever other
// queries or keys are computed beside it, which keeps decode and verification bitwise equal.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/ops/vec_math.h"

namespace updraft::ops::cpu::attention_rows {

// Chunk j of a row of HD floats, zero past the row's end (HD need not be a multiple of 16). A
// half chunk (HD 56) is one 8-float load widened in registers: filling a zeroed vector in
// memory and loading it back stalls on store forwarding (it cost a third of the attention).
template <int HD>
[[gnu::always_inline]] inline v16f chunk(const float* row, int j) {
  constexpr int kTail = HD % 16;
  if (kTail == 0 || 16 * (j + 1) <= HD)
    return load16(row + 16 * j);
  if constexpr (kTail == 8) {
    typedef float v8f __attribute__((vector_size(32)));
    v8f h;
    std::memcpy(&h, row + 16 * j, sizeof(h));
    return __builtin_shufflevector(h, v8f{}, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  }
  v16f v{};
  std::memcpy(&v, row + 16 * j, sizeof(float) * kTail);
  return v;
}

// sc[i] = exp(sc[i] - max) for i < n (16 at a time); returns their sum (lane sums, then the
// lanes in order: a fixed order for a given n).
[[gnu::always_inline]] inline float softmax_numerators(float* sc, int64_t n) {
  // The maximum 16 at a time (a scalar max is a chain of dependent compares: it took an eighth
  // of a long context's attention); a maximum is exact, so the lanes' order does not matter.
  v16f mv = -__builtin_inff() - v16f{};
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const v16f x = load16(sc + k);
    mv = x > mv ? x : mv;
  }
  if (k < n) {
    const v16f x = load16_partial(sc + k, n - k, -__builtin_inff());
    mv = x > mv ? x : mv;
  }
  float m = mv[0];
  for (int l = 1; l < 16; ++l)
    m = mv[l] > m ? mv[l] : m;
  v16f sum{};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const v16f e = exp16(load16(sc + i) - m);
    std::memcpy(sc + i, &e, sizeof(e));
    sum += e;
  }
  if (i < n) {
    const v16f e = exp16(load16_partial(sc + i, n - i, -__builtin_inff()) - m);
    std::memcpy(sc + i, &e, sizeof(float) * static_cast<size_t>(n - i));
    const v16i live = __builtin_convertvector(v16f{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, v16i) <
                      static_cast<int32_t>(n - i);
    sum += live ? e : v16f{};
  }
  float total = 0.f;
  for (int l = 0; l < 16; ++l)
    total += sum[l];
  return total;
}

// sc[i] *= inv for i < n: the softmax's probabilities (each the same product as one at a time).
[[gnu::always_inline]] inline void normalize(float* sc, int64_t n, float inv) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const v16f p = load16(sc + i) * inv;
    std::memcpy(sc + i, &p, sizeof(p));
  }
  for (; i < n; ++i)
    sc[i] *= inv;
}

// Asks for the cache lines of m (may be <= 0: none) rows of HDc floats, into L1 (kLocality 3)
// or into L2 (2).
template <int HDc, int kLocality = 3>
[[gnu::always_inline]] inline void prefetch_rows(const float* const* rows, int64_t m) {
  for (int64_t l = 0; l < m; ++l)
    for (int c = 0; c < HDc; c += 16)
      __builtin_prefetch(rows[l] + c, 0, kLocality);
}

// Key and value rows are also asked for this far ahead, into L2. A long context's rows come
// from memory (the layer's products and the other layers' rows pass through the caches between
// two steps), and the near requests alone (into L1, 8-32 rows ahead) keep too few lines in
// flight: a decode row over 1024 keys read them at about 12 GB/s. With these, the built-in
// policy's attention over 1024 cold keys took 0.66-0.68x the time (32-128 rows ahead tried; 64
// was best in the whole forward).
constexpr int64_t kFarRows = 64;

// Two queries' scores of m keys: each key's chunks are loaded once for both. A query's
// score of key l comes from its own 16-lane partial sums (its chunk products in chunk order), then
// a fixed tree of pairwise shuffles and adds that sums the 16 keys' lanes together (15 adds for 16
// sums, not a horizontal reduction per key), built four keys at a time (pairs, quads, then the
// two halves): so a score does not depend on which keys or queries are computed beside it.
template <int HDc>
[[gnu::always_inline]] inline void score_chunk(const float* const q[2], const float* const* krows, int64_t m,
                                               int64_t readable, float scale, float* const dst[2]) {
  constexpr int J = (HDc + 15) / 16;
  v16f qv[2][J];
#pragma GCC unroll 8
  for (int j = 0; j < J; ++j) {
    qv[0][j] = chunk<HDc>(q[0], j);
    qv[1][j] = chunk<HDc>(q[1], j);
  }
  for (int64_t c0 = 0; c0 < m; c0 += 16) {  // 16 keys at a time, the queries kept in registers
    const int64_t mm = std::min<int64_t>(16, m - c0);
    prefetch_rows<HDc>(krows + c0 + 16, std::min<int64_t>(16, readable - c0 - 16));
    prefetch_rows<HDc, 2>(krows + c0 + kFarRows, std::min<int64_t>(16, readable - c0 - kFarRows));
    v16f u[2][4];
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      v16f p[2][4];
#pragma GCC unroll 4
      for (int l4 = 0; l4 < 4; ++l4) {
        const int l = 4 * g + l4;
        if (l >= mm) {
          p[0][l4] = p[1][l4] = v16f{};
          continue;
        }
        // Started from the first product, not from zero: no vectors zeroed in memory for every 16
        // keys. (The compiler may fuse the first two products either way, so the last bits may
        // differ from a zero start; every query still runs this same code whatever is beside it.)
        const v16f k0 = chunk<HDc>(krows[c0 + l], 0);
        p[0][l4] = qv[0][0] * k0;
        p[1][l4] = qv[1][0] * k0;
#pragma GCC unroll 8
        for (int j = 1; j < J; ++j) {
          const v16f kj = chunk<HDc>(krows[c0 + l], j);
          p[0][l4] += qv[0][j] * kj;
          p[1][l4] += qv[1][j] * kj;
        }
      }
#pragma GCC unroll 2
      for (int i = 0; i < 2; ++i) {
        const v16f t0 =
            __builtin_shufflevector(p[i][0], p[i][1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
            __builtin_shufflevector(p[i][0], p[i][1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
        const v16f t1 =
            __builtin_shufflevector(p[i][2], p[i][3], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
            __builtin_shufflevector(p[i][2], p[i][3], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
        u[i][g] = __builtin_shufflevector(t0, t1, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
                  __builtin_shufflevector(t0, t1, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
      }
    }
#pragma GCC unroll 2
    for (int i = 0; i < 2; ++i) {
      v16f v[2];
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h)
        v[h] = __builtin_shufflevector(u[i][2 * h], u[i][2 * h + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25,
                                       28, 29) +
               __builtin_shufflevector(u[i][2 * h], u[i][2 * h + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27,
                                       30, 31);
      const v16f sums =
          (__builtin_shufflevector(v[0], v[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
           __builtin_shufflevector(v[0], v[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31)) *
          scale;
      if (mm == 16)  // a whole chunk: one store (a copy of a variable size is a call)
        std::memcpy(dst[i] + c0, &sums, sizeof(sums));
      else
        std::memcpy(dst[i] + c0, &sums, sizeof(float) * static_cast<size_t>(mm));
    }
  }
}

// Two queries' accumulators (J vectors each in memory) += pr[n] * v[n] for n < m, in key order,
// each value chunk loaded once for both; pr: the queries' probabilities (scores already times their
// softmax denominators' inverses), read from memory as broadcasts. Rows up to `readable` may be
// read: the value rows 8 keys ahead (and kFarRows ahead, into L2) are asked for as the loop goes
// (readable 0: none asked for).
template <int HDc>
[[gnu::always_inline]] inline void accumulate_values(float* const acc_mem[2], const float* const pr[2],
                                                     const float* const* vrows, int64_t m, int64_t readable) {
  constexpr int J = (HDc + 15) / 16;
  v16f acc[2][J];
  std::memcpy(acc[0], acc_mem[0], sizeof(acc[0]));
  std::memcpy(acc[1], acc_mem[1], sizeof(acc[1]));
  for (int64_t n = 0; n < m; ++n) {
    if (n + 8 < readable)
      prefetch_rows<HDc>(vrows + n + 8, 1);
    if (n + kFarRows < readable)
      prefetch_rows<HDc, 2>(vrows + n + kFarRows, 1);
    const float p0 = pr[0][n], p1 = pr[1][n];
#pragma GCC unroll 8
    for (int j = 0; j < J; ++j) {
      const v16f vj = chunk<HDc>(vrows[n], j);
      acc[0][j] += p0 * vj;
      acc[1][j] += p1 * vj;
    }
  }
  std::memcpy(acc_mem[0], acc[0], sizeof(acc[0]));
  std::memcpy(acc_mem[1], acc[1], sizeof(acc[1]));
}

}  // namespace updraft::ops::cpu::attention_rows
