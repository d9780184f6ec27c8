// AMX BF16 linear kernel for row-major weights (those without panels; gemv_amx_panels.cc runs
// the panels with the operands the other way round, to the same bits): the weights are the A
// tiles (16 weight rows x 32 k, loaded straight from the row-major [N, K] matrix with its row
// stride), the activations the B tile (16 k-pairs x 16 token rows, packed once per call in the
// VNNI pair layout), and each TDPBF16PS adds a 16 x 16 block of y^T. A TDPBF16PS costs the same
// whether 1 or 16 token columns are live, so verifying up to 16 rows streams each weight once at
// the cost of a decode step, with no weight repacking and no horizontal sums. Token columns of
// the B tile beyond T are never read back; a column's sums depend only on its own activations, so
// every row of y is computed by the same instructions in the same order whatever T is.
// Compiled with -mamx-tile -mamx-bf16 -mavx512bf16; only called when cpu_has_amx_bf16().
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "kernels/ops/amx_tiles.h"
#include "kernels/ops/gemv_cpu.h"
#include "kernels/ops/transpose16_avx512.h"

namespace updraft::ops::cpu {
namespace {

constexpr int kTile = 16;                          // rows of every tile; B and C columns
constexpr int64_t kGatherCols = 4;                 // up to this many token columns are gathered, more transposed
constexpr int64_t kStepElems = kTile * 2 * kTile;  // bf16 values in one packed B tile (1 KiB)

// ldtilecfg's 64-byte operand. amx_configure_tiles (this file's kernel): palette 1, tiles 0-3
// accumulate (C), 4 holds x (B), 5-7 the weights (A); every tile 16 rows, A tiles 64 bytes wide,
// B and C tiles 4 bytes per token column (pack_rows_amx's width: a decode row loads one cache
// line of x per step, not 16). amx_configure_rows (the panel kernels): tiles 0-4 (C, and x as A)
// as many rows as the token rows, 5-7 16 rows, all 64 bytes wide.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The token columns of every B and C tile for T rows: T up to 16, else 16.
int64_t tile_cols(int64_t T) {
  return std::min<int64_t>(T, kTile);
}

bool os_grants_amx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0)
    return false;
  const bool tile = (d >> 24) & 1u, bf16 = (d >> 22) & 1u;
  if (!tile || !bf16 || !cpu_has_avx512_bf16())
    return false;
  // Linux makes a process ask for the 8 KiB tile state before its first tile instruction.
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// A 16 x 16 f32 block of y^T (weight rows n.., token columns t0..), stored from a C tile into
// tmp, into y. A few token columns are gathered one each; more are transposed in registers (in a
// one-thread harness at 16 columns the transpose cut a 1216 x 448 product by about a fifth; at 2
// to 4 columns the gathers were a little faster).
// (The tile intrinsics take their tile numbers as literals, hence the macro below.)
void scatter_block(const float* tmp, float* y, int64_t ldy, int64_t n, int64_t rows, int64_t t0, int64_t cols) {
  const __mmask16 live = static_cast<__mmask16>((1u << rows) - 1u);
  if (cols <= kGatherCols) {
    const __m512i column = _mm512_set_epi32(240, 224, 208, 192, 176, 160, 144, 128, 112, 96, 80, 64, 48, 32, 16, 0);
    for (int64_t t = 0; t < cols; ++t)
      _mm512_mask_storeu_ps(y + (t0 + t) * ldy + n, live, _mm512_i32gather_ps(column, tmp + t, 4));
    return;
  }
  __m512i v[kTile];
  for (int r = 0; r < kTile; ++r)
    v[r] = _mm512_load_si512(tmp + r * kTile);
  transpose_16x16(v);
  for (int64_t t = 0; t < cols; ++t)
    _mm512_mask_storeu_ps(y + (t0 + t) * ldy + n, live, _mm512_castsi512_ps(v[t]));
}

// One C tile's block into y: with one token column (decode) its 16 sums are 16 consecutive
// floats of y, stored straight from the tile; otherwise through tmp (scatter_block).
#define UPD_STORE_BLOCK(C, n, rows)                  \
  do {                                               \
    if (width == 1 && (rows) == kTile) {             \
      _tile_stored(C, y + t0 * ldy + (n), 4);        \
    } else {                                         \
      _tile_stored(C, tmp, 64);                      \
      scatter_block(tmp, y, ldy, n, rows, t0, cols); \
    }                                                \
  } while (0)

// Where a matrix's A tiles are: block b (weight rows 16b ..), step s (k = 32s ..) starts at
// base + (b - first_block) * block + s * step, its 16 rows row_bytes apart: for row-major
// [N, K], block 16K, step 32, row_bytes 2K.
// first_block: the block index of base (a padded copy of a matrix's last rows starts there).
struct TileSource {
  const uint16_t* base;
  int64_t block, step, row_bytes, first_block = 0;
};

// NB blocks of 16 weight rows (the panel starting at block b0) against token chunk `chunk` of
// xp (`width` columns as packed, the first `cols` of them live), accumulated in C tiles
// 0..NB-1; A tiles rotate through 5, 6, 7.
template <int NB>
void blocks(const uint16_t* xp, int64_t chunk, int64_t width, int64_t K, const TileSource& w, int64_t b0, float* y,
            int64_t ldy, int64_t rows_in_last, int64_t t0, int64_t cols) {
  const int64_t steps = K / 32, x_step = 2 * kTile * width;
  const uint16_t* xs = xp + chunk * steps * kStepElems;
  const uint16_t* a0 = w.base + (b0 - w.first_block) * w.block;
  zero_accumulators<NB>();
  for (int64_t s = 0; s < steps; ++s) {
    const uint16_t* a = a0 + s * w.step;
    _tile_loadd(4, xs + s * x_step, 4 * width);
    _tile_loadd(5, a, w.row_bytes);
    _tile_dpbf16ps(0, 5, 4);
    if constexpr (NB > 1) {
      _tile_loadd(6, a + w.block, w.row_bytes);
      _tile_dpbf16ps(1, 6, 4);
    }
    if constexpr (NB > 2) {
      _tile_loadd(7, a + 2 * w.block, w.row_bytes);
      _tile_dpbf16ps(2, 7, 4);
    }
    if constexpr (NB > 3) {
      _tile_loadd(5, a + 3 * w.block, w.row_bytes);
      _tile_dpbf16ps(3, 5, 4);
    }
  }
  const int64_t n = b0 * kTile;
  const auto rows = [&](int b) { return b == NB - 1 ? rows_in_last : int64_t{kTile}; };
  alignas(64) float tmp[kTile * kTile];
  UPD_STORE_BLOCK(0, n, rows(0));
  if constexpr (NB > 1)
    UPD_STORE_BLOCK(1, n + 16, rows(1));
  if constexpr (NB > 2)
    UPD_STORE_BLOCK(2, n + 32, rows(2));
  if constexpr (NB > 3)
    UPD_STORE_BLOCK(3, n + 48, rows(3));
}

// Blocks b0 and b0 + 1 against token chunks c0 and c0 + 1, both full (T > 16: every tile is 16
// rows of 64 bytes, so tile 5 serves as a B tile here): C tile 0 (b0, c0), 1 (b0 + 1, c0),
// 2 (b0, c0 + 1), 3 (b0 + 1, c0 + 1); B tiles 4, 5; A tiles 6, 7. Four loads feed four products
// where blocks<4> needs five, and each weight tile loaded serves two chunks. Every C tile sums
// the same steps in the same order from zero as in blocks<NB>, so y's bits are the same.
void blocks_2x2(const uint16_t* xp, int64_t c0, int64_t K, const TileSource& w, int64_t b0, float* y, int64_t ldy,
                int64_t rows_b1) {
  const int64_t steps = K / 32, x_step = 2 * kTile * kTile;
  const uint16_t* x0 = xp + c0 * steps * kStepElems;
  const uint16_t* x1 = x0 + steps * kStepElems;
  const uint16_t* a0 = w.base + (b0 - w.first_block) * w.block;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t s = 0; s < steps; ++s) {
    const uint16_t* a = a0 + s * w.step;
    _tile_loadd(4, x0 + s * x_step, 64);
    _tile_loadd(6, a, w.row_bytes);
    _tile_dpbf16ps(0, 6, 4);
    _tile_loadd(7, a + w.block, w.row_bytes);
    _tile_dpbf16ps(1, 7, 4);
    _tile_loadd(5, x1 + s * x_step, 64);
    _tile_dpbf16ps(2, 6, 5);
    _tile_dpbf16ps(3, 7, 5);
  }
  alignas(64) float tmp[kTile * kTile];
  const int64_t n = b0 * kTile, t0 = c0 * kTile;
  _tile_stored(0, tmp, 64);
  scatter_block(tmp, y, ldy, n, kTile, t0, kTile);
  _tile_stored(1, tmp, 64);
  scatter_block(tmp, y, ldy, n + kTile, rows_b1, t0, kTile);
  _tile_stored(2, tmp, 64);
  scatter_block(tmp, y, ldy, n, kTile, t0 + kTile, kTile);
  _tile_stored(3, tmp, 64);
  scatter_block(tmp, y, ldy, n + kTile, rows_b1, t0 + kTile, kTile);
}

// Every token chunk against the panel (kept in L1/L2 across the chunks): full chunks two at a
// time against pairs of blocks (blocks_2x2), the rest a chunk at a time.
template <int NB>
void panel(const uint16_t* xp, int64_t T, int64_t K, const TileSource& w, int64_t b0, float* y, int64_t ldy,
           int64_t rows_in_last) {
  int64_t c = 0;
  if constexpr (NB >= 2) {
    for (; (c + 2) * kTile <= T; c += 2) {
      blocks_2x2(xp, c, K, w, b0, y, ldy, NB == 2 ? rows_in_last : kTile);
      if constexpr (NB == 4)
        blocks_2x2(xp, c, K, w, b0 + 2, y, ldy, rows_in_last);
      if constexpr (NB == 3)
        for (int64_t cc = c; cc < c + 2; ++cc)
          blocks<1>(xp, cc, kTile, K, w, b0 + 2, y, ldy, rows_in_last, cc * kTile, kTile);
    }
  }
  for (; c * kTile < T; ++c)
    blocks<NB>(xp, c, tile_cols(T), K, w, b0, y, ldy, rows_in_last, c * kTile, std::min<int64_t>(kTile, T - c * kTile));
}

// panel<nb> for nb = 1..4 blocks chosen at run time.
void panel_of(int64_t nb, const uint16_t* xp, int64_t T, int64_t K, const TileSource& w, int64_t b0, float* y,
              int64_t ldy, int64_t rows_in_last) {
  switch (nb) {
    case 4:
      return panel<4>(xp, T, K, w, b0, y, ldy, rows_in_last);
    case 3:
      return panel<3>(xp, T, K, w, b0, y, ldy, rows_in_last);
    case 2:
      return panel<2>(xp, T, K, w, b0, y, ldy, rows_in_last);
    default:
      return panel<1>(xp, T, K, w, b0, y, ldy, rows_in_last);
  }
}

// Blocks [b_begin, b_end) in panels of 4; the last block holds rows_in_last rows.
void panels(const uint16_t* xp, int64_t T, int64_t K, const TileSource& w, int64_t b_begin, int64_t b_end, float* y,
            int64_t ldy, int64_t rows_in_last) {
  for (int64_t b = b_begin; b < b_end; b += 4)
    panel_of(std::min<int64_t>(4, b_end - b), xp, T, K, w, b, y, ldy, b + 4 >= b_end ? rows_in_last : kTile);
}

}  // namespace

bool cpu_has_amx_bf16() {
  static const bool granted = os_grants_amx();
  return granted;
}

bool cpu_has_amx_int8() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  static const bool has = cpu_has_amx_bf16() && __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && ((d >> 25) & 1u);
  return has;
}

namespace {

// Loads cfg into this thread's tile configuration unless the one keyed `key` is loaded already
// (keys: kColsKey + cols, kRowsKey + rows; none is loaded at first).
constexpr int64_t kColsKey = 1 << 8, kRowsKey = 2 << 8;
void load_tile_config(int64_t key, TileConfig& cfg) {
  thread_local int64_t loaded = -1;
  if (loaded == key)
    return;
  // GCC 12 does not treat ldtilecfg as reading its operand: inlined, the stores that fill cfg
  // were dropped as dead and ldtilecfg faulted on garbage. The barrier makes them happen.
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
  loaded = key;
}

}  // namespace

void amx_configure_tiles(int64_t cols) {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.colsb[i] = static_cast<uint16_t>(i < 5 ? 4 * cols : 64);
    cfg.rows[i] = kTile;
  }
  load_tile_config(kColsKey + cols, cfg);
}

void amx_configure_rows(int64_t rows) {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.colsb[i] = 64;
    cfg.rows[i] = static_cast<uint8_t>(i < 5 ? rows : kTile);
  }
  load_tile_config(kRowsKey + rows, cfg);
}

namespace {

// Tokens t0 .. t0 + 15 (a whole chunk of a 16-column layout): each step's 16 pair vectors,
// transposed in registers, are the B tile's 16 rows, stored whole.
void pack_chunk_16(const float* x, int64_t K, int64_t t0, uint32_t* dst) {
  const int64_t steps = K / 32;
  uint32_t* base = dst + (t0 / kTile) * steps * (kStepElems / 2);
  for (int64_t s = 0; s < steps; ++s) {
    __m512i v[16];
    for (int i = 0; i < 16; ++i) {
      const float* src = x + (t0 + i) * K + s * 32;
      v[i] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + 16), _mm512_loadu_ps(src));
    }
    transpose_16x16(v);
    for (int r = 0; r < 16; ++r)
      _mm512_storeu_si512(base + s * kTile * kTile + r * kTile, v[r]);
  }
}

}  // namespace

void pack_rows_amx(const float* x, int64_t T, int64_t K, uint16_t* xp, int64_t t_begin, int64_t t_end) {
  const int64_t steps = K / 32, width = tile_cols(T);
  auto* dst = reinterpret_cast<uint32_t*>(xp);  // one bf16 pair (k, k + 1) per 32 bits
  const int64_t end = t_end < 0 ? T : t_end;
  if (width == kTile)  // whole chunks transposed in registers; the rest below, pair by pair
    for (; t_begin % kTile == 0 && t_begin + kTile <= end; t_begin += kTile)
      pack_chunk_16(x, K, t_begin, dst);
  // Pair r of a step goes to its row r of the B tile, `width` pairs apart.
  const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32(static_cast<int>(width)));
  for (int64_t t = t_begin; t < end; ++t) {
    const float* src = x + t * K;
    uint32_t* base = dst + (t / kTile) * steps * (kStepElems / 2) + t % kTile;
    for (int64_t s = 0; s < steps; ++s) {
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + s * 32 + 16), _mm512_loadu_ps(src + s * 32));
      if (width == 1)
        _mm512_storeu_si512(base + s * kTile, (__m512i)v);  // one column: the pairs are contiguous
      else
        _mm512_i32scatter_epi32(base + s * kTile * width, rows, (__m512i)v, 4);
    }
  }
}

void gemv_rows_amx(const uint16_t* xp, int64_t T, int64_t K, const uint16_t* w, int64_t n_begin, int64_t n_end,
                   float* y, int64_t ldy) {
  if (T <= 0)
    return;
  amx_configure_tiles(tile_cols(T));
  const TileSource src{w, kTile * K, 32, 2 * K};
  const int64_t full_end = n_begin + (n_end - n_begin) / kTile * kTile;
  panels(xp, T, K, src, n_begin / kTile, full_end / kTile, y, ldy, kTile);
  if (full_end < n_end) {
    // The last rows (fewer than 16, only at the end of the matrix): a zero-padded copy, so that
    // no tile load reads past the weights.
    const int64_t rows = n_end - full_end;
    thread_local std::vector<uint16_t> pad;
    pad.assign(static_cast<size_t>(kTile * K), 0);
    std::memcpy(pad.data(), w + full_end * K, static_cast<size_t>(rows * K) * sizeof(uint16_t));
    const TileSource tail{pad.data(), kTile * K, 32, 2 * K, full_end / kTile};
    panels(xp, T, K, tail, full_end / kTile, full_end / kTile + 1, y, ldy, rows);
  }
}

double probe_amx_rate() {
  // Four independent accumulators over the same operands (zeros: the rate does not depend on
  // the values); the best of 3.
  amx_configure_tiles(kTile);
  constexpr long kIters = 20000;
  double best = 0;
  _tile_zero(4);
  _tile_zero(5);
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    for (long i = 0; i < kIters; ++i) {
      _tile_dpbf16ps(0, 5, 4);
      _tile_dpbf16ps(1, 5, 4);
      _tile_dpbf16ps(2, 5, 4);
      _tile_dpbf16ps(3, 5, 4);
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() - t0;
    best = std::max(best, 4.0 * kIters / dt);
  }
  return best;
}

}  // namespace updraft::ops::cpu
