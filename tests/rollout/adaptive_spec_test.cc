// The adaptive-speculation estimator on synthetic runs: what it can predict before plain is measured, the depth it
// picks for a drafter whose acceptance falls off after the first position, for a good drafter,
// and for a useless one, the optimistic costing of unmeasured depths being replaced by what a
// run measures, and trees (no shorter chains).
#include "rollout/worker/adaptive_spec.h"

#include <gtest/gtest.h>

#include "kernels/core/error.h"

namespace updraft {
namespace {

// Counters of `rounds` rounds at depth `depth` whose accepted length reached j + 1 in a share
// reach[j] of them.
SpecStats rounds_with(int64_t rounds, int64_t depth, const std::vector<double>& reach) {
  SpecStats s;
  s.rounds = rounds;
  s.drafted = rounds * depth;
  for (int64_t j = 0; j < depth; ++j) {
    const auto n = static_cast<int64_t>(reach[static_cast<size_t>(j)] * static_cast<double>(rounds) + 0.5);
    s.accepted_at.push_back(n);
    s.accepted += n;
  }
  return s;
}

// Feeds a run at `depth` costing `cost` seconds per round (per token for plain).
void run(AdaptiveSpec& a, int64_t depth, double cost, const std::vector<double>& reach) {
  const int64_t rounds = 100;
  const SpecStats s = depth == 0 ? SpecStats{} : rounds_with(rounds, depth, reach);
  const int64_t tokens = depth == 0 ? rounds : rounds + s.accepted;
  a.observe(depth, cost * static_cast<double>(rounds), tokens, s);
}

TEST(AdaptiveSpec, MeasuresTheFullDepthThenPlainThenPicksTheFastest) {
  AdaptiveSpec a(4, true, 0.5);
  EXPECT_EQ(a.choose(), 4);
  EXPECT_EQ(a.predicted_tps(4), 0.0);
  const std::vector<double> falls_off = {0.5, 0.1, 0.02, 0.0};  // tau 1.62 at depth 4
  run(a, 4, 1.6, falls_off);
  EXPECT_EQ(a.choose(), 4);  // nothing else can be predicted before plain is measured
  EXPECT_FALSE(a.plain_measured());
  EXPECT_EQ(a.predicted_tps(1), 0.0);
  EXPECT_NEAR(a.predicted_tps(4), 1.62 / 1.6, 1e-9);
  run(a, 0, 1.0, {});
  EXPECT_TRUE(a.plain_measured());
  EXPECT_NEAR(a.predicted_tps(0), 1.0, 1e-9);
  // Depth 1 unmeasured: costed 1.0 + 0.6 / 4 = 1.15 per round, 1.5 tokens: 1.30 tokens/s beats
  // depth 4's 1.01, depth 2's 1.6 / 1.3 = 1.23 and plain.
  EXPECT_NEAR(a.predicted_tps(1), 1.5 / 1.15, 1e-9);
  EXPECT_EQ(a.choose(), 1);
  // Measured, depth 1 costs more than the guess (1.4 per round: 1.07 tokens/s); depth 2's
  // guess (1.23) is now the best. Measured at 1.45 (1.10), it loses to depth 3's guess (1.62 /
  // 1.45 = 1.12); measured at 1.55 (1.05), depth 3 loses, and with every depth measured depth 2
  // is the choice.
  run(a, 1, 1.4, falls_off);
  EXPECT_NEAR(a.predicted_tps(1), 1.5 / 1.4, 1e-9);
  EXPECT_EQ(a.choose(), 2);
  run(a, 2, 1.45, falls_off);
  EXPECT_EQ(a.choose(), 3);
  run(a, 3, 1.55, falls_off);
  EXPECT_EQ(a.choose(), 2);
}

TEST(AdaptiveSpec, AGoodDrafterKeepsTheFullDepthAndAUselessOneFallsToPlain) {
  AdaptiveSpec good(4, true, 0.5);
  run(good, 4, 1.6, {0.95, 0.9, 0.85, 0.8});  // tau 4.5
  run(good, 0, 1.0, {});
  EXPECT_EQ(good.choose(), 4);
  AdaptiveSpec useless(4, true, 0.5);
  run(useless, 4, 1.6, {0.0, 0.0, 0.0, 0.0});
  run(useless, 0, 1.0, {});
  EXPECT_EQ(useless.choose(), 0);
  // The drafter improves: the probes at the full depth raise reach, and speculation resumes.
  for (int i = 0; i < 4; ++i)
    run(useless, 4, 1.6, {0.95, 0.9, 0.85, 0.8});
  EXPECT_EQ(useless.choose(), 4);
}

TEST(AdaptiveSpec, EstimatesAreMovingAveragesOverRuns) {
  AdaptiveSpec a(2, true, 0.5);
  run(a, 2, 2.0, {0.8, 0.4});
  run(a, 2, 1.0, {0.4, 0.0});
  EXPECT_NEAR(a.predicted_tps(2), (1 + 0.6 + 0.2) / 1.5, 1e-9);
  // A shorter run updates only the positions it drafted.
  run(a, 1, 1.0, {1.0});
  EXPECT_NEAR(a.predicted_tps(1), (1 + 0.8) / 1.0, 1e-9);
  EXPECT_NEAR(a.predicted_tps(2), (1 + 0.8 + 0.2) / 1.5, 1e-9);
  // Empty runs change nothing.
  a.observe(2, 0.0, 10, rounds_with(10, 2, {1.0, 1.0}));
  a.observe(2, 1.0, 0, rounds_with(10, 2, {1.0, 1.0}));
  a.observe(2, 1.0, 10, SpecStats{});
  EXPECT_NEAR(a.predicted_tps(2), (1 + 0.8 + 0.2) / 1.5, 1e-9);
}

TEST(AdaptiveSpec, TreesChooseBetweenTheFullSettingsAndPlainOnly) {
  AdaptiveSpec tree(4, false, 0.5);
  run(tree, 4, 1.6, {0.5, 0.1, 0.02, 0.0});
  run(tree, 0, 1.2, {});
  EXPECT_EQ(tree.choose(), 4);  // 1.62 / 1.6 = 1.01 beats plain's 0.83; depth 1 is never picked
  run(tree, 0, 0.6, {});        // plain's cost averages to 0.9: 1.11 tokens/s
  EXPECT_EQ(tree.choose(), 0);
  EXPECT_THROW(AdaptiveSpec(0, true, 0.5), Error);
  EXPECT_THROW(AdaptiveSpec(4, true, 0.0), Error);
}

}  // namespace
}  // namespace updraft
