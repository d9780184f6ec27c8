// The optimiser layer: AdamW against a double-precision reference of its formulas, decoupled
// weight decay only where enabled, global-norm clipping (exactly to max_norm; non-finite norms
// reported, gradients untouched; the norm independent of the thread count), the learning-rate
// schedules at their defining points and convergence on least squares. The CUDA optimiser ops are
// compared to the CPU ones when a GPU is present. Training checkpoints: train_checkpoint_test.cc.
#include "kernels/ops/optim.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "kernels/core/device.h"
#include "kernels/io/safetensors.h"
#include "kernels/io/sha256.h"
#include "tests/trainer/optim_fixture.h"
#include "trainer/adamw.h"
#include "trainer/params.h"
#include "trainer/train_checkpoint.h"

namespace updraft::train {
namespace {

using namespace testing_optim;

// ---- ParamSet ---------------------------------------------------------------------------------

TEST(ParamSet, RegistersFindsAndCounts) {
  Net net;
  net.add("a.weight", {2, 3});
  net.add("a.bias", {3}, false);
  EXPECT_EQ(net.set.size(), 2u);
  EXPECT_EQ(net.set.numel(), 9);
  ASSERT_NE(net.set.find("a.bias"), nullptr);
  EXPECT_FALSE(net.set.find("a.bias")->weight_decay);
  EXPECT_EQ(net.set.find("a.missing"), nullptr);
  EXPECT_EQ(net.set[0].name, "a.weight");

  Param dup = make_param("a.weight", {1});
  EXPECT_THROW(net.set.add(dup), CheckFailure);
  Param bad_grad = make_param("c", {2});
  bad_grad.grad = Tensor::zeros({3}, DType::F32);
  EXPECT_THROW(net.set.add(bad_grad), CheckFailure);
  Param bf16 = make_param("d", {2});
  bf16.value = Tensor::zeros({2}, DType::BF16);
  EXPECT_THROW(net.set.add(bf16), CheckFailure);
  Param unnamed = make_param("", {2});
  EXPECT_THROW(net.set.add(unnamed), CheckFailure);
}

TEST(ParamSet, ZeroGradAndNorm) {
  Net net;
  net.add("a", {2}).grad.data<float>()[0] = 3.f;
  net.add("b", {1}).grad.data<float>()[0] = 4.f;
  EXPECT_EQ(net.set.grad_norm(), 5.0);
  net.set.zero_grad();
  EXPECT_EQ(net.set.grad_norm(), 0.0);
}

TEST(ParamSet, Bf16CopiesAreRoundedAndIndependent) {
  Net net;
  Param& a = net.add("a", {3});
  const float vals[3] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f};  // a tie to even down, a tie up, exact
  std::memcpy(a.value.data<float>(), vals, sizeof vals);
  const auto copies = net.set.copy_values(DType::BF16);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].first, "a");
  EXPECT_EQ(copies[0].second.dtype(), DType::BF16);
  EXPECT_EQ(copies[0].second.to_f32_vector(), (std::vector<float>{1.0f, 1.0f + 4.0f / 256, -2.5f}));
  const auto f32 = net.set.copy_values(DType::F32);
  a.value.data<float>()[2] = 7.f;
  EXPECT_EQ(f32[0].second.to_f32_vector()[2], -2.5f) << "an f32 copy must not alias the training weights";
  EXPECT_EQ(net.set.values()[0].second.raw(), a.value.raw()) << "values() hands out the tensors themselves";
}

// ---- AdamW ------------------------------------------------------------------------------------

// torch.optim.AdamW's update, in double.
struct RefAdamW {
  std::vector<double> p, m, v;
  explicit RefAdamW(const Tensor& init) {
    for (float x : init.to_f32_vector())
      p.push_back(x);
    m.assign(p.size(), 0.0);
    v.assign(p.size(), 0.0);
  }
  void step(const std::vector<float>& g, double lr, const AdamWOptions& o, bool decay, int64_t t) {
    const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(t));
    const double bc2 = 1 - std::pow(o.beta2, static_cast<double>(t));
    for (size_t i = 0; i < p.size(); ++i) {
      if (decay)
        p[i] *= 1 - lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + o.eps);
    }
  }
};

void expect_near_ref(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  const std::vector<float> g = got.to_f32_vector();
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i], want[i], 1e-6 + 2e-6 * std::abs(want[i])) << what << "[" << i << "]";
}

TEST(AdamW, MatchesDoubleReference) {
  Net net;
  net.add("w", {2, 3});
  net.add("b", {3}, false);
  std::vector<RefAdamW> ref;
  for (size_t i = 0; i < 2; ++i) {
    fill_uniform(net.set[i].value, static_cast<uint32_t>(i + 1));
    ref.emplace_back(net.set[i].value);
  }
  const AdamWOptions o{.beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.3};
  AdamW opt(net.set, o);
  const double lrs[] = {0.01, 0.05, 0.02, 0.1, 0.03};
  for (int t = 1; t <= 5; ++t) {
    fill_uniform(net.set[0].grad, 100 + t, -3.f, 3.f);
    fill_uniform(net.set[1].grad, 200 + t, -0.01f, 0.01f);  // small gradients: eps matters
    opt.step(lrs[t - 1]);
    EXPECT_EQ(opt.steps(), t);
    for (size_t i = 0; i < 2; ++i) {
      ref[i].step(net.set[i].grad.to_f32_vector(), lrs[t - 1], o, net.set[i].weight_decay, t);
      const std::string at = net.set[i].name + " after step " + std::to_string(t);
      expect_near_ref(net.set[i].value, ref[i].p, at);
      expect_near_ref(opt.exp_avg(i), ref[i].m, "m of " + at);
      expect_near_ref(opt.exp_avg_sq(i), ref[i].v, "v of " + at);
    }
  }
}

TEST(AdamW, WeightDecayOnlyWhereEnabled) {
  Net net;
  Param& w = net.add("w", {4});
  Param& norm = net.add("norm.weight", {4}, false);
  fill_uniform(w.value, 3);
  fill_uniform(norm.value, 4);
  const std::vector<float> w0 = w.value.to_f32_vector(), n0 = norm.value.to_f32_vector();
  AdamW opt(net.set, {.weight_decay = 0.5});
  opt.step(0.1);  // zero gradients: only the decay moves anything
  const std::vector<float> w1 = w.value.to_f32_vector();
  for (size_t i = 0; i < w0.size(); ++i)
    EXPECT_EQ(w1[i], w0[i] * static_cast<float>(1 - 0.1 * 0.5));
  EXPECT_EQ(norm.value.to_f32_vector(), n0);
}

TEST(AdamW, BadOptionsAreErrors) {
  Net net;
  net.add("w", {1});
  for (const AdamWOptions& o : {AdamWOptions{.beta1 = 1.0}, AdamWOptions{.beta2 = -0.1}, AdamWOptions{.eps = 0},
                                AdamWOptions{.weight_decay = -1}, AdamWOptions{.beta1 = std::nan("")}})
    EXPECT_THROW(AdamW(net.set, o), Error);
  AdamW opt(net.set, AdamWOptions{});
  EXPECT_THROW(opt.step(-1), CheckFailure);
}

TEST(AdamW, MinimisesLeastSquares) {
  // From a random start to the known solution, with warmup, cosine decay and clipping.
  auto net = make_regression_net(5);
  const Data d = make_data();
  // No weight decay: it would pull the minimum away from (W*, b*).
  AdamW opt(net->set, {.beta2 = 0.99, .weight_decay = 0});
  const LrScheduleOptions so{.peak_lr = 0.1, .total_steps = 1500, .warmup_steps = 20, .min_lr_ratio = 0.001};
  const LrSchedule sched(so);
  const double initial = accumulate_grads(*net, d);
  double loss = initial;
  for (int64_t s = 0; s < so.total_steps; ++s) {
    net->set.zero_grad();
    loss = accumulate_grads(*net, d);
    ASSERT_TRUE(std::isfinite(clip_grad_norm(net->set, 10.0)));
    opt.step(sched.lr(s));
  }
  EXPECT_LT(loss, initial * 1e-6) << "initial " << initial;
  const std::vector<float> w = net->owned[0]->value.to_f32_vector(), b = net->owned[1]->value.to_f32_vector();
  for (size_t i = 0; i < w.size(); ++i)
    EXPECT_NEAR(w[i], d.w_star[i], 1e-3) << "W[" << i << "]";
  for (size_t i = 0; i < b.size(); ++i)
    EXPECT_NEAR(b[i], d.b_star[i], 1e-3) << "b[" << i << "]";
}

// ---- clipping ---------------------------------------------------------------------------------

TEST(ClipGradNorm, ScalesToExactlyMaxNorm) {
  Net net;
  Param& a = net.add("a", {5, 7});
  Param& b = net.add("b", {3});
  fill_uniform(a.grad, 21, -4.f, 4.f);
  fill_uniform(b.grad, 22, -4.f, 4.f);
  double want = 0;
  for (const Param* p : net.set)
    for (float g : p->grad.to_f32_vector())
      want += static_cast<double>(g) * g;
  want = std::sqrt(want);
  const std::vector<float> a0 = a.grad.to_f32_vector();
  const double norm = clip_grad_norm(net.set, 0.5);
  EXPECT_NEAR(norm, want, 1e-12 * want);
  EXPECT_NEAR(net.set.grad_norm(), 0.5, 0.5 * 1e-6);
  const std::vector<float> a1 = a.grad.to_f32_vector();
  for (size_t i = 0; i < a0.size(); ++i)
    EXPECT_EQ(a1[i], a0[i] * static_cast<float>(0.5 / norm)) << "direction kept, one rounding";

  // Below the threshold nothing changes.
  const std::vector<uint32_t> before = bits(a.grad);
  EXPECT_NEAR(clip_grad_norm(net.set, 1.0), 0.5, 0.5 * 1e-6);
  EXPECT_EQ(bits(a.grad), before);
  EXPECT_THROW(clip_grad_norm(net.set, 0.0), CheckFailure);
}

TEST(ClipGradNorm, NonFiniteNormIsReportedAndGradsUntouched) {
  Net net;
  Param& a = net.add("a", {4});
  net.add("b", {2});
  fill_uniform(a.grad, 31);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    a.grad.data<float>()[2] = bad;
    const std::vector<uint32_t> before = bits(a.grad);
    const double norm = clip_grad_norm(net.set, 1.0);
    EXPECT_FALSE(std::isfinite(norm)) << bad;
    EXPECT_EQ(std::isnan(norm), std::isnan(bad));
    EXPECT_EQ(bits(a.grad), before) << "a non-finite norm must not scale the gradients";
  }
  // Squares that overflow f32 are fine: the sum is in double.
  fill_uniform(a.grad, 32, 1e30f, 2e30f);
  const double big = clip_grad_norm(net.set, 1.0);
  EXPECT_TRUE(std::isfinite(big));
  EXPECT_GT(big, 1e30);
  EXPECT_NEAR(net.set.grad_norm(), 1.0, 1e-6);
}

TEST(ClipGradNorm, NormDoesNotDependOnThreadCount) {
  Net net;
  Param& big = net.add("big", {3 * ops::kSumSquaresChunk + 17});
  fill_uniform(big.grad, 41);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = net.set.grad_norm();
  omp_set_num_threads(4);
  const double four = net.set.grad_norm();
  omp_set_num_threads(threads);
  EXPECT_EQ(one, four);
  double want = 0;
  for (float g : big.grad.to_f32_vector())
    want += static_cast<double>(g) * g;
  EXPECT_NEAR(one, std::sqrt(want), 1e-12 * std::sqrt(want));
}

// ---- schedules --------------------------------------------------------------------------------

TEST(LrSchedule, CosineWithWarmup) {
  const LrSchedule s(
      {.decay = LrDecay::Cosine, .peak_lr = 1e-3, .total_steps = 110, .warmup_steps = 10, .min_lr_ratio = 0.1});
  EXPECT_DOUBLE_EQ(s.lr(0), 1e-4);  // first update: peak / warmup
  EXPECT_DOUBLE_EQ(s.lr(4), 5e-4);
  EXPECT_EQ(s.lr(9), 1e-3);  // warmup ends at the peak
  EXPECT_EQ(s.lr(10), 1e-3);
  EXPECT_NEAR(s.lr(60), 0.55e-3, 1e-15);  // halfway down: the mean of peak and min
  EXPECT_EQ(s.lr(110), 1e-4);             // ends exactly at min
  EXPECT_EQ(s.lr(1000), 1e-4);
  EXPECT_GT(s.lr(109), 1e-4);
  for (int64_t i = 10; i < 110; ++i)
    EXPECT_GE(s.lr(i), s.lr(i + 1)) << i;
}

TEST(LrSchedule, LinearAndConstant) {
  LrScheduleOptions o{.decay = LrDecay::Linear, .peak_lr = 2.0, .total_steps = 100, .warmup_ratio = 0.2};  // 20 steps
  const LrSchedule lin(o);
  EXPECT_EQ(lin.warmup_steps(), 20);
  EXPECT_DOUBLE_EQ(lin.lr(0), 0.1);
  EXPECT_EQ(lin.lr(19), 2.0);
  EXPECT_EQ(lin.lr(20), 2.0);
  EXPECT_DOUBLE_EQ(lin.lr(60), 1.0);
  EXPECT_EQ(lin.lr(100), 0.0);

  o.warmup_ratio = 0.051;  // ceil(5.1) = 6
  EXPECT_EQ(LrSchedule(o).warmup_steps(), 6);

  const LrSchedule con({.decay = LrDecay::Constant, .peak_lr = 0.5, .warmup_steps = 4});  // no total_steps needed
  EXPECT_DOUBLE_EQ(con.lr(1), 0.25);
  EXPECT_EQ(con.lr(3), 0.5);
  EXPECT_EQ(con.lr(1000000), 0.5);
}

TEST(LrSchedule, BadOptionsAreErrors) {
  for (const LrScheduleOptions& o :
       std::vector<LrScheduleOptions>{{.peak_lr = 0, .total_steps = 100},
                                      {.peak_lr = std::numeric_limits<double>::infinity(), .total_steps = 100},
                                      {.total_steps = 0},  // cosine needs a length
                                      {.total_steps = 100, .warmup_steps = 101},
                                      {.total_steps = 100, .warmup_steps = 5, .warmup_ratio = 0.1},  // both
                                      {.total_steps = 100, .warmup_ratio = 1.5},
                                      {.total_steps = 100, .min_lr_ratio = 2}})
    EXPECT_THROW(LrSchedule{o}, Error);
  EXPECT_EQ(lr_decay_from_name("linear"), LrDecay::Linear);
  EXPECT_THROW(lr_decay_from_name("exponential"), Error);
}

// ---- CUDA parity ----------------------------------------------------------------------------------

// AdamW and clipping on CUDA parameters against the same on CPU ones. The update is
// bitwise equal (both backends round each operation once); norms agree to double rounding.
TEST(OptimCudaParity, AdamWAndClippingMatchTheCpu) {
  if (!cuda_available())
    GTEST_SKIP() << "no usable CUDA device on this machine";
  const int64_t n = 2 * ops::kSumSquaresChunk + 1001;
  Param cpu = make_param("w", {n}), gpu = make_param("w", {n}, true, Device::CUDA);
  fill_uniform(cpu.value, 51);
  gpu.value.copy_from(cpu.value);
  ParamSet cpu_set, gpu_set;
  cpu_set.add(cpu);
  gpu_set.add(gpu);
  AdamW cpu_opt(cpu_set, {.weight_decay = 0.1}), gpu_opt(gpu_set, {.weight_decay = 0.1});
  for (int t = 1; t <= 3; ++t) {
    fill_uniform(cpu.grad, 60 + t, -2.f, 2.f);
    cpu.grad.data<float>()[t] = 1e-30f;  // tiny: eps and underflow matter
    gpu.grad.copy_from(cpu.grad);
    const double cpu_norm = clip_grad_norm(cpu_set, 100.0), gpu_norm = clip_grad_norm(gpu_set, 100.0);
    EXPECT_NEAR(gpu_norm, cpu_norm, 1e-12 * cpu_norm);
    EXPECT_EQ(gpu_set.grad_norm(), gpu_set.grad_norm()) << "deterministic";
    const std::vector<float> cg = cpu.grad.to_f32_vector(), gg = gpu.grad.to_f32_vector();
    for (size_t i = 0; i < cg.size(); i += 997)
      EXPECT_NEAR(gg[i], cg[i], 1e-6 * std::abs(cg[i])) << i;
    gpu.grad.copy_from(cpu.grad);              // the same clipped gradients, so that updates compare bitwise
    cpu_opt.step(0.01, t == 3 ? 0.75f : 1.f);  // the last step with a clipping scale folded in
    gpu_opt.step(0.01, t == 3 ? 0.75f : 1.f);
    EXPECT_EQ(bits(gpu.value), bits(cpu.value)) << "step " << t;
    EXPECT_EQ(bits(gpu_opt.exp_avg(0)), bits(cpu_opt.exp_avg(0)));
    EXPECT_EQ(bits(gpu_opt.exp_avg_sq(0)), bits(cpu_opt.exp_avg_sq(0)));
  }
}

}  // namespace
}  // namespace updraft::train
