// AMX BF16 products from weight panels (ops::prepare_linear), with the operands the other way
// round from gemv_amx.cc's row-major kernel: the activations are the A tiles (up to 16 token rows
// x 32 k, bf16 rows loaded straight from x rounded to bf16), the weights the B tiles (16 k-pairs
// x 16 weight rows, the VNNI layout, packed once), and each TDPBF16PS adds a T x 16 block of y.
// So a C tile is y's own layout: tile rows are token rows and it is stored straight into y (the
// row-major kernel's C tiles are blocks of y^T, stored through a buffer and a transpose or
// gathers), the activations need no transposing, and with T <= 16 the tiles are configured T rows
// high. Each element of C sums the same exact bf16 products in the same k order as the row-major
// kernel (a product's factors only trade places), so both give the same bits, whatever T is
// (AmxPanels.* checks it).
// Compiled with -mamx-tile -mamx-bf16 -mavx512bf16; only called when cpu_has_amx_bf16().
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/ops/amx_tiles.h"
#include "kernels/ops/gemv_cpu.h"
#include "kernels/ops/transpose16_avx512.h"

namespace updraft::ops::cpu {
namespace {

constexpr int kTile = 16;
constexpr int64_t kTileElems = 512;  // bf16 values in one 16 x 64-byte tile

// Where a block's tiles are: block j of the panel at `base`, step s at base + s * step + j * 512.
struct Panel {
  const uint16_t* base;
  int64_t step;
};

// C tile `C` (token rows t0.., weight rows n..) into y: straight from the tile when it holds
// exactly the live rows and a whole block of columns, else through tmp. (The tile intrinsics take
// their tile numbers as literals, hence the macro.)
#define UPD_STORE_C(C, t0, n)                                                           \
  do {                                                                                  \
    if (direct && (n) + kTile <= N) {                                                   \
      _tile_stored(C, y + (t0)*ldy + (n), 4 * ldy);                                     \
    } else {                                                                            \
      _tile_stored(C, tmp, 4 * kTile);                                                  \
      copy_rows(tmp, y + (t0)*ldy + (n), ldy, rows, std::min<int64_t>(kTile, N - (n))); \
    }                                                                                   \
  } while (0)

// rows x cols floats of a C tile stored in tmp (16 floats a row) into y.
void copy_rows(const float* tmp, float* y, int64_t ldy, int64_t rows, int64_t cols) {
  for (int64_t t = 0; t < rows; ++t)
    std::memcpy(y + t * ldy, tmp + t * kTile, static_cast<size_t>(cols) * sizeof(float));
}

// NB blocks (weight rows n0..) against the token chunk whose first row is xa (`rows` of them
// live; `direct`: the tiles are configured exactly that many rows high), accumulated in C tiles
// 0..NB-1; B tiles rotate through 5, 6, 7.
template <int NB>
void blocks(const uint16_t* xa, int64_t K, const Panel& p, float* y, int64_t ldy, int64_t n0, int64_t N, int64_t rows,
            bool direct) {
  const int64_t steps = K / 32;
  zero_accumulators<NB>();
  for (int64_t s = 0; s < steps; ++s) {
    const uint16_t* b = p.base + s * p.step;
    _tile_loadd(4, xa + s * 32, 2 * K);
    _tile_loadd(5, b, 64);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (NB > 1) {
      _tile_loadd(6, b + kTileElems, 64);
      _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (NB > 2) {
      _tile_loadd(7, b + 2 * kTileElems, 64);
      _tile_dpbf16ps(2, 4, 7);
    }
    if constexpr (NB > 3) {
      _tile_loadd(5, b + 3 * kTileElems, 64);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  alignas(64) float tmp[kTile * kTile];
  UPD_STORE_C(0, 0, n0);
  if constexpr (NB > 1)
    UPD_STORE_C(1, 0, n0 + 16);
  if constexpr (NB > 2)
    UPD_STORE_C(2, 0, n0 + 32);
  if constexpr (NB > 3)
    UPD_STORE_C(3, 0, n0 + 48);
}

// Two whole chunks (token rows from xa, and 16 further) against two blocks (weight rows n0..):
// C tile 0 (chunk 0, block 0), 1 (chunk 0, block 1), 2 (chunk 1, block 0), 3 (chunk 1, block 1);
// A tiles 4, 5; B tiles 6, 7. Four loads feed four products, each weight tile serving two chunks.
// Every C tile sums the same steps in the same order from zero as in blocks<NB>.
void blocks_2x2(const uint16_t* xa, int64_t K, const Panel& p, float* y, int64_t ldy, int64_t n0, int64_t N) {
  const int64_t steps = K / 32, rows = kTile;
  const bool direct = true;
  const uint16_t* xb = xa + kTile * K;
  zero_accumulators<4>();
  for (int64_t s = 0; s < steps; ++s) {
    const uint16_t* b = p.base + s * p.step;
    _tile_loadd(4, xa + s * 32, 2 * K);
    _tile_loadd(6, b, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, b + kTileElems, 64);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, xb + s * 32, 2 * K);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float tmp[kTile * kTile];
  UPD_STORE_C(0, 0, n0);
  UPD_STORE_C(1, 0, n0 + 16);
  UPD_STORE_C(2, kTile, n0);
  UPD_STORE_C(3, kTile, n0 + 16);
}

// Every token chunk against the panel's NB blocks (kept in L1/L2 across the chunks): pairs of
// whole chunks against pairs of blocks (blocks_2x2), the rest a chunk at a time.
template <int NB>
void panel(const uint16_t* xa, int64_t T, int64_t K, const Panel& p, float* y, int64_t ldy, int64_t n0, int64_t N) {
  int64_t c = 0;
  if constexpr (NB >= 2) {
    for (; (c + 2) * kTile <= T; c += 2) {
      const uint16_t* x = xa + c * kTile * K;
      float* yc = y + c * kTile * ldy;
      blocks_2x2(x, K, p, yc, ldy, n0, N);
      if constexpr (NB == 4)
        blocks_2x2(x, K, {p.base + 2 * kTileElems, p.step}, yc, ldy, n0 + 32, N);
      if constexpr (NB == 3)
        for (int64_t cc = 0; cc < 2; ++cc)
          blocks<1>(x + cc * kTile * K, K, {p.base + 2 * kTileElems, p.step}, yc + cc * kTile * ldy, ldy, n0 + 32, N,
                    kTile, true);
    }
  }
  for (; c * kTile < T; ++c) {
    const int64_t rows = std::min<int64_t>(kTile, T - c * kTile);
    // T <= 16: the tiles are T rows high; past 16 a short last chunk computes padding rows.
    const bool direct = T <= kTile || rows == kTile;
    blocks<NB>(xa + c * kTile * K, K, p, y + c * kTile * ldy, ldy, n0, N, rows, direct);
  }
}

}  // namespace

void pack_panels_amx(const uint16_t* w, int64_t N, int64_t K, uint16_t* out) {
  const int64_t blocks = (N + kTile - 1) / kTile, steps = K / 32;
  const auto* src = reinterpret_cast<const uint32_t*>(w);  // one bf16 pair (k, k + 1) per 32 bits
  for (int64_t p = 0; p < blocks; p += 4) {
    const int64_t nb = std::min<int64_t>(4, blocks - p);
    for (int64_t s = 0; s < steps; ++s)
      for (int64_t j = 0; j < nb; ++j) {
        // Rows n (the block's 16 weight rows) x 16 pairs of step s, transposed: row kp of the
        // tile holds pair kp of every weight row.
        __m512i v[kTile];
        for (int r = 0; r < kTile; ++r) {
          const int64_t n = (p + j) * kTile + r;
          v[r] = n < N ? _mm512_loadu_si512(src + n * (K / 2) + s * kTile) : _mm512_setzero_si512();
        }
        transpose_16x16(v);
        uint16_t* dst = out + p * kTile * K + (s * nb + j) * kTileElems;
        for (int r = 0; r < kTile; ++r)
          _mm512_storeu_si512(dst + r * 32, v[r]);
      }
  }
}

void pack_rows_amx_a(const float* x, int64_t T, int64_t K, uint16_t* xa) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; k += 32) {
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + t * K + k + 16), _mm512_loadu_ps(x + t * K + k));
      _mm512_storeu_si512(xa + t * K + k, (__m512i)v);
    }
  const int64_t padded = amx_rows_a_elems(T, K);
  std::memset(xa + T * K, 0, static_cast<size_t>(padded - T * K) * sizeof(uint16_t));
}

void gemv_panels_amx(const uint16_t* xa, int64_t T, int64_t K, const uint16_t* panels, int64_t N, int64_t b_begin,
                     int64_t b_end, float* y, int64_t ldy) {
  if (T <= 0)
    return;
  amx_configure_rows(std::min<int64_t>(T, kTile));
  const int64_t blocks = (N + kTile - 1) / kTile;
  for (int64_t b = b_begin; b < b_end;) {
    const int64_t p = b / 4 * 4, nb = std::min<int64_t>(4, blocks - p), e = std::min(p + nb, b_end);
    const Panel src{panels + p * kTile * K + (b - p) * kTileElems, nb * kTileElems};
    switch (e - b) {
      case 4:
        panel<4>(xa, T, K, src, y, ldy, b * kTile, N);
        break;
      case 3:
        panel<3>(xa, T, K, src, y, ldy, b * kTile, N);
        break;
      case 2:
        panel<2>(xa, T, K, src, y, ldy, b * kTile, N);
        break;
      default:
        panel<1>(xa, T, K, src, y, ldy, b * kTile, N);
    }
    b = e;
  }
}

}  // namespace updraft::ops::cpu
