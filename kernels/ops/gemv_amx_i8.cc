// AMX-INT8 linear kernel for int8 weights (gemv_cpu.h, "int8 weights"), with the operands as
// gemv_amx_panels.cc has them: the quantized activations are the A tiles (up to 16 token rows x
// 64 k, straight from the int8 rows), the weights the B tiles (16 k-quads x 16 weight rows, the
// VNNI layout of pack_panels_amx), and each TDPBSSD adds a T x 16 block of exact int32 sums of
// y, whose rows are scaled into y with contiguous vector loads. Half the bytes of a bf16 panel
// per k, and half the tile instructions; with T <= 16 the tiles are T rows high (a decode row's
// TDPBSSD costs about half a full tile's). The sums are exact, so the order of the steps does
// not matter to the result: every row of y equals the reference loop's bits whatever T is.
// Compiled with -mamx-tile -mamx-int8 and AVX-512; only called when cpu_has_amx_int8().
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ops/amx_tiles.h"
#include "kernels/ops/gemv_cpu.h"

namespace updraft::ops::cpu {
namespace {

constexpr int kTile = 16;
constexpr int64_t kTileBytes = 1024;

// Where the weight tiles are: block j of the panel at `base`, step s at base + s * step + j * 1024.
struct Panel {
  const int8_t* base;
  int64_t step;
};

// The live `rows` x cols of a C tile (int32, 16 to a row in acc) into y:
// y[t, n + i] = (float(acc[t][i]) * xscale[t]) * scale[n + i].
void store_block(const int32_t* acc, int64_t rows, int64_t cols, const float* xscale, const float* scale, float* y,
                 int64_t ldy) {
  const __mmask16 live = static_cast<__mmask16>((1u << cols) - 1u);
  const __m512 sw = _mm512_maskz_loadu_ps(live, scale);
  for (int64_t t = 0; t < rows; ++t) {
    const __m512 sums = _mm512_cvtepi32_ps(_mm512_load_si512(acc + t * kTile));
    _mm512_mask_storeu_ps(y + t * ldy, live, _mm512_mul_ps(_mm512_mul_ps(sums, _mm512_set1_ps(xscale[t])), sw));
  }
}

// C tile `C` (token rows t0.., weight rows n..) of the product into y through acc.
#define UPD_STORE_C8(C, t0, n)                                                                       \
  do {                                                                                               \
    _tile_stored(C, acc, 4 * kTile);                                                                 \
    store_block(acc, rows, std::min<int64_t>(kTile, w.N - (n)), xscale + (t0), w.scale.data() + (n), \
                y + (t0)*ldy + (n), ldy);                                                            \
  } while (0)

// NB blocks (weight rows n0..) against the token chunk whose first row is xa (`rows` live),
// accumulated in C tiles 0..NB-1; B tiles rotate through 5, 6, 7.
template <int NB>
void blocks(const int8_t* xa, const Panel& p, const Int8Weight& w, int64_t n0, const float* xscale, int64_t rows,
            float* y, int64_t ldy) {
  const int64_t steps = w.K / 64;
  zero_accumulators<NB>();
  for (int64_t s = 0; s < steps; ++s) {
    const int8_t* b = p.base + s * p.step;
    _tile_loadd(4, xa + s * 64, w.K);
    _tile_loadd(5, b, 64);
    _tile_dpbssd(0, 4, 5);
    if constexpr (NB > 1) {
      _tile_loadd(6, b + kTileBytes, 64);
      _tile_dpbssd(1, 4, 6);
    }
    if constexpr (NB > 2) {
      _tile_loadd(7, b + 2 * kTileBytes, 64);
      _tile_dpbssd(2, 4, 7);
    }
    if constexpr (NB > 3) {
      _tile_loadd(5, b + 3 * kTileBytes, 64);
      _tile_dpbssd(3, 4, 5);
    }
  }
  alignas(64) int32_t acc[kTile * kTile];
  UPD_STORE_C8(0, 0, n0);
  if constexpr (NB > 1)
    UPD_STORE_C8(1, 0, n0 + 16);
  if constexpr (NB > 2)
    UPD_STORE_C8(2, 0, n0 + 32);
  if constexpr (NB > 3)
    UPD_STORE_C8(3, 0, n0 + 48);
}

// Two whole chunks (token rows from xa, and 16 further) against two blocks (weight rows n0..):
// C tiles 0 (chunk 0, block 0), 1 (chunk 0, block 1), 2 (chunk 1, block 0), 3 (chunk 1, block 1);
// A tiles 4, 5; B tiles 6, 7: four loads feed four products. Exact sums: blocks<NB>'s bits.
void blocks_2x2(const int8_t* xa, const Panel& p, const Int8Weight& w, int64_t n0, const float* xscale, float* y,
                int64_t ldy) {
  const int64_t steps = w.K / 64, rows = kTile;
  const int8_t* xb = xa + kTile * w.K;
  zero_accumulators<4>();
  for (int64_t s = 0; s < steps; ++s) {
    const int8_t* b = p.base + s * p.step;
    _tile_loadd(4, xa + s * 64, w.K);
    _tile_loadd(6, b, 64);
    _tile_dpbssd(0, 4, 6);
    _tile_loadd(7, b + kTileBytes, 64);
    _tile_dpbssd(1, 4, 7);
    _tile_loadd(5, xb + s * 64, w.K);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  alignas(64) int32_t acc[kTile * kTile];
  UPD_STORE_C8(0, 0, n0);
  UPD_STORE_C8(1, 0, n0 + 16);
  UPD_STORE_C8(2, kTile, n0);
  UPD_STORE_C8(3, kTile, n0 + 16);
}

// Every token chunk against the panel's NB blocks (kept in L1/L2 across the chunks): pairs of
// whole chunks against pairs of blocks, the rest a chunk at a time.
template <int NB>
void panel(const int8_t* xa, int64_t T, const float* xscale, const Int8Weight& w, const Panel& p, int64_t n0, float* y,
           int64_t ldy) {
  const int64_t K = w.K;
  int64_t c = 0;
  if constexpr (NB >= 2) {
    for (; (c + 2) * kTile <= T; c += 2) {
      const int8_t* x = xa + c * kTile * K;
      const float* xs = xscale + c * kTile;
      float* yc = y + c * kTile * ldy;
      blocks_2x2(x, p, w, n0, xs, yc, ldy);
      if constexpr (NB == 4)
        blocks_2x2(x, {p.base + 2 * kTileBytes, p.step}, w, n0 + 32, xs, yc, ldy);
      if constexpr (NB == 3)
        for (int64_t cc = 0; cc < 2; ++cc)
          blocks<1>(x + cc * kTile * K, {p.base + 2 * kTileBytes, p.step}, w, n0 + 32, xs + cc * kTile, kTile,
                    yc + cc * kTile * ldy, ldy);
    }
  }
  for (; c * kTile < T; ++c)  // past 16 rows a short last chunk also computes padding rows
    blocks<NB>(xa + c * kTile * K, p, w, n0, xscale + c * kTile, std::min<int64_t>(kTile, T - c * kTile),
               y + c * kTile * ldy, ldy);
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

void gemv_panels_amx_i8(const int8_t* xa, int64_t T, const float* xscale, const Int8Weight& w, int64_t b_begin,
                        int64_t b_end, float* y, int64_t ldy) {
  if (T <= 0)
    return;
  amx_configure_rows(std::min<int64_t>(T, kTile));
  const int64_t blocks = (w.N + kTile - 1) / kTile;
  for (int64_t b = b_begin; b < b_end;) {
    const int64_t p = b / 4 * 4, nb = std::min<int64_t>(4, blocks - p), e = std::min(p + nb, b_end);
    const Panel src{w.panels.data() + p * kTile * w.K + (b - p) * kTileBytes, nb * kTileBytes};
    switch (e - b) {
      case 4:
        panel<4>(xa, T, xscale, w, src, b * kTile, y, ldy);
        break;
      case 3:
        panel<3>(xa, T, xscale, w, src, b * kTile, y, ldy);
        break;
      case 2:
        panel<2>(xa, T, xscale, w, src, b * kTile, y, ldy);
        break;
      default:
        panel<1>(xa, T, xscale, w, src, b * kTile, y, ldy);
    }
    b = e;
  }
}

}  // namespace updraft::ops::cpu
