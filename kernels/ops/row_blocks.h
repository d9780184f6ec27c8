// Internal: how the f32-FMA GEMV kernel walks its weight rows (gemv_bf16fma_avx512.cc), and how
// far ahead the panel kernels fetch their stream (gemv_bf16dot_avx512.cc, the int8 one). for_row_blocks<R> calls f(r,
// ahead, n, pf) for blocks of R rows starting at n, then single rows, over [n0, n1): r is std::integral_constant<int, R
// or 1> and ahead std::bool_constant (whether pf points into the caller's next block, to be fetched into L2, or at the
// rows right after this block, into L1), so f can instantiate its block template. pack_panels4 lays out the 4-row
// panels the int8 vector kernel streams (linear_int8_vnni_avx512.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace updraft::ops::cpu {

// How far ahead of its step a panel kernel fetches its own stream into L2, from 4 rows of x on (a
// standalone test on Zen 4 at five rows of x: 1.2-1.5x faster than the hardware's prefetch alone;
// one row: no change). The products of a step hold the out-of-order window long enough for the
// hardware's prefetch to fall behind.
constexpr int64_t kPanelFarBytes = 16 << 10;

// The 4-row panels of the int8 vector kernel (vpdpbusd): w [N, K] as,
// for each block of 4 rows (the last zero-padded), for each step of kStep values (zeros past K),
// the 4 rows' kStep values one after another; Kp = K rounded up to kStep.
template <int64_t kStep, typename Elem>
void pack_panels4(const Elem* w, int64_t N, int64_t K, Elem* out) {
  const int64_t Kp = (K + kStep - 1) / kStep * kStep, Np = (N + 3) / 4 * 4;
  for (int64_t n = 0; n < Np; ++n)
    for (int64_t k = 0; k < Kp; k += kStep) {
      Elem* dst = out + (n >> 2) * 4 * Kp + k * 4 + (n & 3) * kStep;
      const int64_t valid = n < N ? std::clamp<int64_t>(K - k, 0, kStep) : 0;  // the rest is padding
      if (valid > 0)
        std::copy(w + n * K + k, w + n * K + k + valid, dst);
      std::fill(dst + valid, dst + kStep, Elem{0});
    }
}

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
