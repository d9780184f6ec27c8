// AMX-INT8 linear kernel for int8 weights (gemv_cpu.h, "int8 weights"): the weights are the A
// tiles (16 weight rows x 64 k, from panels), the quantized activations the B tile (16 k-quads x
// up to 16 token columns), and each TDPBSSD adds a 16 x 16 block of exact int32 sums of y^T.
// Half the bytes of a bf16 panel per k, and half the tile instructions. The sums are exact, so
// the order of the steps does not matter to the result: every row of y equals the reference
// loop's bits whatever T is.
// Compiled with -mamx-tile -mamx-int8 -mavx512f; only called when cpu_has_amx_int8().
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/ops/gemv_cpu.h"

namespace updraft::ops::cpu {
namespace {

constexpr int kTile = 16;

// One C tile (16 weight rows n.. x `cols` token columns, int32, stored in acc with a 64-byte
// row stride) into y: y[t, n + i] = (float(acc[i][t]) * xscale[t]) * scale[n + i].
void store_block(const int32_t* acc, int64_t rows, int64_t cols, const float* xscale, const float* scale, float* y,
                 int64_t ldy) {
  const __m512i column = _mm512_set_epi32(240, 224, 208, 192, 176, 160, 144, 128, 112, 96, 80, 64, 48, 32, 16, 0);
  const __mmask16 live = static_cast<__mmask16>((1u << rows) - 1u);
  const __m512 sw = _mm512_maskz_loadu_ps(live, scale);
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
  _tile_zero(0);
  if constexpr (NB > 1)
    _tile_zero(1);
  if constexpr (NB > 2)
    _tile_zero(2);
  if constexpr (NB > 3)
    _tile_zero(3);
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

}  // namespace

void pack_rows_amx_i8(const int8_t* xq, int64_t T, int64_t K, uint8_t* xp) {
  const int64_t steps = K / 64, width = std::min<int64_t>(T, kTile);
  for (int64_t t = 0; t < T; ++t) {
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
  const int64_t width = std::min<int64_t>(T, kTile), steps = w.K / 64, blocks = (w.N + kTile - 1) / kTile;
  amx_configure_tiles(width);
  for (int64_t b = b_begin; b < b_end;) {
    const int64_t p = b / 4 * 4, nb = std::min<int64_t>(4, blocks - p), e = std::min(p + nb, b_end);
    const int8_t* a0 = w.panels.data() + p * kTile * w.K + (b - p) * 1024;
    // Every token chunk against this panel (it stays in L1/L2 across the chunks).
    for (int64_t t0 = 0; t0 < T; t0 += kTile)
      blocks_of(e - b, xp + (t0 / kTile) * steps * 1024, width, steps, a0, nb, w, b, xscale, t0,
                std::min<int64_t>(kTile, T - t0), y, ldy);
    b = e;
  }
}

}  // namespace updraft::ops::cpu
