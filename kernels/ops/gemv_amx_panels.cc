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

// The bf16 products for amx_panel::run: TDPBF16PS, and C tiles stored straight into y when a
// tile holds exactly the live rows (`tile_rows` high) and a whole block of columns, else through
// a buffer.
struct Bf16Panels {
  float* y;
  int64_t ldy, N, tile_rows;

  template <int C, int A, int B>
  static void dp() {
    UPD_AMX_WITH_CAB(_tile_dpbf16ps);
  }
  template <int C>
  void store(int64_t t0, int64_t n, int64_t rows) const {
    float* dst = y + t0 * ldy + n;
#define UPD_STORE_DIRECT(c) _tile_stored(c, dst, 4 * ldy)
#define UPD_STORE_TMP(c) _tile_stored(c, tmp, 4 * kTile)
    if (rows == tile_rows && n + kTile <= N) {
      UPD_AMX_WITH_C(UPD_STORE_DIRECT);
      return;
    }
    alignas(64) float tmp[kTile * kTile];
    UPD_AMX_WITH_C(UPD_STORE_TMP);
#undef UPD_STORE_DIRECT
#undef UPD_STORE_TMP
    const auto cols = static_cast<size_t>(std::min<int64_t>(kTile, N - n));
    for (int64_t t = 0; t < rows; ++t)
      std::memcpy(dst + t * ldy, tmp + t * kTile, cols * sizeof(float));
  }
};

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
  const int64_t rows = std::min<int64_t>(T, kTile);
  amx_configure_rows(rows);
  amx_panel::run(Bf16Panels{y, ldy, N, rows}, reinterpret_cast<const uint8_t*>(xa), 2 * K, T,
                 reinterpret_cast<const uint8_t*>(panels), 2 * K, N, b_begin, b_end);
}

}  // namespace updraft::ops::cpu
