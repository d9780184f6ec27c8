// GRPO: the weighted loss's gradient is the masked cross-entropy's when the weights are the
// mask over the count, advantages are group-normalised, and updates raise a verifiable reward
// on a small random policy sampled by the real engine.
#include "trainer/grpo.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "rollout/engine/engine.h"
#include "rollout/policy_model.h"
#include "tests/rollout/test_models.h"

namespace updraft::train {
namespace {

namespace fs = std::filesystem;

PolicyConfig tiny() {
  PolicyConfig c = testing_models::tiny_config(PolicyArch::Llama);
  c.num_layers = 2;
  return c;
}

TEST(Grpo, WeightedLossMatchesMaskedLoss) {
  const PolicyConfig c = tiny();
  TrainableLlama a(c, 5), b(c, 5);
  const int64_t B = 2, T = 6;
  std::vector<int32_t> tokens;
  std::mt19937 rng(1);
  for (int64_t i = 0; i < B * (T + 1); ++i)
    tokens.push_back(static_cast<int32_t>(rng() % 97));
  std::vector<uint8_t> mask(B * T, 0);
  std::vector<float> w(B * T, 0.f);
  const int64_t kept[] = {1, 2, 5, 7, 8, 11};
  for (int64_t r : kept)
    mask[static_cast<size_t>(r)] = 1;
  for (int64_t r : kept)
    w[static_cast<size_t>(r)] = 1.0f / 6.0f;
  const LmLoss la = a.forward_backward(tokens, B, T, &mask, 1.0f);
  const LmLoss lb = b.weighted_backward(tokens, B, T, w, 1.0f);
  EXPECT_NEAR(la.loss, lb.loss, 1e-6);
  EXPECT_EQ(la.targets, lb.targets);
  for (size_t i = 0; i < a.params().size(); ++i) {
    const auto ga = a.params()[i].grad.to_f32_vector(), gb = b.params()[i].grad.to_f32_vector();
    for (size_t j = 0; j < ga.size(); ++j)
      ASSERT_NEAR(ga[j], gb[j], 1e-6f + 1e-4f * std::abs(ga[j])) << a.params()[i].name;
  }
}

TEST(Grpo, AdvantagesAreGroupNormalised) {
  std::vector<GrpoSample> s(6);
  const double rewards[] = {1, 0, 0, 1, 0.5, 0.5};
  const int64_t groups[] = {0, 0, 0, 0, 1, 1};
  for (size_t i = 0; i < 6; ++i) {
    s[i].reward = rewards[i];
    s[i].group = groups[i];
  }
  const auto a = grpo_advantages(s, true);
  EXPECT_NEAR(a[0], 1.0, 1e-5);  // mean 0.5, std 0.5
  EXPECT_NEAR(a[1], -1.0, 1e-5);
  EXPECT_EQ(a[4], 0.0);  // equal rewards: no signal
  EXPECT_EQ(a[5], 0.0);
  const auto u = grpo_advantages(s, false);
  EXPECT_NEAR(u[0], 0.5, 1e-12);
}

// Reward: the fraction of response tokens equal to 7.
double reward_of(const std::vector<int32_t>& r) {
  if (r.empty())
    return 0;
  double n = 0;
  for (int32_t t : r)
    n += t == 7;
  return n / static_cast<double>(r.size());
}

std::vector<GenResult> sample(const TrainableLlama& m, const std::string& dir, int64_t prompts, int64_t group,
                              uint64_t seed) {
  fs::remove_all(dir);
  m.save_hf(dir, DType::F32);
  const PolicyModel p = PolicyModel::load(dir);
  Engine e(p);
  for (int64_t i = 0; i < prompts; ++i)
    for (int64_t g = 0; g < group; ++g) {
      GenRequest r;
      r.prompt = {static_cast<int32_t>(10 + i), static_cast<int32_t>(20 + i)};
      r.params.temperature = 1.0f;
      r.params.max_new_tokens = 8;
      r.params.ignore_eos = true;
      r.params.has_seed = true;
      r.params.seed = seed * 1000 + static_cast<uint64_t>(i * group + g);
      e.submit(r);
    }
  auto res = e.run();
  std::sort(res.begin(), res.end(), [](const GenResult& a, const GenResult& b) { return a.id < b.id; });
  return res;
}

double mean_reward(const std::vector<GenResult>& res) {
  double s = 0;
  for (const auto& r : res)
    s += reward_of(r.tokens);
  return s / static_cast<double>(res.size());
}

TEST(Grpo, UpdatesRaiseTheReward) {
  const std::string dir = (fs::temp_directory_path() / ("updraft_grpo_" + std::to_string(::getpid()))).string();
  TrainableLlama m(tiny(), 9);
  AdamWOptions ao;
  ao.weight_decay = 0;
  AdamW opt(m.params(), ao);
  const double before = mean_reward(sample(m, dir, 8, 8, 999));
  for (int step = 0; step < 12; ++step) {
    const auto res = sample(m, dir, 4, 8, static_cast<uint64_t>(step + 1));
    std::vector<GrpoSample> batch;
    for (size_t i = 0; i < res.size(); ++i)
      batch.push_back({res[i].prompt, res[i].tokens, reward_of(res[i].tokens), static_cast<int64_t>(i / 8)});
    const GrpoStats st = grpo_step(m, opt, batch, 1e-2);
    EXPECT_FALSE(st.skipped);
    EXPECT_EQ(st.tokens, 32 * 8);
  }
  const double after = mean_reward(sample(m, dir, 8, 8, 999));
  fs::remove_all(dir);
  EXPECT_LT(before, 0.05);
  EXPECT_GT(after, 0.25) << "before " << before;
}

}  // namespace
}  // namespace updraft::train
