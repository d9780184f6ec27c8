// The trainable Llama: its whole-model gradient against finite differences, its saved
// checkpoint against the policy runtime's forward, and plain training that lowers the loss.
#include "trainer/llama_train.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "kernels/ops.h"
#include "rollout/policy_model.h"

namespace updraft::train {
namespace {

PolicyConfig tiny_llama(bool tied) {
  PolicyConfig c;
  c.arch = PolicyArch::Llama;
  c.vocab_size = 29;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-5f;
  c.tie_word_embeddings = tied;
  c.eos_token_ids = {0};
  c.dtype = DType::F32;
  return c;
}

std::vector<int32_t> random_tokens(size_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t)
    x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

// Larger weights than the default init, so that every path carries a visible gradient.
void scale_weights(TrainableLlama& m, float factor) {
  for (Param* p : m.params()) {
    float* v = p->value.data<float>();
    for (int64_t i = 0; i < p->value.numel(); ++i)
      v[i] =
          p->name.find("norm") != std::string::npos ? 1.0f + (v[i] - 1.0f) + 0.05f * std::sin(3.f * i) : v[i] * factor;
  }
}

class LlamaGrad : public ::testing::TestWithParam<bool> {};

TEST_P(LlamaGrad, WholeModelMatchesFiniteDifferences) {
  TrainableLlama m(tiny_llama(GetParam()), 3);
  scale_weights(m, 20.f);
  const int64_t B = 2, T = 6;
  const auto tokens = random_tokens(B * (T + 1), 29, 4);
  std::vector<uint8_t> mask(B * T, 1);
  mask[1] = 0;  // a masked target (a prompt token)
  m.params().zero_grad();
  const LmLoss base = m.forward_backward(tokens, B, T, &mask, 1.f);
  EXPECT_EQ(base.targets, B * T - 1);
  // Central differences in f32 on a sample of entries of every tensor.
  const float h = 2e-3f;
  int checked = 0;
  for (Param* p : m.params()) {
    float* v = p->value.data<float>();
    const float* g = p->grad.data<float>();
    const int64_t n = p->value.numel();
    for (int64_t s = 0; s < 6; ++s) {
      const int64_t i = (s * 7919 + 13) % n;
      const float keep = v[i];
      v[i] = keep + h;
      const double up = m.evaluate(tokens, B, T, &mask).loss;
      v[i] = keep - h;
      const double down = m.evaluate(tokens, B, T, &mask).loss;
      v[i] = keep;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(g[i], numeric, 3e-3 + 3e-2 * std::fabs(numeric)) << p->name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntied, LlamaGrad, ::testing::Values(false, true));

TEST(LlamaTrain, SavedCheckpointRunsInThePolicyRuntime) {
  TrainableLlama m(tiny_llama(true), 5);
  scale_weights(m, 10.f);
  const int64_t T = 9;
  const auto tokens = random_tokens(T + 1, 29, 6);
  const LmLoss ref = m.evaluate(tokens, 1, T, nullptr);

  const auto dir = std::filesystem::temp_directory_path() / ("updraft_llama_train_" + std::to_string(::getpid()));
  m.save_hf(dir.string(), DType::F32);
  PolicyModel policy = PolicyModel::load(dir.string());
  std::filesystem::remove_all(dir);

  KvCache cache(policy.kv_shape(), 8, 4);
  SeqKv kv;
  ASSERT_TRUE(cache.reserve(kv, T));
  std::vector<SeqStep> b(1);
  b[0].kv = &kv;
  b[0].tokens.assign(tokens.begin(), tokens.begin() + T);
  for (int32_t i = 0; i < T; ++i)
    b[0].logit_rows.push_back(i);
  const auto logits = policy.forward(cache, b).logits.to_f32_vector();
  double loss = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* z = logits.data() + t * 29;
    double mx = z[0], s = 0;
    for (int c = 1; c < 29; ++c)
      mx = std::max(mx, static_cast<double>(z[c]));
    for (int c = 0; c < 29; ++c)
      s += std::exp(z[c] - mx);
    loss += mx + std::log(s) - z[tokens[t + 1]];
  }
  EXPECT_NEAR(loss / T, ref.loss, 1e-4);
}

TEST(LlamaTrain, GradientStepsLowerTheLoss) {
  TrainableLlama m(tiny_llama(false), 7);
  // A periodic sequence is learnable from context.
  const int64_t B = 4, T = 16;
  std::vector<int32_t> tokens;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t <= T; ++t)
      tokens.push_back(static_cast<int32_t>((b + t * 3) % 7 + 1));
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    m.params().zero_grad();
    const LmLoss l = m.forward_backward(tokens, B, T, nullptr, 1.f);
    if (step == 0)
      first = l.loss;
    last = l.loss;
    for (Param* p : m.params()) {
      float* v = p->value.data<float>();
      const float* g = p->grad.data<float>();
      for (int64_t i = 0; i < p->value.numel(); ++i)
        v[i] -= 0.5f * g[i];
    }
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
}

TEST(LlamaTrain, RejectsBadBatches) {
  TrainableLlama m(tiny_llama(true), 1);
  EXPECT_THROW(m.evaluate({1, 2, 3}, 1, 3, nullptr), Error);
  EXPECT_THROW(m.evaluate({1, 2, 300}, 1, 2, nullptr), Error);
  PolicyConfig q = tiny_llama(true);
  q.qk_norm = true;
  EXPECT_THROW(TrainableLlama(q, 1), Error);
}

}  // namespace
}  // namespace updraft::train
