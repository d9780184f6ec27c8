// The optimiser's element loops (AdamW, the sum of squares behind gradient clipping) against
// scalar references written out here, bit for bit: the AVX-512 loops the CPU backend takes where
// the CPU has AVX-512 must round exactly as the portable ones do (and so as the CUDA kernels).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/ops.h"
#include "kernels/ops/optim.h"
#include "tests/kernels/rand_vec.h"

namespace updraft {
namespace {

using testing_kernels::rand_vec;

// Lengths that end inside an AVX-512 register, across the loops' chunks and exactly on them.
const int64_t kLengths[] = {1, 15, 17, 4099, (int64_t{1} << 16) + 9, 3 * (int64_t{1} << 14)};

TEST(OptimLoops, AdamWIsBitwiseTheScalarFormula) {
  ops::AdamWCoefficients c;
  c.decay = 0.99f;
  c.step_size = 3e-3f;
  c.bc2_sqrt = 0.3f;
  c.grad_scale = 0.37f;  // clipping folded in
  for (int64_t n : kLengths) {
    auto w = rand_vec(n, 1), g = rand_vec(n, 2), m = rand_vec(n, 3), v = rand_vec(n, 4);
    for (float& x : v)
      x = x * x;  // second moments are non-negative
    Tensor tw = Tensor::from_f32(w, {n}), tg = Tensor::from_f32(g, {n}), tm = Tensor::from_f32(m, {n}),
           tv = Tensor::from_f32(v, {n});
    ops::adamw_update(tw, tg, tm, tv, c);
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[i] * c.grad_scale;
      const float p = w[i] * c.decay;
      const float mi = c.beta1 * m[i] + c.one_minus_beta1 * gi;
      const float vi = c.beta2 * v[i] + c.one_minus_beta2 * (gi * gi);
      const float denom = std::sqrt(vi) / c.bc2_sqrt + c.eps;
      w[i] = p - c.step_size * (mi / denom);
      m[i] = mi;
      v[i] = vi;
    }
    EXPECT_EQ(tw.to_f32_vector(), w) << "n " << n;
    EXPECT_EQ(tm.to_f32_vector(), m) << "n " << n;
    EXPECT_EQ(tv.to_f32_vector(), v) << "n " << n;
  }
}

TEST(OptimLoops, SumOfSquaresIsBitwiseTheChunkedPattern) {
  for (int64_t n : kLengths) {
    const auto x = rand_vec(n, 5);
    double total = 0;
    for (int64_t b = 0; b < n; b += ops::kSumSquaresChunk) {
      const int64_t e = std::min(n, b + ops::kSumSquaresChunk);
      double acc[8] = {};
      for (int64_t i = b; i < e; ++i)
        acc[(i - b) % 8] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
      total += ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
    EXPECT_EQ(ops::sum_squares(Tensor::from_f32(x, {n})), total) << "n " << n;
  }
}

}  // namespace
}  // namespace updraft
