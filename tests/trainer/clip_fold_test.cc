// Gradient clipping folded into the AdamW update (clip_scale + AdamW::step(lr, scale)) is bit for
// bit clip_grad_norm followed by AdamW::step(lr), and leaves the gradients as they were.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "trainer/adamw.h"

namespace updraft::train {
namespace {

struct TwoParams {
  Param a = make_param("a.weight", {37, 19}), b = make_param("b.bias", {23}, false);
  ParamSet set;
  TwoParams() {
    set.add(a);
    set.add(b);
  }
};

void fill(Tensor& t, std::mt19937& rng, float scale) {
  std::normal_distribution<float> nd(0.f, scale);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = nd(rng);
}

std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<uint32_t> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.data<float>(), out.size() * sizeof(float));
  return out;
}

TEST(ClipFold, EqualsClippingTheGradientsFirst) {
  for (double max_norm : {0.5, 1e6}) {  // clipping, and a norm within the bound (scale 1)
    TwoParams x, y;
    std::mt19937 rng(3);
    fill(x.a.value, rng, 1.f);
    fill(x.b.value, rng, 1.f);
    y.a.value.copy_from(x.a.value);
    y.b.value.copy_from(x.b.value);
    AdamW ox(x.set, AdamWOptions{}), oy(y.set, AdamWOptions{});
    for (int step = 0; step < 3; ++step) {
      fill(x.a.grad, rng, 2.f);
      fill(x.b.grad, rng, 2.f);
      y.a.grad.copy_from(x.a.grad);
      y.b.grad.copy_from(x.b.grad);
      const std::vector<uint32_t> grads_before = bits(y.a.grad);
      const double nx = clip_grad_norm(x.set, max_norm);
      double ny = 0;
      const float scale = clip_scale(y.set, max_norm, &ny);
      EXPECT_EQ(nx, ny);
      EXPECT_EQ(scale == 1.f, max_norm > 1e5);
      ox.step(1e-2);
      oy.step(1e-2, scale);
      EXPECT_EQ(bits(x.a.value), bits(y.a.value)) << "max_norm " << max_norm << " step " << step;
      EXPECT_EQ(bits(x.b.value), bits(y.b.value)) << "max_norm " << max_norm << " step " << step;
      EXPECT_EQ(bits(ox.exp_avg(0)), bits(oy.exp_avg(0)));
      EXPECT_EQ(bits(ox.exp_avg_sq(1)), bits(oy.exp_avg_sq(1)));
      EXPECT_EQ(bits(y.a.grad), grads_before) << "the folded path leaves the gradients alone";
    }
  }
  TwoParams z;
  AdamW oz(z.set, AdamWOptions{});
  EXPECT_THROW(oz.step(1e-2, 0.f), CheckFailure);
  EXPECT_THROW(oz.step(1e-2, std::nanf("")), CheckFailure);
  double n = 0;
  EXPECT_THROW(clip_scale(z.set, 0.0, &n), CheckFailure);
}

}  // namespace
}  // namespace updraft::train
