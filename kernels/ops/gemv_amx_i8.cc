// AMX-INT8 linear kernel for int8 weights (gemv_cpu.h, "int8 weights"): the weights are the A
// tiles (16 weight rows x 64 k, from panels), the quantized activations the B tile (16 k-quads x
// up to 16 token columns), and each TDPBSSD adds a 16 x 16 block of exact int32 sums of y^T.
// Half the bytes of a bf16 panel per k, and half the tile instructions. The sums are exact, so
// the order of the steps does not matter to the result: every row of y equals the reference
// loop's bits whatever T is.
// Compiled with -mamx-tile -mamx-int8 and AVX-512; only called when cpu_has_amx_int8().
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ops/amx_tiles.h"
#include "kernels/ops/gemv_cpu.h"
#include "kernels/ops/transpose16_avx512.h"

namespace updraft::ops::cpu {
namespace {

constexpr int kTile = 16;

// One C tile (16 weight rows n.. x `cols` token columns, int32, stored in acc with a 64-byte
// row stride) into y: y[t, n + i] = (float(acc[i][t]) * xscale[t]) * scale[n + i].
// (A whole block of 16 token columns is transposed in registers, a narrower one gathered.)
void store_block(const int32_t* acc, int64_t rows, int64_t cols, const float* xscale, const float* scale, float* y,
                 int64_t ldy) {
  const __m512i column = _mm512_set_epi32(240, 224, 208, 192, 176, 160, 144, 128, 112, 96, 80, 64, 48, 32, 16, 0);
  const __mmask16 live = static_cast<__mmask16>((1u << rows) - 1u);
  const __m512 sw = _mm512_maskz_loadu_ps(live, scale);
  if (cols == kTile) {
    __m512i v[16];
    for (int i = 0; i < 16; ++i)
      v[i] = _mm512_load_si512(acc + i * kTile);
    transpose_16x16(v);  // v[t]: token column t's 16 sums
    for (int t = 0; t < 16; ++t) {
      const __m512 sums = _mm512_cvtepi32_ps(v[t]);
      _mm512_mask_storeu_ps(y + t * ldy, live, _mm512_mul_ps(_mm512_mul_ps(sums, _mm512_set1_ps(xscale[t])), sw));
    }
    return;
  }
  for (int64_t t = 0; t < cols; ++t) {
    const __m512 sums = _mm512_cvtepi32_ps(_mm512_i32gather_epi32(column, acc + t, 4));
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(sums, _mm512_set1_ps(xscale[t])), sw);
    _mm512_mask_storeu_ps(y + t * ldy, live, v);
  }
}

// NB blocks (b0 ..) of one panel, whose tile (block j, step s) is at a0 + (s * nb + j) * 1024,
// against one token chunk xs (`width` columns as packed, `cols` live from token t0).
template <int NB>
void blocks(const uint8_t* xs, int64_t width, int64_t steps, const int8_t* a0, int64_t nb, const Int8Weight& w,
            int64_t b0, const float* xscale, int64_t t0, int64_t cols, float* y, int64_t ldy) {
  const int64_t x_step = 64 * width, a_step = nb * 1024;
  zero_accumulators<NB>();
  for (int64_t s = 0; s < steps; ++s) {
    const int8_t* a = a0 + s * a_step;
    _tile_loadd(4, xs + s * x_step, 4 * width);
    _tile_loadd(5, a, 64);
    _tile_dpbssd(0, 5, 4);
    if constexpr (NB > 1) {
      _tile_loadd(6, a + 1024, 64);
      _tile_dpbssd(1, 6, 4);
    }
    if constexpr (NB > 2) {
      _tile_loadd(7, a + 2048, 64);
      _tile_dpbssd(2, 7, 4);
    }
    if constexpr (NB > 3) {
      _tile_loadd(5, a + 3072, 64);
      _tile_dpbssd(3, 5, 4);
    }
  }
  alignas(64) int32_t acc[NB][kTile * kTile];
  _tile_stored(0, acc[0], 64);
  if constexpr (NB > 1)
    _tile_stored(1, acc[1], 64);
  if constexpr (NB > 2)
    _tile_stored(2, acc[2], 64);
  if constexpr (NB > 3)
    _tile_stored(3, acc[3], 64);
  for (int j = 0; j < NB; ++j) {
    const int64_t n = (b0 + j) * kTile, rows = std::min<int64_t>(kTile, w.N - n);
    store_block(acc[j], rows, cols, xscale + t0, w.scale.data() + n, y + t0 * ldy + n, ldy);
  }
}

void blocks_of(int64_t count, const uint8_t* xs, int64_t width, int64_t steps, const int8_t* a0, int64_t nb,
               const Int8Weight& w, int64_t b0, const float* xscale, int64_t t0, int64_t cols, float* y, int64_t ldy) {
  switch (count) {
    case 4:
      return blocks<4>(xs, width, steps, a0, nb, w, b0, xscale, t0, cols, y, ldy);
    case 3:
      return blocks<3>(xs, width, steps, a0, nb, w, b0, xscale, t0, cols, y, ldy);
    case 2:
      return blocks<2>(xs, width, steps, a0, nb, w, b0, xscale, t0, cols, y, ldy);
    default:
      return blocks<1>(xs, width, steps, a0, nb, w, b0, xscale, t0, cols, y, ldy);
  }
}

// Blocks b0 and b0 + 1 against two full token chunks x0, x1 (16 columns each, so tile 5 serves as
// a second B tile): C tiles 0 (b0, x0), 1 (b0 + 1, x0), 2 (b0, x1), 3 (b0 + 1, x1); each weight
// tile loaded feeds two products. Exact sums: the same bits as blocks<NB>.
void blocks_2x2(const uint8_t* x0, const uint8_t* x1, int64_t steps, const int8_t* a0, int64_t nb, const Int8Weight& w,
                int64_t b0, const float* xscale, int64_t t0, float* y, int64_t ldy) {
  const int64_t a_step = nb * 1024;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t s = 0; s < steps; ++s) {
    const int8_t* a = a0 + s * a_step;
    _tile_loadd(4, x0 + s * 1024, 64);
    _tile_loadd(6, a, 64);
    _tile_dpbssd(0, 6, 4);
    _tile_loadd(7, a + 1024, 64);
    _tile_dpbssd(1, 7, 4);
    _tile_loadd(5, x1 + s * 1024, 64);
    _tile_dpbssd(2, 6, 5);
    _tile_dpbssd(3, 7, 5);
  }
  alignas(64) int32_t acc[4][kTile * kTile];
  _tile_stored(0, acc[0], 64);
  _tile_stored(1, acc[1], 64);
  _tile_stored(2, acc[2], 64);
  _tile_stored(3, acc[3], 64);
  for (int j = 0; j < 4; ++j) {
    const int64_t n = (b0 + j % 2) * kTile, rows = std::min<int64_t>(kTile, w.N - n), t = t0 + (j / 2) * kTile;
    store_block(acc[j], rows, kTile, xscale + t, w.scale.data() + n, y + t * ldy + n, ldy);
  }
}

// Every token chunk against blocks [b, e) of one panel (it stays in L1/L2 across the chunks):
// full chunks two at a time against pairs of blocks, the rest a chunk at a time.
void panel(const uint8_t* xp, int64_t T, const float* xscale, const Int8Weight& w, int64_t p, int64_t nb, int64_t b,
           int64_t e, float* y, int64_t ldy) {
  const int64_t width = std::min<int64_t>(T, kTile), steps = w.K / 64, chunk_bytes = steps * 1024;
  const int8_t* panel0 = w.panels.data() + p * kTile * w.K;
  int64_t t0 = 0;
  for (; t0 + 2 * kTile <= T; t0 += 2 * kTile) {
    const uint8_t* x0 = xp + (t0 / kTile) * chunk_bytes;
    int64_t j = b;
    for (; j + 2 <= e; j += 2)
      blocks_2x2(x0, x0 + chunk_bytes, steps, panel0 + (j - p) * 1024, nb, w, j, xscale, t0, y, ldy);
    for (; j < e; ++j)
      for (int64_t c = 0; c < 2; ++c)
        blocks<1>(x0 + c * chunk_bytes, kTile, steps, panel0 + (j - p) * 1024, nb, w, j, xscale, t0 + c * kTile, kTile,
                  y, ldy);
  }
  for (; t0 < T; t0 += kTile)
    blocks_of(e - b, xp + (t0 / kTile) * chunk_bytes, width, steps, panel0 + (b - p) * 1024, nb, w, b, xscale, t0,
              std::min<int64_t>(kTile, T - t0), y, ldy);
}

}  // namespace

void quantize_rows_int8_avx512(const float* x, int64_t T, int64_t K, int8_t* q, float* scale) {
  const __m512 lo = _mm512_set1_ps(-127.f), hi = _mm512_set1_ps(127.f);
  for (int64_t t = 0; t < T; ++t) {
    const float* r = x + t * K;
    __m512 amax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int64_t k = 0; k < K; k += 16) {
      const __m512 v = _mm512_loadu_ps(r + k);
      amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
      bad |= _mm512_fpclass_ps_mask(v, 0x99);  // NaN or infinity
    }
    const float m = _mm512_reduce_max_ps(amax);
    if (bad != 0 || m == 0 || !std::isfinite(127.f / m)) {  // the reference's rule for these rows
      scale[t] = quantize_row_int8(r, K, q + t * K);
      continue;
    }
    scale[t] = m / 127.f;
    const __m512 inv = _mm512_set1_ps(127.f / m);
    for (int64_t k = 0; k < K; k += 16) {
      const __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(r + k), inv),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i i = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + t * K + k), _mm512_cvtsepi32_epi8(i));
    }
  }
}

void pack_rows_amx_i8(const int8_t* xq, int64_t T, int64_t K, uint8_t* xp) {
  const int64_t steps = K / 64, width = std::min<int64_t>(T, kTile);
  int64_t t_full = 0;
  if (width == kTile)  // whole chunks: each step's 16 rows of 16 quads, transposed in registers
    for (; t_full + kTile <= T; t_full += kTile)
      for (int64_t s = 0; s < steps; ++s) {
        __m512i v[16];
        for (int i = 0; i < 16; ++i)
          v[i] = _mm512_loadu_si512(xq + (t_full + i) * K + s * 64);
        transpose_16x16(v);
        uint8_t* dst = xp + (t_full / kTile) * steps * 1024 + s * 1024;
        for (int r = 0; r < 16; ++r)
          _mm512_storeu_si512(dst + r * 64, v[r]);
      }
  for (int64_t t = t_full; t < T; ++t) {
    uint8_t* base = xp + (t / kTile) * steps * 1024 + (t % kTile) * 4;
    for (int64_t s = 0; s < steps; ++s) {
      const int8_t* src = xq + t * K + s * 64;
      uint8_t* dst = base + s * 64 * width;
      if (width == 1) {
        std::memcpy(dst, src, 64);  // one column: the quads are contiguous
      } else {
        for (int64_t r = 0; r < kTile; ++r)
          std::memcpy(dst + r * 4 * width, src + 4 * r, 4);
      }
    }
  }
}

void gemv_panels_amx_i8(const uint8_t* xp, int64_t T, const float* xscale, const Int8Weight& w, int64_t b_begin,
                        int64_t b_end, float* y, int64_t ldy) {
  amx_configure_tiles(std::min<int64_t>(T, kTile));
  const int64_t blocks = (w.N + kTile - 1) / kTile;
  for (int64_t b = b_begin; b < b_end;) {
    const int64_t p = b / 4 * 4, nb = std::min<int64_t>(4, blocks - p), e = std::min(p + nb, b_end);
    panel(xp, T, xscale, w, p, nb, b, e, y, ldy);
    b = e;
  }
}

}  // namespace updraft::ops::cpu
