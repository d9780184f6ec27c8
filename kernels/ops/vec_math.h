// Internal: sixteen-float vectors (GCC vector extensions: one zmm register on AVX-512, four xmm
// ones otherwise) and an exp over them, for the CPU kernels' softmax and SiLU. Every helper is
// always inlined, so no v16f crosses a call boundary: -Wpsabi is moot, and switched off for the
// including file.
#pragma once

#include <cstdint>
#include <cstring>

#pragma GCC diagnostic ignored "-Wpsabi"

namespace updraft::ops::cpu {

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

[[gnu::always_inline]] inline v16f load16(const float* p) {
  v16f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The first n (< 16) floats of p, the rest `fill`.
[[gnu::always_inline]] inline v16f load16_partial(const float* p, int64_t n, float fill) {
  v16f v = fill - v16f{};
  std::memcpy(&v, p, sizeof(float) * static_cast<size_t>(n));
  return v;
}

// exp(x) to within 2 ulp over [-87.3, 88.3]; below that range the smallest normal (as good as
// 0 for a softmax or a SiLU), above it +inf. Range reduction x = n ln2 + r,
// |r| <= ln2 / 2, n rounded to nearest by the 1.5 * 2^23 trick, then a degree-6 polynomial
// (Taylor coefficients) and 2^n built in the exponent bits.
[[gnu::always_inline]] inline v16f exp16(v16f x) {
  const v16f lo = -87.3f - v16f{}, hi = 88.3f - v16f{};
  x = x < lo ? lo : x;
  const v16i over = x > hi;
  x = x > hi ? hi : x;
  const v16f magic = 12582912.f - v16f{};  // 1.5 * 2^23
  const v16f n = (x * 1.44269504088896341f + magic) - magic;
  const v16f r = (x - n * 0.693359375f) + n * 2.12194440e-4f;  // ln2 split in two for exactness
  v16f p = (1.f / 720) - v16f{};
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const v16i bits = (__builtin_convertvector(n, v16i) + 127) << 23;
  v16f scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const v16f inf = __builtin_inff() - v16f{};
  const v16f y = p * scale;
  return over ? inf : y;
}

}  // namespace updraft::ops::cpu
