// Block-wide radix selection over 64-bit rank keys (see rank_key in common.cuh), shared by
// top-k and by sampling's top-k / top-p filters. Integer weights and counts keep it exact and
// deterministic (no float atomics whose order could change the result between runs).
#pragma once

#include "kernels/cuda/common.cuh"

namespace updraft::cuda {

struct SelectShared {
  u64 weight[256];
  unsigned count[256];
  u64 prefix;
  u64 above;
};

// Among the candidates i in [0, n) for which item(i, key, weight) returns true, finds the
// smallest key tau such that W(tau), the total weight of candidates with a key greater than
// tau, is below `target`. W falls as keys rise, so the candidates with key >= tau are exactly
// those with W(key) < target: with unit weights and target k they are the k best; with
// probability weights they are the nucleus up to and including the token that crosses the
// target mass. Digits are resolved 8 bits at a time from the top (8 passes over the data).
// Requires target >= 1 and at least one candidate; every thread of the block must call it.
template <typename Item>
__device__ u64 block_select(int64_t n, u64 target, Item item, SelectShared& sh) {
  u64 prefix = 0, above = 0;  // resolved high digits; weight of candidates above that prefix
  for (int shift = 56; shift >= 0; shift -= 8) {
    const u64 hi_mask = shift == 56 ? 0ull : ~0ull << (shift + 8);
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
      sh.weight[b] = 0;
      sh.count[b] = 0;
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      u64 key, w;
      if (!item(i, key, w) || (key & hi_mask) != prefix)
        continue;
      const int b = static_cast<int>((key >> shift) & 0xffu);
      atomicAdd(&sh.count[b], 1u);
      if (w != 0)
        atomicAdd(&sh.weight[b], w);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // The best candidate of bin b has W = above + weight of bins > b; keep the lowest
      // non-empty bin for which that is still below the target.
      u64 w_above = above, chosen_above = above;
      int chosen = 0;
      for (int b = 255; b >= 0 && w_above < target; --b) {
        if (sh.count[b] != 0) {
          chosen = b;
          chosen_above = w_above;
        }
        w_above += sh.weight[b];
      }
      sh.prefix = prefix | (static_cast<u64>(chosen) << shift);
      sh.above = chosen_above;
    }
    __syncthreads();
    prefix = sh.prefix;  // read before the next pass's first barrier; thread 0 rewrites after it
    above = sh.above;
  }
  return prefix;
}

}  // namespace updraft::cuda
