// Helpers shared by the AMX kernels (gemv_amx.cc, gemv_amx_panels.cc, gemv_amx_i8.cc). Only for
// files compiled with -mamx-tile; always inlined or templates (the tile numbers are instruction
// immediates).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace updraft::ops::cpu {

// Zeroes C tiles 0 .. NB - 1, the accumulators of NB weight blocks.
template <int NB>
[[gnu::always_inline]] inline void zero_accumulators() {
  _tile_zero(0);
  if constexpr (NB > 1)
    _tile_zero(1);
  if constexpr (NB > 2)
    _tile_zero(2);
  if constexpr (NB > 3)
    _tile_zero(3);
}

// GCC's AMX intrinsics paste their tile numbers into inline assembly, so a tile number must be a
// literal: these call OP with the literals equal to template parameters C (and A, B) of the
// enclosing function, for the tiles and products the panel loops below use.
#define UPD_AMX_WITH_C(OP)   \
  if constexpr (C == 0)      \
    OP(0);                   \
  else if constexpr (C == 1) \
    OP(1);                   \
  else if constexpr (C == 2) \
    OP(2);                   \
  else                       \
    OP(3)
#define UPD_AMX_WITH_CAB(OP)                                                                \
  if constexpr (C == 0 && A == 4 && B == 5)                                                 \
    OP(0, 4, 5);                                                                            \
  else if constexpr (C == 1 && A == 4 && B == 6)                                            \
    OP(1, 4, 6);                                                                            \
  else if constexpr (C == 2 && A == 4 && B == 7)                                            \
    OP(2, 4, 7);                                                                            \
  else if constexpr (C == 3 && A == 4 && B == 5)                                            \
    OP(3, 4, 5);                                                                            \
  else if constexpr (C == 0 && A == 4 && B == 6)                                            \
    OP(0, 4, 6);                                                                            \
  else if constexpr (C == 1 && A == 4 && B == 7)                                            \
    OP(1, 4, 7);                                                                            \
  else if constexpr (C == 2 && A == 5 && B == 6)                                            \
    OP(2, 5, 6);                                                                            \
  else {                                                                                    \
    static_assert(C == 3 && A == 5 && B == 7, "a tile product the panel loops do not use"); \
    OP(3, 5, 7);                                                                            \
  }

// The panel kernels' loops (gemv_amx_panels.cc for bf16, gemv_amx_i8.cc for int8), in bytes. The
// activations are the A tiles: token rows a_stride bytes apart, 64 bytes of k a step, tiles as
// many rows high as amx_configure_rows set (past 16 token rows: 16, the rows padded to a multiple
// of 16). The weights are B tiles of 1 KiB in panels of up to 4 blocks of 16 weight rows, step
// after step (pack_panels_amx). A kernel K supplies
//   template <int C, int A, int B> static void dp();  // the tile product C += A B
//   template <int C> void store(int64_t t0, int64_t n, int64_t rows) const;
// where store puts C tile C's `rows` live token rows (t0..) of weight rows n.. into y.
namespace amx_panel {

constexpr int kTile = 16;
constexpr int64_t kTileBytes = 1024;

// Block j of a panel, step s: base + s * step + j * 1024.
struct Panel {
  const uint8_t* base;
  int64_t step;
};

// NB blocks (weight rows n0..) against the token chunk whose first row is xa (rows t0.., `rows`
// of them live), accumulated in C tiles 0..NB-1; B tiles rotate through 5, 6, 7.
template <class K, int NB>
void blocks(const K& k, const uint8_t* xa, int64_t a_stride, int64_t steps, const Panel& p, int64_t t0, int64_t n0,
            int64_t rows) {
  zero_accumulators<NB>();
  for (int64_t s = 0; s < steps; ++s) {
    const uint8_t* b = p.base + s * p.step;
    _tile_loadd(4, xa + s * 64, a_stride);
    _tile_loadd(5, b, 64);
    K::template dp<0, 4, 5>();
    if constexpr (NB > 1) {
      _tile_loadd(6, b + kTileBytes, 64);
      K::template dp<1, 4, 6>();
    }
    if constexpr (NB > 2) {
      _tile_loadd(7, b + 2 * kTileBytes, 64);
      K::template dp<2, 4, 7>();
    }
    if constexpr (NB > 3) {
      _tile_loadd(5, b + 3 * kTileBytes, 64);
      K::template dp<3, 4, 5>();
    }
  }
  k.template store<0>(t0, n0, rows);
  if constexpr (NB > 1)
    k.template store<1>(t0, n0 + 16, rows);
  if constexpr (NB > 2)
    k.template store<2>(t0, n0 + 32, rows);
  if constexpr (NB > 3)
    k.template store<3>(t0, n0 + 48, rows);
}

// Two whole chunks (token rows t0.. from xa, and the 16 after) against two blocks (weight rows
// n0..): C tiles 0 (chunk 0, block 0), 1 (chunk 0, block 1), 2 (chunk 1, block 0), 3 (chunk 1,
// block 1); A tiles 4, 5; B tiles 6, 7. Four loads feed four products, each weight tile serving
// two chunks; every C tile sums the same steps in the same order from zero as in blocks<NB>.
template <class K>
void blocks_2x2(const K& k, const uint8_t* xa, int64_t a_stride, int64_t steps, const Panel& p, int64_t t0,
                int64_t n0) {
  const uint8_t* xb = xa + kTile * a_stride;
  zero_accumulators<4>();
  for (int64_t s = 0; s < steps; ++s) {
    const uint8_t* b = p.base + s * p.step;
    _tile_loadd(4, xa + s * 64, a_stride);
    _tile_loadd(6, b, 64);
    K::template dp<0, 4, 6>();
    _tile_loadd(7, b + kTileBytes, 64);
    K::template dp<1, 4, 7>();
    _tile_loadd(5, xb + s * 64, a_stride);
    K::template dp<2, 5, 6>();
    K::template dp<3, 5, 7>();
  }
  k.template store<0>(t0, n0, kTile);
  k.template store<1>(t0, n0 + 16, kTile);
  k.template store<2>(t0 + kTile, n0, kTile);
  k.template store<3>(t0 + kTile, n0 + 16, kTile);
}

// Every token chunk against the panel's NB blocks (kept in L1/L2 across the chunks): pairs of
// whole chunks against pairs of blocks, the rest a chunk at a time (past 16 rows a short last
// chunk also computes padding rows, which store leaves out).
template <class K, int NB>
void panel(const K& k, const uint8_t* xa, int64_t a_stride, int64_t T, int64_t steps, const Panel& p, int64_t n0) {
  int64_t c = 0;
  if constexpr (NB >= 2) {
    for (; (c + 2) * kTile <= T; c += 2) {
      const uint8_t* x = xa + c * kTile * a_stride;
      blocks_2x2(k, x, a_stride, steps, p, c * kTile, n0);
      const Panel rest{p.base + 2 * kTileBytes, p.step};
      if constexpr (NB == 4)
        blocks_2x2(k, x, a_stride, steps, rest, c * kTile, n0 + 32);
      if constexpr (NB == 3)
        for (int64_t cc = c; cc < c + 2; ++cc)
          blocks<K, 1>(k, xa + cc * kTile * a_stride, a_stride, steps, rest, cc * kTile, n0 + 32, kTile);
    }
  }
  for (; c * kTile < T; ++c)
    blocks<K, NB>(k, xa + c * kTile * a_stride, a_stride, steps, p, c * kTile, n0,
                  std::min<int64_t>(kTile, T - c * kTile));
}

// Blocks [b_begin, b_end) of a matrix of N weight rows of row_bytes bytes in panels at `panels`
// against T token rows (steps = row_bytes / 64).
template <class K>
void run(const K& k, const uint8_t* xa, int64_t a_stride, int64_t T, const uint8_t* panels, int64_t row_bytes,
         int64_t N, int64_t b_begin, int64_t b_end) {
  const int64_t blocks_n = (N + kTile - 1) / kTile, steps = row_bytes / 64;
  for (int64_t b = b_begin; b < b_end;) {
    const int64_t p = b / 4 * 4, nb = std::min<int64_t>(4, blocks_n - p), e = std::min(p + nb, b_end);
    const Panel src{panels + p * kTile * row_bytes + (b - p) * kTileBytes, nb * kTileBytes};
    switch (e - b) {
      case 4:
        panel<K, 4>(k, xa, a_stride, T, steps, src, b * kTile);
        break;
      case 3:
        panel<K, 3>(k, xa, a_stride, T, steps, src, b * kTile);
        break;
      case 2:
        panel<K, 2>(k, xa, a_stride, T, steps, src, b * kTile);
        break;
      default:
        panel<K, 1>(k, xa, a_stride, T, steps, src, b * kTile);
    }
    b = e;
  }
}

}  // namespace amx_panel
}  // namespace updraft::ops::cpu
