// The plain generation engine: greedy equals step-by-step argmax, seeded sampling does not
// depend on what else is batched, logprobs follow the documented distribution, sampled tokens
// follow the policy's distribution (chi-square), stop tokens and bad requests behave.
#include "rollout/engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "kernels/ops.h"
#include "tests/rollout/test_models.h"

namespace updraft {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = testing_models::tiny_config(PolicyArch::Llama);
    model_ = std::make_unique<PolicyModel>(random_policy(cfg_, 3, DType::BF16));
  }
  // Logits after feeding `tokens` to a fresh sequence (last position).
  std::vector<float> last_logits(const std::vector<int32_t>& tokens) {
    return testing_models::last_logits(*model_, tokens);
  }
  static GenRequest req(std::vector<int32_t> prompt, float temp, int64_t max_new, uint64_t seed = 0) {
    GenRequest r = testing_models::seeded_request(std::move(prompt), temp, max_new, seed);
    r.params.ignore_eos = true;
    return r;
  }

  PolicyConfig cfg_;
  std::unique_ptr<PolicyModel> model_;
};

TEST_F(EngineTest, GreedyMatchesStepByStepArgmaxWithLogSoftmaxLogprobs) {
  Engine e(*model_);
  e.submit(req({1, 2, 3, 4}, 0.f, 12));
  auto res = e.run();
  ASSERT_EQ(res.size(), 1u);
  EXPECT_EQ(res[0].finish_reason, "length");
  std::vector<int32_t> seq = {1, 2, 3, 4};
  for (size_t i = 0; i < 12; ++i) {
    auto z = last_logits(seq);
    const int32_t best = static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
    ASSERT_EQ(res[0].tokens[i], best) << "step " << i;
    double m = *std::max_element(z.begin(), z.end()), s = 0;
    for (float v : z)
      s += std::exp(v - m);
    EXPECT_NEAR(res[0].logprobs[i], z[best] - m - std::log(s), 1e-4);
    seq.push_back(best);
  }
}

TEST_F(EngineTest, SeededSamplingDoesNotDependOnTheBatch) {
  Engine alone(*model_);
  alone.submit(req({5, 6, 7}, 0.9f, 16, 42));
  const auto solo = alone.run();
  EngineOptions small;
  small.prefill_chunk = 3;  // forces chunked prefill next to decoding sequences
  Engine crowd(*model_, small);
  crowd.submit(req({9, 9, 9, 9, 9, 9, 9}, 1.0f, 5, 1));
  crowd.step();
  crowd.submit(req({5, 6, 7}, 0.9f, 16, 42));
  crowd.submit(req({1}, 0.f, 20));
  const auto all = crowd.run();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[1].tokens, solo[0].tokens);
  for (size_t i = 0; i < solo[0].logprobs.size(); ++i)
    EXPECT_NEAR(all[1].logprobs[i], solo[0].logprobs[i], 1e-4);
  crowd.drop_prefix_donors();  // finished requests' caches kept for prefix reuse
  EXPECT_EQ(crowd.cache().free_blocks(), crowd.cache().num_blocks());
}

TEST_F(EngineTest, LogprobIsUnderTheTemperatureScaledFilteredPolicy) {
  GenRequest r = req({4, 8, 15}, 0.7f, 1, 5);
  r.params.top_k = 6;
  Engine e(*model_);
  e.submit(r);
  const auto res = e.run();
  auto z = last_logits({4, 8, 15});
  std::vector<std::pair<double, int>> zs;
  for (size_t i = 0; i < z.size(); ++i)
    zs.push_back({z[i] / 0.7, static_cast<int>(i)});
  std::sort(zs.begin(), zs.end(), [](auto a, auto b) { return a.first > b.first; });
  double s = 0;
  for (int i = 0; i < 6; ++i)
    s += std::exp(zs[i].first - zs[0].first);
  const int32_t tok = res[0].tokens[0];
  int rank = -1;
  for (int i = 0; i < 6; ++i)
    if (zs[i].second == tok)
      rank = i;
  ASSERT_GE(rank, 0) << "sampled a token outside the top-k";
  EXPECT_NEAR(res[0].logprobs[0], zs[rank].first - zs[0].first - std::log(s), 1e-4);
}

// 3000 one-token requests with different seeds: the token counts must fit the policy's
// temperature-scaled top-k distribution (chi-square, 9 degrees of freedom, p = 0.001 -> 27.88).
TEST_F(EngineTest, SampledTokensFollowThePolicyDistribution) {
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  auto z = last_logits(prompt);
  Tensor probs = Tensor::empty({1, cfg_.vocab_size}, DType::F32);
  ops::sampling_probs(Tensor::from_f32(z, {1, cfg_.vocab_size}), Tensor::from_f32({1.3f}, {1}),
                      Tensor::from_i32({10}, {1}), Tensor::from_f32({1.f}, {1}), probs);
  const auto p = probs.to_f32_vector();
  Engine e(*model_);
  const int N = 3000;
  for (int i = 0; i < N; ++i) {
    GenRequest r = req(prompt, 1.3f, 1, 1000 + i);
    r.params.top_k = 10;
    e.submit(r);
  }
  std::map<int32_t, int> count;
  for (const auto& r : e.run())
    ++count[r.tokens[0]];
  double chi2 = 0;
  int cells = 0;
  for (int32_t t = 0; t < cfg_.vocab_size; ++t) {
    if (p[t] == 0) {
      EXPECT_EQ(count[t], 0) << "token " << t << " has zero probability";
      continue;
    }
    const double expect = N * p[t];
    chi2 += (count[t] - expect) * (count[t] - expect) / expect;
    ++cells;
  }
  EXPECT_EQ(cells, 10);
  EXPECT_LT(chi2, 27.88) << "sampled frequencies do not match the policy";
}

TEST_F(EngineTest, StopTokenEndsTheRequestAndIsReturned) {
  Engine e(*model_);
  e.submit(req({2, 7, 1, 8}, 0.f, 10));
  const auto full = e.run()[0].tokens;
  // Stop at the first token value not seen before position 3.
  size_t at = 3;
  while (std::find(full.begin(), full.begin() + at, full[at]) != full.begin() + at)
    ++at;
  GenRequest r = req({2, 7, 1, 8}, 0.f, 10);
  r.params.stop_token_ids = {full[at]};
  e.submit(r);
  const auto res = e.run();
  EXPECT_EQ(res[0].finish_reason, "stop");
  EXPECT_EQ(res[0].tokens, std::vector<int32_t>(full.begin(), full.begin() + at + 1));
}

// Each bad request is refused at submit() with a message that names the problem; the good ones
// around it produce exactly what they produce in an engine that never saw the bad ones.
TEST_F(EngineTest, BadRequestsAreRejectedAndOthersUnaffected) {
  EngineOptions o;
  o.kv_cache_bytes = 64 << 10;
  const std::vector<GenRequest> good = {req({1, 2}, 0.f, 6), req({1, 2, 3}, 0.f, 4), req({4, 5}, 0.9f, 5)};
  std::vector<std::pair<GenRequest, std::string>> bad = {
      {req({}, 0.f, 4), "empty prompt"},
      {req({1, static_cast<int32_t>(cfg_.vocab_size)}, 0.f, 4), "prompt token 1 has id"},
      {req({-3}, 0.f, 4), "prompt token 0 has id -3"},
      {req(std::vector<int32_t>(120, 1), 0.f, 20), "exceeds the model's context"},
      {req({1}, -0.5f, 4), "temperature must be a finite number >= 0"},
      {req({1}, NAN, 4), "temperature must be a finite number >= 0"},
      {req({1}, 1.f, 0), "max_new_tokens must be at least 1"}};
  GenRequest r = req({1}, 1.f, 4);
  r.params.top_p = 0.f;
  bad.emplace_back(r, "top_p must be in (0, 1]");
  r.params.top_p = 1.f;
  r.params.top_k = -2;
  bad.emplace_back(r, "top_k must be >= 0");
  r.params.top_k = 0;
  r.params.stop_token_ids = {1000};
  bad.emplace_back(r, "stop token id 1000 is outside the vocabulary");
  Engine clean(*model_, o);
  for (const auto& g : good)
    clean.submit(g);
  const auto want = clean.run();

  Engine e(*model_, o);
  size_t next_good = 0;
  for (size_t i = 0; i < bad.size(); ++i) {
    if (i % 4 == 0 && next_good < good.size())
      e.submit(good[next_good++]);
    try {
      e.submit(bad[i].first);
      ADD_FAILURE() << "accepted a bad request (" << bad[i].second << ")";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(bad[i].second), std::string::npos) << err.what();
    }
  }
  while (next_good < good.size())
    e.submit(good[next_good++]);
  const auto got = e.run();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].logprobs, want[i].logprobs) << "request " << i;
    EXPECT_EQ(got[i].finish_reason, want[i].finish_reason) << "request " << i;
  }
  EXPECT_EQ(got[0].tokens.size(), 6u);
}

// Blocks are reserved as sequences grow, so more requests start than could hold their longest
// length at once; when the cache runs out the youngest is preempted and later recomputed. Every
// request still finishes with the tokens and logprobs of a solo run, and the blocks come back.
TEST_F(EngineTest, MoreRequestsThanTheCacheHoldsAllFinishByPreemption) {
  EngineOptions o;
  o.block_size = 4;
  o.kv_cache_bytes = 10 * (2 * cfg_.num_layers * 4 * cfg_.num_kv_heads * cfg_.head_dim * 4);  // 10 blocks
  Engine e(*model_, o);
  ASSERT_EQ(e.cache().num_blocks(), 10);
  std::vector<GenRequest> reqs;
  for (int i = 0; i < 12; ++i)  // 12 tokens = 3 blocks each at the end
    reqs.push_back(req({static_cast<int32_t>(i + 1), 2, 3}, i % 2 ? 0.f : 0.8f, 9, 100 + i));
  for (const GenRequest& r : reqs)
    e.submit(r);
  int64_t max_running = 0;
  std::vector<GenResult> res;
  while (e.has_work()) {
    auto d = e.step();
    max_running = std::max(max_running, e.running());
    res.insert(res.end(), d.begin(), d.end());
  }
  ASSERT_EQ(res.size(), 12u);
  EXPECT_GT(max_running, 3) << "blocks are reserved as sequences grow, not for their longest length at once";
  EXPECT_GT(e.stats().preemptions, 0) << "the cache should run out and preempt";
  e.drop_prefix_donors();
  EXPECT_EQ(e.cache().free_blocks(), 10);
  std::sort(res.begin(), res.end(), [](const GenResult& x, const GenResult& y) { return x.id < y.id; });
  int64_t preempted = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    Engine solo(*model_);
    solo.submit(reqs[i]);
    const GenResult want = solo.run()[0];
    EXPECT_EQ(res[i].tokens, want.tokens) << "request " << i;
    EXPECT_EQ(res[i].logprobs, want.logprobs) << "request " << i;
    preempted += res[i].preemptions;
  }
  EXPECT_EQ(preempted, e.stats().preemptions);
  EXPECT_THROW(e.submit(req({1, 2, 3}, 0.f, 60)), Error) << "larger than the whole cache";
}

// Input logprobs: each prompt token's log p(token | the tokens before it) under the raw policy,
// equal to a direct forward of the prefix, whether the prompt is prefilled in one chunk or in
// several beside decoding sequences, from any start position (position 0: NaN), and the output
// unchanged by asking for them.
TEST_F(EngineTest, InputLogprobsAreThePolicysOwnForEveryChunking) {
  std::vector<int32_t> prompt;
  for (int j = 0; j < 11; ++j)
    prompt.push_back(static_cast<int32_t>((j * 7 + 3) % cfg_.vocab_size));
  std::vector<float> want(prompt.size(), std::nanf(""));
  for (size_t p = 1; p < prompt.size(); ++p) {
    std::vector<float> logits = last_logits({prompt.begin(), prompt.begin() + static_cast<long>(p)});
    const float top = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float x : logits)
      sum += std::exp(static_cast<double>(x - top));
    want[p] = static_cast<float>(logits[prompt[p]] - top - std::log(sum));
  }
  for (int64_t chunk : {64, 4, 1})
    for (int64_t from : {0, 1, 5}) {
      EngineOptions o;
      o.prefill_chunk = chunk;
      Engine e(*model_, o);
      GenRequest asked = req(prompt, 0.f, 5), plain = req(prompt, 0.f, 5), other = req({4, 2}, 0.8f, 9, 3);
      asked.input_logprobs_from = from;
      e.submit(other);  // decodes beside the chunks
      e.submit(asked);
      e.submit(plain);
      auto out = e.run();
      std::sort(out.begin(), out.end(), [](const GenResult& a, const GenResult& b) { return a.id < b.id; });
      ASSERT_EQ(out[1].input_logprobs.size(), prompt.size() - static_cast<size_t>(from));
      for (size_t i = 0; i < out[1].input_logprobs.size(); ++i) {
        const size_t pos = static_cast<size_t>(from) + i;
        if (pos == 0) {
          EXPECT_TRUE(std::isnan(out[1].input_logprobs[i]));
        } else {
          EXPECT_NEAR(out[1].input_logprobs[i], want[pos], 1e-4) << "chunk " << chunk << ", position " << pos;
        }
      }
      EXPECT_EQ(out[1].tokens, out[2].tokens) << "asking for input logprobs changed the output";
      EXPECT_TRUE(out[2].input_logprobs.empty());
    }
  GenRequest bad = req(prompt, 0.f, 2);
  bad.input_logprobs_from = static_cast<int64_t>(prompt.size());
  Engine e(*model_);
  EXPECT_THROW(e.submit(bad), Error);
}

}  // namespace
}  // namespace updraft
