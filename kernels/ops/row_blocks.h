// Internal: how the GEMV kernels walk their weight rows (gemv_bf16dot_avx512.cc,
// gemv_bf16fma_avx512.cc). for_row_blocks<R> calls f(r, ahead, n, pf) for blocks of R rows
// starting at n, then single rows, over [n0, n1): r is std::integral_constant<int, R or 1> and
// ahead std::bool_constant (whether pf points into the caller's next block, to be fetched into
// L2, or at the rows right after this block, into L1), so f can instantiate its block template.
#pragma once

#include <cstdint>
#include <type_traits>

namespace updraft::ops::cpu {

template <int R, typename F>
inline void for_row_blocks(int64_t K, const uint16_t* w, int64_t n0, int64_t n1, const uint16_t* ahead, F&& f) {
  const auto pf = [&](int64_t n, int rows) {
    return reinterpret_cast<const char*>(ahead != nullptr ? ahead + (n - n0) * K : w + (n + rows) * K);
  };
  int64_t n = n0;
  for (; n + R <= n1; n += R) {
    if (ahead != nullptr)
      f(std::integral_constant<int, R>{}, std::true_type{}, n, pf(n, R));
    else
      f(std::integral_constant<int, R>{}, std::false_type{}, n, pf(n, R));
  }
  for (; n < n1; ++n) {
    if (ahead != nullptr)
      f(std::integral_constant<int, 1>{}, std::true_type{}, n, pf(n, 1));
    else
      f(std::integral_constant<int, 1>{}, std::false_type{}, n, pf(n, 1));
  }
}

}  // namespace updraft::ops::cpu
