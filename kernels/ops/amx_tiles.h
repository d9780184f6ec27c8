// Helpers shared by the AMX kernels (gemv_amx.cc, gemv_amx_panels.cc, gemv_amx_i8.cc). Only for files compiled with
// -mamx-tile; always inlined (the tile numbers are instruction immediates).
#pragma once

#include <immintrin.h>

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

}  // namespace updraft::ops::cpu
