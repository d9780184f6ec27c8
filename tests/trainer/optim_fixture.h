// Shared by the optimiser tests (optim_test.cc) and the training checkpoint tests
// (train_checkpoint_test.cc): a least-squares net and its data, the training loop every trainer
// runs, bit snapshots of the trainable state, and file helpers for damaging checkpoints.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "kernels/core/device.h"
#include "kernels/io/sha256.h"
#include "kernels/ops/optim.h"
#include "trainer/adamw.h"
#include "trainer/params.h"
#include "trainer/train_checkpoint.h"

namespace updraft::train::testing_optim {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- helpers ------------------------------------------------------------------------------------

inline void fill_uniform(Tensor t, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = u(rng);
}

inline std::vector<uint32_t> bits(const Tensor& t) {
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

inline std::unique_ptr<Net> make_regression_net(uint32_t seed) {
  auto net = std::make_unique<Net>();
  fill_uniform(net->add("layers.0.proj.weight", {kOut, kIn}).value, seed);
  fill_uniform(net->add("layers.0.proj.bias", {kOut}, false).value, seed + 1);
  return net;
}

// Inputs x and targets y = x·W*^T + b* of a known solution (W*, b*), which least squares recovers.
struct Data {
  std::vector<double> x, y, w_star, b_star;  // [kRows, kIn], [kRows, kOut], [kOut, kIn], [kOut]
};

inline Data make_data() {
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
inline double accumulate_grads(Net& net, const Data& d) {
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

inline LrScheduleOptions regression_schedule() {
  return {.decay = LrDecay::Cosine, .peak_lr = 0.05, .total_steps = 40, .warmup_steps = 4, .min_lr_ratio = 0.1};
}

inline AdamWOptions regression_adamw() {
  return {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
}

// Steps [from, to) of the training loop every trainer runs: zero, backward, clip, step.
inline void train(Net& net, AdamW& opt, const LrSchedule& sched, int64_t from, int64_t to) {
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

inline Snapshot snapshot(const Net& net, const AdamW& opt) {
  Snapshot s;
  for (size_t i = 0; i < net.set.size(); ++i) {
    s.values.push_back(bits(net.set[i].value));
    s.m.push_back(bits(opt.exp_avg(i)));
    s.v.push_back(bits(opt.exp_avg_sq(i)));
  }
  s.steps = opt.steps();
  return s;
}

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

// After editing a tensor file on purpose: record its size and sha256 again and recompute
// state_sha256 as train_checkpoint.h describes, so that only the structural checks can object.
inline void reseal(const fs::path& dir, const std::string& file) {
  json doc = json::parse(read_text(dir / "trainer_state.json"));
  doc["files"][file] = {{"bytes", fs::file_size(dir / file)}, {"sha256", sha256_file_hex((dir / file).string())}};
  doc.erase("state_sha256");
  doc["state_sha256"] = sha256_hex(doc.dump());
  write_text(dir / "trainer_state.json", doc.dump(2));
}

}  // namespace updraft::train::testing_optim
