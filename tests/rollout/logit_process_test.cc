// Logit processors (rollout/engine/logit_process.h) and speculation with them on:
//  - process_logits against a direct reference on a draft tree (each row's context is the output
//    plus its tree path): repetition, frequency and presence penalties, min_new_tokens, min_p;
//  - temperature 0: speculative output (chain and tree, batch 1 and 16) token- and
//    logprob-identical to plain decoding with penalties and min_new_tokens on;
//  - temperature > 0: 12000 seeded three-token samples of penalised speculative decoding fit the
//    exact joint distribution of tokens 2 and 3 (enumerated with the reference processor), plain
//    decoding fits it too, and the NoResidual control does not; a processor that ignored the
//    tree path fails it (checked by hand).
#include "rollout/engine/logit_process.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "drafter/random_draft.h"
#include "kernels/ops.h"
#include "rollout/engine/engine.h"
#include "rollout/engine/sequence.h"
#include "tests/drafter/test_drafts.h"
#include "tests/rollout/chi2.h"
#include "tests/rollout/spec_fixture.h"

namespace updraft {
namespace {

using namespace testing_chi2;

// The processors written out plainly for one row: context = prompt + output (+ path).
std::vector<float> reference_row(std::vector<float> row, const SamplingParams& p, const std::vector<int32_t>& prompt,
                                 const std::vector<int32_t>& output) {
  const int64_t V = static_cast<int64_t>(row.size());
  for (int64_t t = 0; t < V; ++t) {
    int64_t in_prompt = 0, in_output = 0;
    for (int32_t x : prompt)
      in_prompt += x == t;
    for (int32_t x : output)
      in_output += x == t;
    if (in_prompt + in_output > 0 && p.repetition_penalty != 1.0f)
      row[t] = row[t] > 0 ? row[t] / p.repetition_penalty : row[t] * p.repetition_penalty;
    row[t] -= p.frequency_penalty * static_cast<float>(in_output) + (in_output > 0 ? p.presence_penalty : 0.0f);
  }
  if (static_cast<int64_t>(output.size()) < p.min_new_tokens)
    for (int32_t s : p.stop_token_ids)
      row[s] = -std::numeric_limits<float>::infinity();
  if (p.min_p > 0 && p.temperature > 0) {
    const float top = *std::max_element(row.begin(), row.end());
    for (float& x : row)
      if (std::exp((x - top) / p.temperature) < p.min_p)
        x = -std::numeric_limits<float>::infinity();
  }
  return row;
}

SamplingParams penalised(float temp) {
  SamplingParams p;
  p.temperature = temp;
  p.repetition_penalty = 1.4f;
  p.frequency_penalty = 0.3f;
  p.presence_penalty = 0.2f;
  p.min_new_tokens = 3;
  p.stop_token_ids = {5, 9};
  return p;
}

TEST(LogitProcess, EachTreeRowIsProcessedWithItsOwnPath) {
  const int64_t V = 12;
  Seq s;
  s.req.prompt = {1, 2, 2, 7};
  s.result.tokens = {3, 7};  // the pending token (the tree's root) is the last one
  s.req.params = penalised(0.9f);
  s.req.params.min_p = 0.05f;
  DraftTree tree;  // root (7) -> 4 -> 3, root -> 5 -> 4
  tree.tokens = {7, 4, 3, 5, 4};
  tree.parent = {-1, 0, 1, 0, 3};
  tree.depth = {0, 1, 2, 1, 2};
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.f, 2.f);
  std::vector<float> logits(static_cast<size_t>(tree.size() * V));
  for (float& x : logits)
    x = n(rng);
  std::vector<float> got = logits;
  process_logits(s, tree, got.data(), V, {});
  const std::vector<std::vector<int32_t>> paths = {{}, {4}, {4, 3}, {5}, {5, 4}};
  for (int64_t i = 0; i < tree.size(); ++i) {
    std::vector<int32_t> out = s.result.tokens;
    out.insert(out.end(), paths[static_cast<size_t>(i)].begin(), paths[static_cast<size_t>(i)].end());
    const std::vector<float> want =
        reference_row({logits.begin() + i * V, logits.begin() + (i + 1) * V}, s.req.params, s.req.prompt, out);
    for (int64_t t = 0; t < V; ++t)
      EXPECT_FLOAT_EQ(got[static_cast<size_t>(i * V + t)], want[static_cast<size_t>(t)]) << "row " << i << " token " << t;
  }
  // min_new_tokens 3 with 2 out: the root's row and nothing deeper masks the stop tokens.
  EXPECT_TRUE(std::isinf(got[5]) && std::isinf(got[9]));
  EXPECT_FALSE(std::isinf(got[V + 5]) && std::isinf(got[V + 9]));
  // Every processor off: the row is left bitwise untouched.
  s.req.params = SamplingParams{};
  std::vector<float> same = logits;
  process_logits(s, tree, same.data(), V, {});
  EXPECT_EQ(same, logits);
}

class PenalisedSpec : public testing_spec::SpecFixture {
 protected:
  // p(.|toks) after the reference processor, as ops::sampling_probs draws from it.
  std::vector<float> probs_after(const std::vector<int32_t>& prompt, const std::vector<int32_t>& out,
                                 const SamplingParams& p) {
    const int64_t V = cfg_.vocab_size;
    std::vector<int32_t> toks = prompt;
    toks.insert(toks.end(), out.begin(), out.end());
    const std::vector<float> row = reference_row(testing_models::last_logits(*model_, toks), p, prompt, out);
    Tensor probs = Tensor::empty({1, V}, DType::F32);
    ops::sampling_probs(Tensor::from_f32(row, {1, V}), Tensor::from_f32({p.temperature}, {1}),
                        Tensor::from_i32({p.top_k}, {1}), Tensor::from_f32({p.top_p}, {1}), probs);
    return probs.to_f32_vector();
  }
};

TEST_F(PenalisedSpec, GreedyIsTokenIdenticalToPlainDecoding) {
  std::vector<GenRequest> reqs;
  for (int i = 0; i < 64; ++i) {
    GenRequest r;
    for (int j = 0; j < 2 + (i * 5) % 9; ++j)
      r.prompt.push_back(static_cast<int32_t>((i * 7 + j * 3 + j * j) % cfg_.vocab_size));
    r.params = penalised(0.f);
    r.params.max_new_tokens = 12 + i % 17;
    r.params.stop_token_ids = {static_cast<int32_t>(i % cfg_.vocab_size)};
    r.params.repetition_penalty = i % 2 ? 1.3f : 0.8f;  // < 1 favours repeats: long accepted runs
    r.top_logprobs = 1 + i % 4;
    reqs.push_back(r);
  }
  const auto plain = run(reqs, 16, nullptr);
  ASSERT_EQ(plain.size(), reqs.size());
  for (size_t i = 0; i < plain.size(); ++i)
    for (size_t j = 0; j < 3 && j < plain[i].tokens.size(); ++j)
      ASSERT_NE(plain[i].tokens[j], reqs[i].params.stop_token_ids[0]) << "min_new_tokens let a stop token through";
  int stops = 0;
  for (const auto& r : plain)
    stops += r.finish_reason == "stop";
  EXPECT_GT(stops, 2) << "the prompts should exercise stop tokens after min_new_tokens";
  for (const SpecSettings s : {SpecSettings{4, 1, 5}, SpecSettings{3, 3, 8}})
    for (int64_t batch : {1, 16}) {
      SpecStats st;
      const auto spec = run(reqs, batch, &s, AcceptRule::Exact, &st);
      ASSERT_NO_FATAL_FAILURE(testing_models::expect_same_outputs(
          spec, plain, "batch " + std::to_string(batch) + ", top_k " + std::to_string(s.top_k)));
      for (size_t i = 0; i < plain.size(); ++i) {
        // The alternatives too: the same rows, so the same top tokens (the first is the greedy
        // token itself, with its logprob).
        ASSERT_EQ(spec[i].top_logprobs.size(), plain[i].tokens.size()) << "request " << i;
        for (size_t j = 0; j < plain[i].tokens.size(); ++j) {
          const auto& a = spec[i].top_logprobs[j];
          const auto& b = plain[i].top_logprobs[j];
          ASSERT_EQ(a.size(), static_cast<size_t>(reqs[i].top_logprobs));
          ASSERT_EQ(a.size(), b.size());
          EXPECT_EQ(a[0].first, plain[i].tokens[j]);
          EXPECT_NEAR(a[0].second, plain[i].logprobs[j], 1e-6);
          for (size_t m = 0; m < a.size(); ++m) {
            EXPECT_EQ(a[m].first, b[m].first) << "request " << i << " token " << j;
            EXPECT_NEAR(a[m].second, b[m].second, 1e-5);
            if (m > 0) {
              EXPECT_LE(a[m].second, a[m - 1].second);
            }
          }
        }
      }
      EXPECT_GT(st.accepted, 20) << "too few acceptances to exercise penalised verification (batch " << batch << ")";
    }
}

TEST_F(PenalisedSpec, SampledSpeculationFollowsThePenalisedDistribution) {
  // Three tokens: the first comes from the prompt's row, the second from a decode round's root,
  // the third from the row of the second's node when a draft was accepted, whose context holds
  // the tree path; the fit is on the (second, third) pair, enumerated over the first.
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9};
  const int64_t N = 12000, V = cfg_.vocab_size;
  SamplingParams p = penalised(1.1f);
  p.min_new_tokens = 3;  // the stop tokens are masked throughout: every request has 3 tokens
  p.presence_penalty = 1.5f;  // strong enough that a tree row missing its path's penalty fails
  p.repetition_penalty = 2.0f;
  p.min_p = 0.02f;
  p.max_new_tokens = 3;
  std::vector<double> joint(static_cast<size_t>(V * V), 0.0);
  const std::vector<float> p0 = probs_after(prompt, {}, p);
  EXPECT_EQ(p0[5], 0.f) << "min_new_tokens masks the stop token";
  for (int32_t a = 0; a < V; ++a) {
    if (p0[a] == 0)
      continue;
    const std::vector<float> p1 = probs_after(prompt, {a}, p);
    for (int32_t b = 0; b < V; ++b) {
      if (p1[b] == 0)
        continue;
      const std::vector<float> p2 = probs_after(prompt, {a, b}, p);
      for (int32_t c = 0; c < V; ++c)
        joint[b * V + c] += static_cast<double>(p0[a]) * p1[b] * p2[c];
    }
  }
  auto sample = [&](const SpecSettings* s, AcceptRule rule, uint64_t seed0, SpecStats* st) {
    std::vector<GenRequest> reqs;
    for (int64_t i = 0; i < N; ++i) {
      GenRequest r;
      r.prompt = prompt;
      r.params = p;
      r.params.has_seed = true;
      r.params.seed = seed0 + static_cast<uint64_t>(i);
      reqs.push_back(r);
    }
    std::vector<int64_t> counts(static_cast<size_t>(V * V), 0);
    for (const auto& r : run(reqs, 64, s, rule, st)) {
      EXPECT_EQ(r.tokens.size(), 3u);
      if (r.tokens.size() == 3)
        ++counts[r.tokens[1] * V + r.tokens[2]];
    }
    return chi2_fit(counts, joint, N);
  };
  const SpecSettings tree{3, 3, 8};
  SpecStats st;
  const auto [stat, df] = sample(&tree, AcceptRule::Exact, 1'000'000, &st);
  EXPECT_LT(stat, chi2_critical(df)) << "penalised speculative samples do not fit the policy";
  EXPECT_GT(st.accepted, N / 10) << "too few acceptances for the test to mean anything";
  const auto [pstat, pdf] = sample(nullptr, AcceptRule::Exact, 2'000'000, nullptr);
  EXPECT_LT(pstat, chi2_critical(pdf)) << "plain samples do not fit: the reference distribution is wrong";
  const auto [bstat, bdf] = sample(&tree, AcceptRule::NoResidual, 3'000'000, nullptr);
  EXPECT_GT(bstat, chi2_critical(bdf)) << "the biased control passed: the test has no power";
}

}  // namespace
}  // namespace updraft
