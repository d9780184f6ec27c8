// bf16 / f16 conversions against values worked out by hand from the IEEE rules.
#include "kernels/core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/ops/gemv_cpu.h"

namespace updraft {
namespace {

struct Case16 {
  float in;
  uint16_t want;
};

TEST(Bf16, RoundToNearestEvenEdgeCases) {
  const Case16 cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3f80},
      {-2.0f, 0xc000},
      {bits_f32(0x3f808000), 0x3f80},  // exactly half-way, lsb 0 -> stays (ties to even)
      {bits_f32(0x3f818000), 0x3f82},  // half-way, lsb 1 -> rounds up to even
      {bits_f32(0x3f808001), 0x3f81},  // just above half-way -> up
      {bits_f32(0x3f807fff), 0x3f80},  // just below half-way -> down
      {bits_f32(0x7f7fffff), 0x7f80},  // FLT_MAX rounds to +inf
      {std::numeric_limits<float>::infinity(), 0x7f80},
      {-std::numeric_limits<float>::infinity(), 0xff80},
      {bits_f32(0x00000001), 0x0000},  // smallest f32 subnormal -> 0
      {bits_f32(0x00010000), 0x0001},  // smallest bf16 subnormal is exact
  };
  for (const auto& c : cases)
    EXPECT_EQ(f32_to_bf16(c.in), c.want) << "input bits " << std::hex << f32_bits(c.in);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(bits_f32(0x7f800001)))));  // signalling NaN stays NaN
}

// The FMA kernels' activation layout (ops/gemv_cpu.h): per 32-k step, each row's 16 even then 16
// odd elements rounded to bf16, zeros past K. With AVX2 the whole steps are split 8 at a time;
// every value's bits (ties, carries into inf, NaNs, subnormals) must be f32_to_bf16's.
TEST(Bf16, SplitRowsForTheFmaKernelsRoundLikeTheScalarConversion) {
  const int64_t T = 3, K = 81, Kp = 96;
  const uint32_t edge[] = {0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, 0x7f7fffff, 0xff7fffff, 0x7f800000,
                           0xff800000, 0x7fc00000, 0x7f800001, 0xffbfffff, 0x00000001, 0x00010000, 0x80008000};
  std::mt19937 rng(3);
  std::vector<float> x(static_cast<size_t>(T * K));
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = i % 3 == 0 ? bits_f32(edge[(i / 3) % std::size(edge)]) : bits_f32(static_cast<uint32_t>(rng()));
  std::vector<float> want(static_cast<size_t>(T * Kp), 0.f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k)
      want[static_cast<size_t>(k / 32 * 32 * T + t * 32 + (k % 32) / 2 + (k % 2) * 16)] =
          bf16_to_f32(f32_to_bf16(x[static_cast<size_t>(t * K + k)]));
  std::vector<float> got(want.size(), 1.f);
  ops::cpu::split_rows_bf16fma(x.data(), T, K, Kp, got.data());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * want.size()), 0);
  if (!ops::cpu::cpu_has_avx2_fma())
    GTEST_SKIP() << "no AVX2 + FMA: the whole steps ran the scalar loop above";
  std::vector<float> steps(want.size(), 1.f);
  ops::cpu::split_steps_bf16fma_avx2(x.data(), T, K, 64, steps.data());
  EXPECT_EQ(std::memcmp(steps.data(), want.data(), sizeof(float) * 64 * T), 0);
}

TEST(F16, RoundToNearestEvenEdgeCases) {
  const Case16 cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {65504.0f, 0x7bff},  // largest f16
      {65519.0f, 0x7bff},  // below the half-way point to 65536 -> max
      {65520.0f, 0x7c00},  // half-way, ties to even (inf)
      {1e6f, 0x7c00},
      {std::ldexp(1.0f, -14), 0x0400},                          // smallest normal
      {std::ldexp(1.0f, -24), 0x0001},                          // smallest subnormal
      {std::ldexp(1.0f, -25), 0x0000},                          // half of it: ties to even -> 0
      {std::ldexp(1.5f, -25), 0x0001},                          // above half -> 1 ulp
      {std::ldexp(3.0f, -25), 0x0002},                          // 1.5 ulp: tie -> even (2)
      {std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25), 0x0400},  // rounds up into the normals
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},                   // half-way above 1, lsb 0 -> down
      {1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02},               // half-way, lsb 1 -> up
      {-std::numeric_limits<float>::infinity(), 0xfc00},
  };
  for (const auto& c : cases)
    EXPECT_EQ(f32_to_f16(c.in), c.want) << "input " << c.in;
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(F16, EveryHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f))
      continue;
    ASSERT_EQ(f32_to_f16(f), h) << "f16 bits " << std::hex << h;
  }
}

TEST(Bf16, EveryBf16RoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f))
      continue;
    ASSERT_EQ(f32_to_bf16(f), h) << "bf16 bits " << std::hex << h;
  }
}

TEST(F16, SubnormalsDecodeToTheirValue) {
  for (uint16_t m = 1; m < 0x400; ++m)
    EXPECT_EQ(f16_to_f32(m), std::ldexp(static_cast<float>(m), -24));
}

}  // namespace
}  // namespace updraft
