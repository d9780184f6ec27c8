// The suffix drafts' calibration (rollout/spec/suffix_calibration.h): what verification accepts of
// grafted nodes, per source and matched context, and what grafting makes of it:
//  - trials are grafted nodes whose parent was accepted; kappa converges to the accepted share of
//    the trials' probabilities (with its prior), per cell, and drifts back to 1 without trials;
//  - a calibrated chain falls with depth and stops at the bar; scores follow; nodes carry what the
//    calibration needs; lookups report their match length;
//  - bad input is refused.
#include "rollout/spec/suffix_calibration.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/core/error.h"
#include "rollout/spec/suffix_drafts.h"

namespace updraft {
namespace {

// A root with one grafted chain of `n` nodes (tokens 1..n) from `src`, each of conditional
// probability `prob`, continuing a match of `match` tokens.
DraftTree grafted_chain(int n, DraftSource src, float prob, int32_t match) {
  DraftTree t = DraftTree::single(0);
  t.source = {DraftSource::kEagle};
  t.proposers = {1};
  t.graft_prob = {0.f};
  t.graft_match = {0};
  for (int i = 1; i <= n; ++i) {
    t.tokens.push_back(i);
    t.parent.push_back(i - 1);
    t.depth.push_back(i);
    t.score.push_back(0.f);
    t.source.push_back(src);
    t.proposers.push_back(static_cast<uint8_t>(1u << static_cast<int>(src)));
    t.graft_prob.push_back(prob);
    t.graft_match.push_back(match + i - 1);
  }
  return t;
}

TEST(SuffixCalibration, KappaIsTheAcceptedShareOfTheProbabilitiesPerSourceAndMatchedContext) {
  SuffixCalibration cal;
  EXPECT_DOUBLE_EQ(cal.kappa(DraftSource::kHistory, 3), 1.0);  // no evidence: the index's word
  // History nodes after a 3-token match (one node: matched context 3, bucket "up to 4"), point
  // masses, accepted one round in four; group nodes after a 20-token match, accepted at 0.5 each.
  const DraftTree h = grafted_chain(1, DraftSource::kHistory, 1.0f, 3);
  const DraftTree g = grafted_chain(1, DraftSource::kGroup, 0.5f, 20);
  for (int r = 0; r < 2000; ++r) {
    cal.observe(h, r % 4 == 0 ? std::vector<int32_t>{1} : std::vector<int32_t>{});
    cal.observe(g, {1});
  }
  // Steady state of the decayed sums (decay 0.99 per observed round, two rounds per iteration):
  // history accepted 0.25 and probability 1 per iteration, group 1 and 0.5.
  const double per = 1.0 / (1.0 - SuffixCalibration::kDecay * SuffixCalibration::kDecay);
  const double k = SuffixCalibration::kPrior;
  EXPECT_NEAR(cal.kappa(DraftSource::kHistory, 4), (0.25 * per + k) / (per + k), 0.02);
  EXPECT_NEAR(cal.kappa(DraftSource::kGroup, 16), (per + k) / (0.5 * per + k), 0.01);
  EXPECT_DOUBLE_EQ(cal.calibrated(DraftSource::kGroup, 16, 0.9), 1.0);  // capped at 1
  EXPECT_NEAR(cal.calibrated(DraftSource::kHistory, 2, 0.8), 0.8 * cal.kappa(DraftSource::kHistory, 2), 1e-12);
  // Other cells saw nothing: the history after a long match, the group after a short one.
  EXPECT_DOUBLE_EQ(cal.kappa(DraftSource::kHistory, 20), 1.0);
  EXPECT_DOUBLE_EQ(cal.kappa(DraftSource::kGroup, 5), 1.0);
  EXPECT_DOUBLE_EQ(cal.trials(DraftSource::kGroup, 8), 0.0);
}

TEST(SuffixCalibration, OnlyNodesVerificationReachedAreTrialsAndEachCountsInItsOwnBucket) {
  SuffixCalibration cal;
  // A chain of 6 history nodes after a 3-token match: matched contexts 3..8 (buckets: 3, 4 | 5, 6,
  // 7 | 8). The first two accepted: nodes 1, 2 and 3 were reached (3 rejected), 4-6 were not.
  cal.observe(grafted_chain(6, DraftSource::kHistory, 1.0f, 3), {1, 2});
  EXPECT_DOUBLE_EQ(cal.trials(DraftSource::kHistory, 4), 2.0);
  EXPECT_DOUBLE_EQ(cal.accepted(DraftSource::kHistory, 4), 2.0);
  EXPECT_DOUBLE_EQ(cal.trials(DraftSource::kHistory, 5), 1.0);
  EXPECT_DOUBLE_EQ(cal.accepted(DraftSource::kHistory, 5), 0.0);
  EXPECT_DOUBLE_EQ(cal.trials(DraftSource::kHistory, 8), 0.0);
  // Drafter nodes are no trials: a tree grafted nowhere teaches nothing but the decay.
  DraftTree plain = DraftTree::single(0);
  plain.tokens = {0, 1};
  plain.parent = {-1, 0};
  plain.depth = {0, 1};
  plain.score = {0, 0};
  cal.observe(plain, {1});
  EXPECT_DOUBLE_EQ(cal.trials(DraftSource::kHistory, 4), 2.0 * SuffixCalibration::kDecay);
}

TEST(SuffixCalibration, ACellThatStoppedGraftingDriftsBackToTheIndexsWord) {
  SuffixCalibration cal;
  const DraftTree h = grafted_chain(1, DraftSource::kHistory, 1.0f, 3);
  for (int r = 0; r < 300; ++r)
    cal.observe(h, {});  // never accepted
  EXPECT_LT(cal.kappa(DraftSource::kHistory, 3), 0.05);
  const DraftTree none = DraftTree::single(0);
  for (int r = 0; r < 600; ++r)
    cal.observe(none, {});
  EXPECT_GT(cal.kappa(DraftSource::kHistory, 3), 0.8);
}

TEST(SuffixCalibration, RefusesWhatIsNoGraft) {
  SuffixCalibration cal;
  EXPECT_THROW(cal.kappa(DraftSource::kEagle, 5), CheckFailure);
  EXPECT_THROW(cal.kappa(DraftSource::kGroup, 0), CheckFailure);
  EXPECT_THROW(cal.observe(grafted_chain(2, DraftSource::kGroup, 1.0f, 3), {3}), CheckFailure);  // no node 3
  DraftTree bad = grafted_chain(2, DraftSource::kGroup, 1.0f, 3);
  bad.graft_match.pop_back();
  EXPECT_THROW(cal.observe(bad, {}), CheckFailure);
}

SourcedCandidate cand(int32_t token, int32_t parent, int32_t depth, double prob, double path_prob, int32_t match) {
  SuffixCandidate c;
  c.token = token;
  c.parent = parent;
  c.depth = depth;
  c.prob = prob;
  c.path_prob = path_prob;
  return {c, DraftSource::kHistory, match};
}

TEST(SuffixGraft, ACalibratedChainFallsWithDepthAndStopsAtTheBar) {
  // A history chain seen once after a 3-token match: probability 1 at every depth by the index.
  const SuffixFound found = {{cand(5, -1, 1, 1.0, 1.0, 3), cand(6, 0, 2, 1.0, 1.0, 3), cand(7, 1, 3, 1.0, 1.0, 3),
                              cand(8, 2, 4, 1.0, 1.0, 3)}};
  SuffixCalibration cal;  // learns that such nodes are accepted half the time: kappa about 0.5
  DraftTree teach = grafted_chain(1, DraftSource::kHistory, 1.0f, 3);
  DraftTree teach5 = grafted_chain(1, DraftSource::kHistory, 1.0f, 5);
  for (int r = 0; r < 2000; ++r) {
    cal.observe(teach, r % 2 == 0 ? std::vector<int32_t>{1} : std::vector<int32_t>{});
    cal.observe(teach5, r % 2 == 0 ? std::vector<int32_t>{1} : std::vector<int32_t>{});
  }
  const double k4 = cal.kappa(DraftSource::kHistory, 4), k5 = cal.kappa(DraftSource::kHistory, 5);
  ASSERT_NEAR(k4, 0.5, 0.03);
  ASSERT_NEAR(k5, 0.5, 0.03);
  // At the bar 0.2 the index's word grafts all four; calibrated, 0.5 and 0.25 pass, 0.125 does not.
  DraftTree a = DraftTree::single(4), b = DraftTree::single(4);
  EXPECT_EQ(graft_candidates(a, found, 16, 0.2), 4);
  EXPECT_EQ(graft_candidates(b, found, 16, 0.2, &cal), 2);
  ASSERT_EQ(b.size(), 3);
  EXPECT_NEAR(b.score[1], std::log(k4), 1e-5);
  EXPECT_NEAR(b.score[2], std::log(k4 * k4), 1e-5);
  // The nodes carry what the calibration learns from: their probability and matched context.
  EXPECT_EQ(b.graft_prob, (std::vector<float>{0.f, 1.f, 1.f}));
  EXPECT_EQ(b.graft_match, (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(a.graft_match, (std::vector<int32_t>{0, 3, 4, 5, 6}));
}

TEST(SuffixDrafts, LookupsReportTheirMatchLength) {
  SuffixOptions o;
  o.mode = SuffixMode::kHistory;
  SuffixDrafts sd(o);
  sd.join(1, 0, {1, 2});
  sd.leave(1, true, {1, 2}, {3, 4, 5, 6, 7, 8});
  const SuffixFound f = sd.lookup(2, {9, 4, 5, 6}, 4);  // matches "4 5 6" (3 tokens), then 7 8
  ASSERT_EQ(f.size(), 1u);
  ASSERT_EQ(f[0].size(), 2u);
  EXPECT_EQ(f[0][0].match, 3);
  EXPECT_EQ(f[0][1].matched(), 4);
}

}  // namespace
}  // namespace updraft
