// The optimiser layer: AdamW against a double-precision reference of its formulas, decoupled
// weight decay only where enabled, global-norm clipping (exactly to max_norm; non-finite norms
// reported, gradients untouched; the norm independent of the thread count), the learning-rate
// schedules at their defining points, convergence on least squares, and training checkpoints:
// bit-identical resume, the documented file format, damaged checkpoints rejected with an Error
// naming the file and tensor while leaving the loaded-into state untouched, and a crash at every
// stage of a save leaving the old or the new checkpoint. The CUDA optimiser ops are compared to
// the CPU ones when a GPU is present.
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
#include "trainer/adamw.h"
#include "trainer/params.h"
#include "trainer/train_checkpoint.h"

namespace updraft::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- helpers ------------------------------------------------------------------------------------

void fill_uniform(Tensor t, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = u(rng);
}

std::vector<uint32_t> bits(const Tensor& t) {
  const Tensor c = t.to(Device::CPU);
  std::vector<uint32_t> out(static_cast<size_t>(c.numel()));
  std::memcpy(out.data(), c.raw(), c.nbytes());
  return out;
}

// A model's worth of parameters with stable addresses.
struct Net {
  std::vector<std::unique_ptr<Param>> owned;
  ParamSet set;

  Param& add(const std::string& name, const Shape& shape, bool weight_decay = true) {
    owned.push_back(std::make_unique<Param>(make_param(name, shape, weight_decay)));
    set.add(*owned.back());
    return *owned.back();
  }
};

// Least squares y = x·W^T + b on fixed data: W [4, 3] (weight decay), b [4] (none).
constexpr int64_t kRows = 8, kIn = 3, kOut = 4;

std::unique_ptr<Net> make_regression_net(uint32_t seed) {
  auto net = std::make_unique<Net>();
  fill_uniform(net->add("layers.0.proj.weight", {kOut, kIn}).value, seed);
  fill_uniform(net->add("layers.0.proj.bias", {kOut}, false).value, seed + 1);
  return net;
}

// Inputs x and targets y = x·W*^T + b* of a known solution (W*, b*), which least squares recovers.
struct Data {
  std::vector<double> x, y, w_star, b_star;  // [kRows, kIn], [kRows, kOut], [kOut, kIn], [kOut]
};

Data make_data() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-2, 2);
  Data d;
  for (auto [v, n] : {std::pair{&d.x, kRows * kIn}, {&d.w_star, kOut * kIn}, {&d.b_star, kOut}})
    for (int64_t i = 0; i < n; ++i)
      v->push_back(u(rng));
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t o = 0; o < kOut; ++o) {
      double t = d.b_star[o];
      for (int64_t i = 0; i < kIn; ++i)
        t += d.w_star[o * kIn + i] * d.x[r * kIn + i];
      d.y.push_back(t);
    }
  return d;
}

// Adds d(0.5/N Σ (x·W^T + b - y)²) to the grads; returns the loss.
double accumulate_grads(Net& net, const Data& d) {
  Param& w = *net.owned[0];
  Param& b = *net.owned[1];
  const float* wv = w.value.data<float>();
  const float* bv = b.value.data<float>();
  std::vector<double> dw(kOut * kIn, 0.0), db(kOut, 0.0);
  double loss = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t o = 0; o < kOut; ++o) {
      double pred = bv[o];
      for (int64_t i = 0; i < kIn; ++i)
        pred += static_cast<double>(wv[o * kIn + i]) * d.x[r * kIn + i];
      const double err = pred - d.y[r * kOut + o];
      loss += 0.5 * err * err / kRows;
      db[o] += err / kRows;
      for (int64_t i = 0; i < kIn; ++i)
        dw[o * kIn + i] += err * d.x[r * kIn + i] / kRows;
    }
  }
  for (int64_t i = 0; i < kOut * kIn; ++i)
    w.grad.data<float>()[i] += static_cast<float>(dw[i]);
  for (int64_t o = 0; o < kOut; ++o)
    b.grad.data<float>()[o] += static_cast<float>(db[o]);
  return loss;
}

LrScheduleOptions regression_schedule() {
  return {.decay = LrDecay::Cosine, .peak_lr = 0.05, .total_steps = 40, .warmup_steps = 4, .min_lr_ratio = 0.1};
}

AdamWOptions regression_adamw() {
  return {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
}

// Steps [from, to) of the training loop every trainer runs: zero, backward, clip, step.
void train(Net& net, AdamW& opt, const LrSchedule& sched, int64_t from, int64_t to) {
  const Data d = make_data();
  for (int64_t s = from; s < to; ++s) {
    net.set.zero_grad();
    accumulate_grads(net, d);
    if (std::isfinite(clip_grad_norm(net.set, 1.0)))
      opt.step(sched.lr(s));
  }
}

// Every bit of the trainable state.
struct Snapshot {
  std::vector<std::vector<uint32_t>> values, m, v;
  int64_t steps = 0;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const Net& net, const AdamW& opt) {
  Snapshot s;
  for (size_t i = 0; i < net.set.size(); ++i) {
    s.values.push_back(bits(net.set[i].value));
    s.m.push_back(bits(opt.exp_avg(i)));
    s.v.push_back(bits(opt.exp_avg_sq(i)));
  }
  s.steps = opt.steps();
  return s;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

// After editing a tensor file on purpose: record its size and sha256 again and recompute
// state_sha256 as train_checkpoint.h describes, so that only the structural checks can object.
void reseal(const fs::path& dir, const std::string& file) {
  json doc = json::parse(read_text(dir / "trainer_state.json"));
  doc["files"][file] = {{"bytes", fs::file_size(dir / file)}, {"sha256", sha256_file_hex((dir / file).string())}};
  doc.erase("state_sha256");
  doc["state_sha256"] = sha256_hex(doc.dump());
  write_text(dir / "trainer_state.json", doc.dump(2));
}

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

// ---- checkpoints --------------------------------------------------------------------------------

class TrainCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("upd_optim_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A regression net trained `steps` steps, with its optimiser.
  struct Run {
    std::unique_ptr<Net> net;
    std::unique_ptr<AdamW> opt;
  };
  Run trained(int64_t steps) {
    Run r{make_regression_net(5), nullptr};
    r.opt = std::make_unique<AdamW>(r.net->set, regression_adamw());
    train(*r.net, *r.opt, LrSchedule(regression_schedule()), 0, steps);
    return r;
  }
  TrainState state_at(int64_t step) const {
    const json user = {{"rng", {{"seed", 1234}, {"offset", 17 * step}}}, {"cursor", "shard-3:" + std::to_string(step)}};
    return {.step = step, .schedule = regression_schedule(), .user = user};
  }
  std::string ckpt() const { return (dir_ / "ckpt").string(); }
  fs::path dir_;
};

TEST_F(TrainCheckpointTest, ResumeIsBitIdentical) {
  constexpr int64_t kSteps = 30;
  Run straight = trained(kSteps);

  Run first = trained(kSteps / 2);
  save_train_checkpoint(ckpt(), first.net->set, *first.opt, state_at(kSteps / 2));

  // A fresh process's worth of objects: different initial weights, a zero optimiser.
  auto net = make_regression_net(99);
  AdamW opt(net->set, AdamWOptions{});
  const TrainState st = load_train_checkpoint(ckpt(), net->set, opt);
  EXPECT_EQ(st.step, kSteps / 2);
  EXPECT_EQ(st.user, state_at(kSteps / 2).user);
  EXPECT_EQ(st.schedule.total_steps, regression_schedule().total_steps);
  EXPECT_EQ(opt.options().beta2, regression_adamw().beta2);
  EXPECT_EQ(snapshot(*net, opt), snapshot(*first.net, *first.opt));
  train(*net, opt, LrSchedule(st.schedule), st.step, kSteps);

  EXPECT_EQ(snapshot(*net, opt), snapshot(*straight.net, *straight.opt));
  EXPECT_EQ(opt.steps(), kSteps);
}

TEST_F(TrainCheckpointTest, FilesFollowTheDocumentedFormat) {
  Run r = trained(3);
  save_train_checkpoint(ckpt() + "/", r.net->set, *r.opt, state_at(3));  // a trailing slash is fine
  const fs::path d = ckpt();
  std::set<std::string> listing;
  for (const auto& e : fs::directory_iterator(d))
    listing.insert(e.path().filename().string());
  EXPECT_EQ(listing, (std::set<std::string>{"model.safetensors", "optimizer.safetensors", "trainer_state.json"}));

  const json doc = json::parse(read_text(d / "trainer_state.json"));
  EXPECT_EQ(doc["format"], "updraft.train_checkpoint");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["step"], 3);
  EXPECT_EQ(doc["optimizer"]["type"], "adamw");
  EXPECT_EQ(doc["optimizer"]["steps"], 3);
  EXPECT_EQ(doc["optimizer"]["beta2"].get<double>(), 0.95);
  EXPECT_EQ(doc["schedule"]["decay"], "cosine");
  EXPECT_EQ(doc["schedule"]["warmup_steps"], 4);
  EXPECT_EQ(doc["params"]["count"], 2);
  EXPECT_EQ(doc["params"]["numel"], kOut * kIn + kOut);
  EXPECT_EQ(doc["user"], state_at(3).user);
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    EXPECT_EQ(doc["files"][f]["sha256"], sha256_file_hex((d / f).string())) << f;
    EXPECT_EQ(doc["files"][f]["bytes"], fs::file_size(d / f)) << f;
  }
  json body = doc;
  body.erase("state_sha256");
  EXPECT_EQ(doc["state_sha256"], sha256_hex(body.dump()));

  const SafetensorsFile model = SafetensorsFile::open((d / "model.safetensors").string());
  EXPECT_EQ(model.names(), (std::vector<std::string>{"layers.0.proj.bias", "layers.0.proj.weight"}));
  EXPECT_EQ(bits(model.get("layers.0.proj.weight")), bits(r.net->owned[0]->value));
  const SafetensorsFile moments = SafetensorsFile::open((d / "optimizer.safetensors").string());
  EXPECT_EQ(moments.names(),
            (std::vector<std::string>{"exp_avg.layers.0.proj.bias", "exp_avg.layers.0.proj.weight",
                                      "exp_avg_sq.layers.0.proj.bias", "exp_avg_sq.layers.0.proj.weight"}));
  EXPECT_EQ(bits(moments.get("exp_avg_sq.layers.0.proj.bias")), bits(r.opt->exp_avg_sq(1)));
  EXPECT_EQ(moments.info("exp_avg.layers.0.proj.weight").dtype, DType::F32);
}

TEST_F(TrainCheckpointTest, ReplacesAnOlderCheckpointAndLeavesNoLeftovers) {
  Run r = trained(2);
  save_train_checkpoint(ckpt(), r.net->set, *r.opt, state_at(2));
  train(*r.net, *r.opt, LrSchedule(regression_schedule()), 2, 6);
  for (bool exchange : {true, false}) {
    CheckpointSaveOptions o;
    o.use_rename_exchange = exchange;
    save_train_checkpoint(ckpt(), r.net->set, *r.opt, state_at(6), o);
    auto net = make_regression_net(1);
    AdamW opt(net->set, AdamWOptions{});
    EXPECT_EQ(load_train_checkpoint(ckpt(), net->set, opt).step, 6);
    EXPECT_EQ(snapshot(*net, opt), snapshot(*r.net, *r.opt));
    EXPECT_FALSE(fs::exists(ckpt() + ".tmp"));
    EXPECT_FALSE(fs::exists(ckpt() + ".prev"));
  }
}

TEST_F(TrainCheckpointTest, RefusesToReplaceADirectoryThatIsNotACheckpoint) {
  fs::create_directories(ckpt());
  write_text(fs::path(ckpt()) / "notes.txt", "keep me");
  Run r = trained(1);
  EXPECT_THROW(save_train_checkpoint(ckpt(), r.net->set, *r.opt, state_at(1)), Error);
  EXPECT_EQ(read_text(fs::path(ckpt()) / "notes.txt"), "keep me");
}

// Loading a damaged checkpoint throws an Error naming the file (and tensor) and leaves the
// target's weights and optimiser state exactly as they were.
class DamagedCheckpointTest : public TrainCheckpointTest {
 protected:
  void SetUp() override {
    TrainCheckpointTest::SetUp();
    Run r = trained(4);
    save_train_checkpoint(ckpt(), r.net->set, *r.opt, state_at(4));
    target_ = trained(2);  // a live state that a failed load must not touch
  }
  // Saves a checkpoint of a different set of parameters into ckpt().
  void save_other(const std::function<void(Net&)>& build) {
    Net other;
    build(other);
    AdamW opt(other.set, AdamWOptions{});
    fs::remove_all(ckpt());
    save_train_checkpoint(ckpt(), other.set, opt, state_at(4));
  }
  void expect_rejected(const std::vector<std::string>& needles) {
    const Snapshot before = snapshot(*target_.net, *target_.opt);
    try {
      load_train_checkpoint(ckpt(), target_.net->set, *target_.opt);
      ADD_FAILURE() << "loaded a damaged checkpoint";
    } catch (const Error& e) {
      for (const std::string& n : needles)
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << n << "' not in: " << e.what();
    }
    EXPECT_EQ(snapshot(*target_.net, *target_.opt), before) << "a failed load changed the state";
  }
  fs::path file(const std::string& name) const { return fs::path(ckpt()) / name; }
  Run target_;
};

TEST_F(DamagedCheckpointTest, IntactLoads) {
  EXPECT_EQ(load_train_checkpoint(ckpt(), target_.net->set, *target_.opt).step, 4);
}

TEST_F(DamagedCheckpointTest, TruncatedModelFile) {
  fs::resize_file(file("model.safetensors"), fs::file_size(file("model.safetensors")) - 7);
  expect_rejected({"model.safetensors", "truncated"});
}

TEST_F(DamagedCheckpointTest, FlippedByteInOptimizerFile) {
  std::string bytes = read_text(file("optimizer.safetensors"));
  bytes[bytes.size() - 5] ^= 0x10;
  write_text(file("optimizer.safetensors"), bytes);
  expect_rejected({"optimizer.safetensors", "sha256"});
}

TEST_F(DamagedCheckpointTest, EditedOrTruncatedStateFile) {
  std::string text = read_text(file("trainer_state.json"));
  const size_t at = text.find("\"step\": 4");
  ASSERT_NE(at, std::string::npos) << text;
  text[at + 8] = '5';
  write_text(file("trainer_state.json"), text);
  expect_rejected({"trainer_state.json", "state_sha256"});
  write_text(file("trainer_state.json"), text.substr(0, text.size() / 2));
  expect_rejected({"trainer_state.json", "JSON"});
}

TEST_F(DamagedCheckpointTest, MissingFiles) {
  fs::remove(file("optimizer.safetensors"));
  expect_rejected({"optimizer.safetensors", "missing"});
  fs::remove(file("trainer_state.json"));
  expect_rejected({"trainer_state.json", "missing"});
  fs::remove_all(ckpt());
  expect_rejected({"ckpt", "no checkpoint"});
}

TEST_F(DamagedCheckpointTest, MissingTensor) {
  save_other([](Net& n) { n.add("layers.0.proj.weight", {kOut, kIn}); });
  expect_rejected({"model.safetensors", "'layers.0.proj.bias'", "missing"});
}

TEST_F(DamagedCheckpointTest, WrongShape) {
  save_other([](Net& n) {
    n.add("layers.0.proj.weight", {kIn, kOut});
    n.add("layers.0.proj.bias", {kOut}, false);
  });
  expect_rejected({"model.safetensors", "'layers.0.proj.weight'", "[3,4]", "[4,3]"});
}

TEST_F(DamagedCheckpointTest, ExtraTensor) {
  save_other([](Net& n) {
    n.add("layers.0.proj.weight", {kOut, kIn});
    n.add("layers.0.proj.bias", {kOut}, false);
    n.add("layers.1.proj.weight", {2});
  });
  expect_rejected({"model.safetensors", "'layers.1.proj.weight'"});
}

TEST_F(DamagedCheckpointTest, WrongDtype) {
  const SafetensorsFile model = SafetensorsFile::open(file("model.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& n : model.names())
    tensors.emplace_back(n, n == "layers.0.proj.bias" ? model.get(n).to_dtype(DType::BF16) : model.get(n));
  save_safetensors(file("model.safetensors").string(), tensors);
  reseal(ckpt(), "model.safetensors");
  expect_rejected({"model.safetensors", "'layers.0.proj.bias'", "bf16"});
}

TEST_F(DamagedCheckpointTest, MissingMoment) {
  const SafetensorsFile moments = SafetensorsFile::open(file("optimizer.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& n : moments.names())
    if (n != "exp_avg_sq.layers.0.proj.weight")
      tensors.emplace_back(n, moments.get(n));
  save_safetensors(file("optimizer.safetensors").string(), tensors);
  reseal(ckpt(), "optimizer.safetensors");
  expect_rejected({"optimizer.safetensors", "'exp_avg_sq.layers.0.proj.weight'", "missing"});
}

// A save killed after each of its stages (a child process that _exits there, the way a crash
// would: no destructors, no cleanup) leaves <dir> loadable as the old or the new checkpoint,
// never a mix; the next save then completes and tidies up.
TEST_F(TrainCheckpointTest, CrashAtEveryStageLeavesOldOrNew) {
  Run r = trained(3);
  const Snapshot old_state = snapshot(*r.net, *r.opt);
  Run r2 = trained(7);
  const Snapshot new_state = snapshot(*r2.net, *r2.opt);

  for (bool have_old : {true, false}) {
    for (bool exchange : {true, false}) {
      // The stages train_checkpoint.h lists; a child that never reaches one fails below.
      std::vector<std::string> stages = {"tmp_created",   "model_written", "optimizer_written",
                                         "state_written", "swapped",       "done"};
      if (have_old && !exchange)
        stages.insert(stages.begin() + 4, "old_moved");
      bool swapped = false;
      for (const std::string& stage : stages) {
        SCOPED_TRACE("old " + std::to_string(have_old) + ", exchange " + std::to_string(exchange) + ", crash after " +
                     stage);
        swapped = swapped || stage == "swapped";
        fs::remove_all(ckpt());
        fs::remove_all(ckpt() + ".tmp");
        fs::remove_all(ckpt() + ".prev");
        if (have_old)
          save_train_checkpoint(ckpt(), r.net->set, *r.opt, state_at(3));

        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
          CheckpointSaveOptions crash;
          crash.use_rename_exchange = exchange;
          crash.after_stage = [&](const std::string& s) {
            if (s == stage)
              ::_exit(0);
          };
          try {
            save_train_checkpoint(ckpt(), r2.net->set, *r2.opt, state_at(7), crash);
          } catch (...) {
            ::_exit(2);
          }
          ::_exit(3);
        }
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;

        auto net = make_regression_net(1);
        AdamW opt(net->set, AdamWOptions{});
        if (!have_old && !swapped) {
          EXPECT_THROW(load_train_checkpoint(ckpt(), net->set, opt), Error) << "nothing was published yet";
        } else {
          const int64_t step = load_train_checkpoint(ckpt(), net->set, opt).step;
          EXPECT_EQ(step, swapped ? 7 : 3);
          EXPECT_EQ(snapshot(*net, opt), swapped ? new_state : old_state);
        }

        // The next save finishes the job and leaves only the checkpoint.
        save_train_checkpoint(ckpt(), r2.net->set, *r2.opt, state_at(7));
        EXPECT_EQ(load_train_checkpoint(ckpt(), net->set, opt).step, 7);
        EXPECT_FALSE(fs::exists(ckpt() + ".tmp"));
        EXPECT_FALSE(fs::exists(ckpt() + ".prev"));
      }
      EXPECT_TRUE(swapped);
    }
  }
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
    gpu.grad.copy_from(cpu.grad);  // the same clipped gradients, so that updates compare bitwise
    cpu_opt.step(0.01, t == 3 ? 0.75f : 1.f);  // the last step with a clipping scale folded in
    gpu_opt.step(0.01, t == 3 ? 0.75f : 1.f);
    EXPECT_EQ(bits(gpu.value), bits(cpu.value)) << "step " << t;
    EXPECT_EQ(bits(gpu_opt.exp_avg(0)), bits(cpu_opt.exp_avg(0)));
    EXPECT_EQ(bits(gpu_opt.exp_avg_sq(0)), bits(cpu_opt.exp_avg_sq(0)));
  }
}

}  // namespace
}  // namespace updraft::train
