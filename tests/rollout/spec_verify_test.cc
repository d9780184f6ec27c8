// Verification unit tests on hand-built trees (rollout/spec/verifier.h): greedy walks the argmax
// path and adds the bonus; sampled verification emits each token with the policy's probability
// (goodness of fit over many seeds), with point-mass and sampled drafts, while the deliberately
// wrong rules are caught by the same test; SpecStats' tau and conditional acceptance.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "drafter/proposer.h"
#include "rollout/spec/spec_stats.h"
#include "rollout/spec/verifier.h"
#include "tests/rollout/chi2.h"

namespace updraft {
namespace {

using namespace testing_chi2;

DraftTree tree(std::vector<int32_t> tokens, std::vector<int32_t> parent, std::vector<int32_t> depth) {
  DraftTree t;
  t.score.assign(tokens.size(), 0.f);
  t.tokens = std::move(tokens);
  t.parent = std::move(parent);
  t.depth = std::move(depth);
  return t;
}

TEST(SpecVerify, GreedyFollowsTheArgmaxPathAndAddsTheBonus) {
  // Root 0 -> children (tokens 3, 1); node 1 (token 3) -> child token 2; V = 4.
  const DraftTree t = tree({0, 3, 1, 2}, {-1, 0, 0, 1}, {0, 1, 1, 2});
  const int64_t V = 4;
  std::vector<float> logits = {0, 1, 0, 5,   // root: argmax 3 -> node 1
                               0, 0, 4, 0,   // node 1: argmax 2 -> node 3
                               9, 0, 0, 0,   // node 2 (unused)
                               0, 7, 0, 0};  // node 3: argmax 1 = bonus
  std::vector<float> logp(logits.size());
  for (int r = 0; r < 4; ++r) {
    double s = 0;
    for (int i = 0; i < V; ++i)
      s += std::exp(logits[r * V + i]);
    for (int i = 0; i < V; ++i)
      logp[r * V + i] = logits[r * V + i] - static_cast<float>(std::log(s));
  }
  const Verdict v = verify_greedy(t, logits.data(), logp.data(), V);
  EXPECT_EQ(v.nodes, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(v.tokens, (std::vector<int32_t>{3, 2, 1}));
  EXPECT_FLOAT_EQ(v.logprobs[2], logp[3 * V + 1]);
  logits[3] = 0;  // root's argmax becomes token 1 (lowest id among the 1s): node 2, then its argmax 0
  const Verdict w = verify_greedy(t, logits.data(), logp.data(), V);
  EXPECT_EQ(w.tokens, (std::vector<int32_t>{1, 0}));
}

// The first emitted token over 40000 seeds: its distribution must be p(.|root) whatever the
// children are; NoResidual over-weights the tried children and must fail the same test.
TEST(SpecVerify, SampledFirstTokenFollowsThePolicyAndTheControlDoesNot) {
  const int64_t V = 6;
  const DraftTree t = tree({0, 2, 4, 5, 1}, {-1, 0, 0, 1, 1}, {0, 1, 1, 2, 2});
  const std::vector<float> root = {0.05f, 0.1f, 0.3f, 0.15f, 0.25f, 0.15f};
  std::vector<float> probs(static_cast<size_t>(5 * V));
  for (int r = 0; r < 5; ++r)
    for (int i = 0; i < V; ++i)
      probs[r * V + i] = r == 0 ? root[i] : (i == r ? 0.5f : 0.1f);
  const std::vector<double> p(root.begin(), root.end());
  for (AcceptRule rule : {AcceptRule::Exact, AcceptRule::NoResidual}) {
    std::vector<int64_t> counts(V, 0);
    const int64_t N = 40000;
    for (int64_t s = 0; s < N; ++s)
      ++counts[verify_sampled(t, probs.data(), V, static_cast<uint64_t>(s), 0, rule).tokens[0]];
    const auto [stat, df] = chi2_fit(counts, p, N);
    if (rule == AcceptRule::Exact)
      EXPECT_LT(stat, chi2_critical(df));
    else
      EXPECT_GT(stat, chi2_critical(df)) << "the biased control passed: the test has no power";
  }
}

// A sampled draft (drawn per seed from its q, with the drafter's own coin) tried first, then a
// point-mass sibling: the first emitted token must follow p; leaving a point mass's residual after
// rejecting the sampled draft (PointResidual) or drawing the bonus from the full p (NoResidual)
// must not.
TEST(SpecVerify, SampledDraftsAreAcceptedByTheirOwnDistribution) {
  const int64_t V = 6, S = DraftTree::kSampledSupport;
  const std::vector<float> root = {0.05f, 0.1f, 0.3f, 0.15f, 0.25f, 0.15f};
  const std::vector<float> q = {0.3f, 0.3f, 0.1f, 0.1f, 0.1f, 0.1f};
  std::vector<float> probs(static_cast<size_t>(3 * V), 1.f / V);  // the children's rows: never reached here
  std::copy(root.begin(), root.end(), probs.begin());
  const std::vector<double> p(root.begin(), root.end());
  for (AcceptRule rule : {AcceptRule::Exact, AcceptRule::PointResidual, AcceptRule::NoResidual}) {
    std::vector<int64_t> counts(V, 0);
    const int64_t N = 40000;
    for (int64_t s = 0; s < N; ++s) {
      const auto seed = static_cast<uint64_t>(s);
      int32_t x = 0;  // x ~ q with the drafter's coin, apart from the verifier's
      for (float u = draft_coin(seed, 0), cum = q[0]; cum <= u && x < V - 1;)
        cum += q[static_cast<size_t>(++x)];
      const int32_t y = x == 4 ? 1 : 4;  // a point mass beside it
      DraftTree t = tree({0, x, y}, {-1, 0, 0}, {0, 1, 1});
      t.drawn = true;
      t.q_row = {-1, 0, -1};
      t.q_tokens.assign(static_cast<size_t>(S), -1);
      t.q_probs.assign(static_cast<size_t>(S), 0.f);
      for (int64_t j = 0; j < V; ++j) {
        t.q_tokens[static_cast<size_t>(j)] = static_cast<int32_t>(j);
        t.q_probs[static_cast<size_t>(j)] = q[static_cast<size_t>(j)];
      }
      ++counts[verify_sampled(t, probs.data(), V, seed, 0, rule).tokens[0]];
    }
    const auto [stat, df] = chi2_fit(counts, p, N);
    if (rule == AcceptRule::Exact)
      EXPECT_LT(stat, chi2_critical(df));
    else
      EXPECT_GT(stat, chi2_critical(df)) << "a biased control passed: the test has no power";
  }
}

TEST(SpecStatsTest, TauAndConditionalAcceptance) {
  SpecStats s;
  s.add_round(4, 0);
  s.add_round(4, 2);
  s.add_round(4, 4);
  s.add_round(4, 1);
  EXPECT_DOUBLE_EQ(s.tau(), 1.0 + 7.0 / 4.0);
  EXPECT_EQ(s.accepted_at, (std::vector<int64_t>{3, 2, 1, 1}));
  EXPECT_DOUBLE_EQ(s.alpha(0), 3.0 / 4.0);  // 0-alpha: first draft accepted in 3 of 4 rounds
  EXPECT_DOUBLE_EQ(s.alpha(1), 2.0 / 3.0);  // given the first was accepted
  EXPECT_DOUBLE_EQ(s.alpha(3), 1.0);
  EXPECT_DOUBLE_EQ(s.alpha(5), 0.0);
  SpecStats t;
  t.add_round(4, 3);
  t.merge(s);
  EXPECT_EQ(t.rounds, 5);
  EXPECT_EQ(t.accepted_at, (std::vector<int64_t>{4, 3, 2, 1}));
}

}  // namespace
}  // namespace updraft
