// Lossless sampled speculation: on the tiny random policy and drafter of spec_engine_test.cc,
// 12000 seeded two-token samples from speculative decoding (tree, chain, a chain that stops
// early, a busy engine that preempts and changes depth every step; a chain's drafts are drawn
// from the drafter's distribution, under the request's top_k and top_p too) fit the policy's
// exact joint distribution of the first two tokens (computed by enumerating the first token); the
// same test rejects NoResidual and PointResidual (negative controls) and accepts plain decoding;
// logprobs equal the exact log-probabilities.
#include <gtest/gtest.h>

#include <cmath>

#include "rollout/engine/engine.h"
#include "tests/rollout/chi2.h"
#include "tests/rollout/random_depth.h"
#include "tests/rollout/spec_fixture.h"

namespace updraft {
namespace {

using namespace testing_chi2;

using SpecEngine = testing_spec::SpecFixture;

TEST_F(SpecEngine, SampledSpeculationFollowsThePolicyDistribution) {
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9};
  const int64_t N = 12000, V = cfg_.vocab_size;
  const SpecSettings tree{3, 3, 8}, chain{4, 1, 5};
  struct Params {
    float temp;
    int32_t top_k;
    float top_p;
  };
  for (const auto& [temp, top_k, top_p] : std::vector<Params>{{1.3f, 0, 1.f}, {0.8f, 6, 0.9f}}) {
    const auto joint = testing_spec::exact_pairs(*model_, prompt, temp, top_k, top_p);
    auto sample = [&](const SpecSettings* s, AcceptRule rule, uint64_t seed0, SpecStats* st) {
      std::vector<GenRequest> reqs;
      for (int64_t i = 0; i < N; ++i) {
        GenRequest r = req(prompt, temp, 2, seed0 + static_cast<uint64_t>(i));
        r.params.top_k = top_k;
        r.params.top_p = top_p;
        reqs.push_back(r);
      }
      return run(reqs, 64, s, rule, st);
    };
    auto fit = [&](const std::vector<GenResult>& res) {
      std::vector<int64_t> counts(static_cast<size_t>(V * V), 0);
      for (const auto& r : res)
        ++counts[r.tokens[0] * V + r.tokens[1]];
      return chi2_fit(counts, joint, N);
    };
    SpecStats st, cst;
    const auto spec = sample(&tree, AcceptRule::Exact, 1'000'000, &st);
    const auto [stat, df] = fit(spec);
    EXPECT_LT(stat, chi2_critical(df)) << "speculative samples do not fit the policy (temperature " << temp << ")";
    EXPECT_GT(st.accepted, N / 10) << "too few acceptances for the test to mean anything";
    if (top_k == 0) {
      // The chain (one draft per level, a one-hot proposal): the random drafter's top token is
      // accepted less often than the tree's three candidates, so this case carries its own
      // biased control to show that the test still has power.
      const auto [cstat, cdf] = fit(sample(&chain, AcceptRule::Exact, 4'000'000, &cst));
      EXPECT_LT(cstat, chi2_critical(cdf)) << "chain samples do not fit the policy (temperature " << temp << ")";
      EXPECT_GT(cst.accepted, N / 100) << "too few chain acceptances for the test to mean anything";
      // A chain that stops once its drafts are jointly unlikely: rounds of several depths.
      const SpecSettings stopping{4, 1, 5, 0.05};
      SpecStats sst;
      const auto [sstat, sdf] = fit(sample(&stopping, AcceptRule::Exact, 7'000'000, &sst));
      EXPECT_LT(sstat, chi2_critical(sdf))
          << "stopping chain samples do not fit the policy (temperature " << temp << ")";
      const double per_round = static_cast<double>(sst.drafted) / static_cast<double>(sst.rounds);
      EXPECT_GT(per_round, 1.2);
      EXPECT_LT(per_round, 3.8);
      const auto [cbstat, cbdf] = fit(sample(&chain, AcceptRule::NoResidual, 5'000'000, nullptr));
      EXPECT_GT(cbstat, chi2_critical(cbdf)) << "the biased chain control passed: the test has no power";
      // The chain's drafts are drawn from the drafter's distribution (drafter/proposer.h): left
      // as a point mass's residual when rejected, they bias the output.
      const auto [cpstat, cpdf] = fit(sample(&chain, AcceptRule::PointResidual, 8'000'000, nullptr));
      EXPECT_GT(cpstat, chi2_critical(cpdf)) << "the sampled-draft control passed: the test has no power";
      drafts_ = DraftSampling::kOff;  // the top tokens as point masses, q only measured
      const auto [tstat, tdf] = fit(sample(&chain, AcceptRule::Exact, 12'000'000, nullptr));
      EXPECT_LT(tstat, chi2_critical(tdf)) << "top-token chain samples do not fit the policy";
      drafts_ = DraftSampling::kOn;
    } else {  // the chain's drafts drawn under the request's top_k and top_p
      const auto [fstat, fdf] = fit(sample(&chain, AcceptRule::Exact, 9'000'000, &cst));
      EXPECT_LT(fstat, chi2_critical(fdf)) << "filtered chain samples do not fit the policy";
      EXPECT_GT(cst.accepted, N / 100) << "too few chain acceptances for the test to mean anything";
    }
    for (size_t i = 0; i < 200; ++i) {  // logprobs are the policy's own
      const auto& r = spec[i];
      double p0 = 0;
      for (int64_t b = 0; b < V; ++b)
        p0 += joint[r.tokens[0] * V + b];
      EXPECT_NEAR(r.logprobs[0], std::log(p0), 1e-4);
      EXPECT_NEAR(r.logprobs[1], std::log(joint[r.tokens[0] * V + r.tokens[1]] / p0), 1e-4);
    }
    if (top_k == 0) {
      // A busy engine: requests join in waves while others decode, a KV cache small enough to
      // preempt (and recompute) sequences, and a random speculation depth every step. The
      // requests run on to 9 tokens (so that they grow); the first two are fitted.
      EngineOptions o;
      o.block_size = 4;
      o.max_batch = 64;
      o.prefill_chunk = 7;
      o.spec = chain;
      o.draft_sampling = DraftSampling::kAuto;  // draws or top tokens, as measured, step by step
      o.kv_cache_bytes = 30 * KvCache::block_bytes(model_->kv_shape(), o.block_size);
      Engine e(*model_, o, draft_.get());
      RandomDepth depth(chain, 3);
      e.set_depth_chooser(&depth);
      std::vector<GenResult> busy;
      for (int64_t i = 0; i < N; ++i) {
        GenRequest r = req(prompt, temp, 9, 6'000'000 + static_cast<uint64_t>(i));  // longer: they grow
        r.params.top_k = top_k;
        r.params.top_p = top_p;
        e.submit(r);
        if (i % 97 == 96)
          for (GenResult& g : e.step())
            busy.push_back(std::move(g));
      }
      for (GenResult& g : e.run())
        busy.push_back(std::move(g));
      ASSERT_EQ(static_cast<int64_t>(busy.size()), N);
      EXPECT_GT(e.stats().preemptions, 0) << "the cache should be small enough to preempt";
      const auto [ystat, ydf] = fit(busy);
      EXPECT_LT(ystat, chi2_critical(ydf))
          << "a busy engine's samples do not fit the policy (temperature " << temp << ")";
    }
    const auto [pstat, pdf] = fit(sample(nullptr, AcceptRule::Exact, 2'000'000, nullptr));
    EXPECT_LT(pstat, chi2_critical(pdf)) << "plain samples do not fit: the reference distribution is wrong";
    const auto [bstat, bdf] = fit(sample(&tree, AcceptRule::NoResidual, 3'000'000, nullptr));
    EXPECT_GT(bstat, chi2_critical(bdf)) << "the biased control passed: the test has no power";
  }
}

// Bad requests refused by a speculating engine leave the others exactly as a clean run has them.

}  // namespace
}  // namespace updraft
