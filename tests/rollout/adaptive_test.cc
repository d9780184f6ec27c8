// Adaptive speculation's per-step depth choice (rollout/spec/adaptive.h) on synthetic engines:
// step time and acceptance are made up, so the right answer is known for every live batch.
#include "rollout/spec/adaptive.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "kernels/core/error.h"

namespace updraft {
namespace {

// A made-up engine: a step of B sequences at depth d runs a forward of B (d + 1) rows in
// base + per_row * rows seconds and d draft levels of per_draft * B seconds each (times noise),
// and draft position j is accepted with probability reach^(j+1), conditionally. With `curves` the
// steps report their forward and draft times (as the engine does), else only the total.
struct SyntheticEngine {
  double base = 1e-3, per_row = 2e-5, per_draft = 0, reach = 0.8, noise = 0.05;
  bool curves = false;
  // With `pairs`, a speculative step reports the pairs its drafter absorbed (draft_rows): one per
  // sequence, and one more per plain step since the drafter last ran (as the engine keeps them).
  bool pairs = false;
  int64_t plain_since = 0;
  std::mt19937_64 rng{11};

  double tokens_per_seq(int64_t d) const {
    double t = 1, p = 1;
    for (int64_t j = 0; j < d; ++j)
      t += (p *= reach);
    return t;
  }
  double step_seconds(int64_t B, int64_t d) const {
    return base + per_row * static_cast<double>(B * (d + 1)) + per_draft * static_cast<double>(B * d);
  }
  double true_tps(int64_t B, int64_t d) const { return tokens_per_seq(d) * static_cast<double>(B) / step_seconds(B, d); }
  // The backlog choose() is told of with `pairs`: what each sequence kept beyond a step's pairs.
  int64_t backlog(int64_t B, int64_t D) const { return pairs ? B * std::max<int64_t>(0, plain_since - D) : 0; }
  // canary > 0: one sequence also ran at that depth (DepthChooser::canary), absorbing its backlog.
  StepSample run(int64_t B, int64_t d, int64_t canary = 0) {
    std::uniform_real_distribution<double> u(0, 1);
    StepSample s;
    s.batch = B;
    s.depth = d;
    const double jitter = 1 + noise * (2 * u(rng) - 1);
    s.seconds = step_seconds(B, d) * jitter;
    if (canary > d) {
      s.mixed = true;
      s.seconds += (per_row + per_draft) * static_cast<double>(canary - d) * jitter;
      s.draft_rows = d > 0 ? 0 : 1 + plain_since;
      int64_t acc = 0;
      while (acc < canary && u(rng) < reach)
        ++acc;
      s.spec.add_round(canary, acc, canary);
    }
    if (curves) {
      s.forward_rows = B * (d + 1);
      s.forward_seconds = (base + per_row * static_cast<double>(s.forward_rows)) * jitter;
      s.draft_seconds = per_draft * static_cast<double>(B * d) * jitter;
    }
    if (pairs) {
      s.draft_rows += d > 0 ? B * (1 + plain_since) : 0;
      plain_since = d > 0 ? 0 : plain_since + 1;
    }
    for (int64_t b = 0; b < B && d > 0; ++b) {
      int64_t acc = 0;
      while (acc < d && u(rng) < reach)
        ++acc;
      s.spec.add_round(d, acc, d);
    }
    return s;
  }
};

int64_t best_depth(const SyntheticEngine& e, int64_t B, int64_t D) {
  int64_t best = 0;
  for (int64_t d = 1; d <= D; ++d)
    if (e.true_tps(B, d) > e.true_tps(B, best))
      best = d;
  return best;
}

TEST(AdaptiveDepth, BucketsByLiveBatch) {
  EXPECT_EQ(AdaptiveDepth::bucket(1), 0);
  EXPECT_EQ(AdaptiveDepth::bucket(2), 1);
  EXPECT_EQ(AdaptiveDepth::bucket(3), 1);
  EXPECT_EQ(AdaptiveDepth::bucket(4), 2);
  EXPECT_EQ(AdaptiveDepth::bucket(31), 4);
  EXPECT_EQ(AdaptiveDepth::bucket(32), 5);
  EXPECT_EQ(AdaptiveDepth::bucket(64), 6);
  EXPECT_EQ(AdaptiveDepth::bucket(1000), 6);
}

TEST(AdaptiveDepth, MeasuresSpeculationFirstThenPicksTheBestDepthPerBatch) {
  const int64_t D = 4;
  AdaptiveDepth a(SpecSettings{D, 1, D + 1});
  SyntheticEngine env;
  env.per_row = 5e-5;  // verification stops being free as the batch grows
  EXPECT_EQ(a.choose(8), D) << "nothing measured: speculate at full depth, which measures it";
  a.observe(env.run(8, D));
  // An RL-shaped run: 64 sequences shrinking to a tail of one, many times.
  const std::vector<int64_t> live = {64, 64, 64, 48, 32, 24, 16, 12, 8, 6, 4, 3, 2, 2, 1, 1, 1};
  int64_t steps = 0;
  double error_sum = 0;  // the prediction error's EMA at the end of each of the last 100 runs
  for (int rep = 0; rep < 300; ++rep) {
    for (int64_t B : live) {
      a.observe(env.run(B, a.choose(B)));
      ++steps;
    }
    if (rep >= 200)
      error_sum += a.snapshot().prediction_error;
  }
  const AdaptiveDepth::Snapshot s = a.snapshot();
  EXPECT_LE(static_cast<double>(s.explore_steps), 0.05 * static_cast<double>(s.steps) + 1) << "exploration bounded";
  EXPECT_GT(s.explore_steps, 10) << "every cell gets measured";
  for (const int64_t B : {1, 2, 4, 8, 16, 32, 64}) {
    const int b = AdaptiveDepth::bucket(B);
    const int64_t chosen = s.current[static_cast<size_t>(b)], best = best_depth(env, B, D);
    EXPECT_GE(env.true_tps(B, chosen), 0.95 * env.true_tps(B, best))
        << "batch " << B << ": depth " << chosen << " where " << best << " is best";
  }
  EXPECT_EQ(s.current[0], best_depth(env, 1, D)) << "the tail speculates deep";
  EXPECT_LT(s.current[6], D) << "a full batch does not verify the full chain";
  ASSERT_EQ(s.reach.size(), static_cast<size_t>(D));
  for (size_t j = 0; j < s.reach.size(); ++j)  // rounds reaching position j + 1 among those that tried it
    EXPECT_NEAR(s.reach[j], std::pow(0.8, static_cast<double>(j + 1)), 0.06) << "position " << j;
  // Within a bucket the batch varies (48 and 64 share one), so predictions are not exact; the
  // EMA swings with the steps it last saw (0.2-0.7 over one run), so its mean over runs is checked.
  EXPECT_GT(s.prediction_error, 0.0);
  EXPECT_LT(error_sum / 100, 0.5);
}

// Two unlucky first rounds (the second draft rejected both times, where 19 in 20 are accepted)
// must not hold a fresh chooser at depth 1 for good: a depth not chosen measures nothing past its
// own positions, so only the acceptance prior brings the deeper ones back.
TEST(AdaptiveDepth, UnluckyFirstRoundsDoNotRuleDeepDepthsOut) {
  const int64_t D = 4;
  AdaptiveDepth a(SpecSettings{D, 1, D + 1});
  SyntheticEngine env;
  env.reach = 0.95;
  env.curves = true;     // as the engine reports: with the curves, a depth predicted far behind is not explored
  env.per_draft = 4e-4;  // a draft level 0.4 of a plain step: depth 2 costs 1.3x depth 1
  for (int i = 0; i < 2; ++i) {
    StepSample s = env.run(1, a.choose(1));
    s.spec = SpecStats{};
    s.spec.add_round(s.depth, std::min<int64_t>(1, s.depth), s.depth);
    a.observe(s);
  }
  for (int i = 0; i < 2000; ++i)
    a.observe(env.run(1, a.choose(1)));
  const int64_t chosen = a.snapshot().current[0];
  EXPECT_GE(env.true_tps(1, chosen), 0.95 * env.true_tps(1, best_depth(env, 1, D))) << "depth " << chosen;
  EXPECT_GT(a.snapshot().reach[D - 1], 0.5);
}

// With the cost curves (forward time by rows, draft time by batch) the chooser predicts depths it
// has not measured in a bucket: at a large batch, where speculating costs several plain steps, it
// does not spend steps measuring them, and it still picks well everywhere.
TEST(AdaptiveDepth, CostCurvesSpareExplorationWhereSpeculationCannotPay) {
  const int64_t D = 4;
  AdaptiveDepth a(SpecSettings{D, 1, D + 1});
  SyntheticEngine env;
  env.curves = true;
  env.per_row = 5e-5;
  env.per_draft = 1e-5;
  const std::vector<int64_t> live = {64, 64, 64, 48, 32, 24, 16, 12, 8, 6, 4, 3, 2, 2, 1, 1, 1};
  std::map<int64_t, int64_t> explored_at_64;
  for (int rep = 0; rep < 300; ++rep)
    for (int64_t B : live) {
      const int64_t d = a.choose(B);
      if (B == 64 && a.snapshot().last_explored)
        ++explored_at_64[d];
      a.observe(env.run(B, d));
    }
  const AdaptiveDepth::Snapshot s = a.snapshot();
  for (const int64_t B : {1, 2, 4, 8, 16, 32, 64}) {
    const int b = AdaptiveDepth::bucket(B);
    const int64_t chosen = s.current[static_cast<size_t>(b)], best = best_depth(env, B, D);
    EXPECT_GE(env.true_tps(B, chosen), 0.95 * env.true_tps(B, best))
        << "batch " << B << ": depth " << chosen << " where " << best << " is best";
  }
  // The chain of 4 runs at 0.72x plain's throughput at batch 64 here: below explore_floor.
  EXPECT_LE(explored_at_64[4], 1) << "the full chain at batch 64 is far behind on the curves: not worth measuring";
  EXPECT_LT(static_cast<double>(s.explore_steps), 0.02 * static_cast<double>(s.steps));
}

TEST(AdaptiveDepth, AUselessDrafterFallsToPlainAndAGoodOneComesBack) {
  const int64_t D = 4;
  AdaptiveDepth a(SpecSettings{D, 1, D + 1});
  SyntheticEngine env;
  env.reach = 0.02;
  for (int i = 0; i < 400; ++i)
    a.observe(env.run(4, a.choose(4)));
  AdaptiveDepth::Snapshot s = a.snapshot();
  EXPECT_EQ(s.current[2], 0) << "a drafter that accepts nothing is not worth a draft step";
  // A new drafter that accepts well: exploration measures it and the bucket goes back to it.
  a.drafter_changed(2);
  env.reach = 0.9;
  for (int i = 0; i < 600; ++i)
    a.observe(env.run(4, a.choose(4)));
  s = a.snapshot();
  EXPECT_EQ(s.current[2], best_depth(env, 4, D));
}

// A worker's chooser settled on plain decoding at batch 8 (its drafter accepted nothing) is handed a
// refreshed drafter that accepts well. Plain steps there build a backlog within a few steps, and
// no step explores with one, so without a canary the new drafter went unmeasured as long as the
// batch lived (all 300 steps here).
TEST(AdaptiveDepth, ACanaryMeasuresANewDrafterWhileTheBatchDecodesPlainly) {
  const int64_t D = 4, B = 8;
  AdaptiveDepth a(SpecSettings{D, 1, D + 1});
  SyntheticEngine env;
  env.curves = true;
  env.pairs = true;
  env.per_draft = 2e-5;
  env.reach = 0.02;
  auto step = [&](int64_t& canaries) {
    const int64_t d = a.choose(B, env.backlog(B, D));
    canaries += a.canary();
    a.observe(env.run(B, d, a.canary() ? D : 0));
    return d;
  };
  int64_t canaries = 0, speculating = 0;
  for (int i = 0; i < 400; ++i)
    step(canaries);
  ASSERT_EQ(a.snapshot().current[3], 0);
  EXPECT_EQ(canaries, 0) << "a drafter measured at the full depth needs no canary";
  a.drafter_changed(2);
  env.reach = 0.9;
  ASSERT_GT(env.backlog(B, D), 1000);
  for (int i = 0; i < 300; ++i)
    speculating += step(canaries) > 0 && i >= 200;
  EXPECT_GE(canaries, 1);
  EXPECT_LE(canaries, 16) << "one round per canary step: 16 measure the new drafter";
  EXPECT_EQ(a.snapshot().current[3], best_depth(env, B, D));
  EXPECT_GE(speculating, 90);
}

// Steps soon after a long prefill or an idle gap run slow (the weights have left the caches) and
// reach the plain depth most (a group's first steps): counted, they would make plain look dearer
// than it is. Marked cold, a step teaches acceptance but nothing about cost.
TEST(AdaptiveDepth, ColdStepsTeachAcceptanceButNotCost) {
  AdaptiveDepth a(SpecSettings{2, 1, 3});
  SyntheticEngine env;
  env.noise = 0;
  for (int i = 0; i < 10; ++i)
    a.observe(env.run(4, 0));
  const AdaptiveDepth::Cell warm = a.snapshot().cells[2][0];
  ASSERT_EQ(warm.samples, 10);
  StepSample slow = env.run(4, 0);
  slow.seconds *= 2.2;
  slow.cold = true;
  a.observe(slow);
  EXPECT_EQ(a.snapshot().cells[2][0].samples, warm.samples);
  EXPECT_DOUBLE_EQ(a.snapshot().cells[2][0].cost, warm.cost);
  StepSample spec = env.run(4, 2);  // a cold speculative step still counts its rounds
  spec.cold = true;
  const double reach0 = a.snapshot().reach[0];
  a.observe(spec);
  EXPECT_NE(a.snapshot().reach[0], reach0);
  EXPECT_EQ(a.snapshot().cells[2][2].samples, 0);
  // Control: a slow step not marked cold, counted, raises the plain cost (1.8x: a lone step over
  // 2x would be taken for a stall, OneStalledStepDoesNotPriceTheBestDepthOut).
  StepSample counted = env.run(4, 0);
  counted.seconds *= 1.8;
  a.observe(counted);
  EXPECT_GT(a.snapshot().cells[2][0].cost, warm.cost * 1.1);
}

// A fresh engine's first drafter pass writes a fresh draft cache: on the 2-core VM each new 2 MiB
// page took 5-11 ms to fault in, and that first speculative step took 24 ms against 2.5 ms
// after. Taken as the drafter's cost (its cell's and the curves' first sample), it priced every
// depth out: the cost curves then showed them all far behind, so none was explored again, and
// the engine decoded plainly for good (1.9 tokens a step where the drafter gives 5.5). Nor may
// the pairs kept through the plain steps after it: every explored step absorbs them first, and
// not counting such a step's cost left the explored depths unmeasured for good.
TEST(AdaptiveDepth, ASlowFirstDrafterPassDoesNotPriceSpeculationOutForGood) {
  const int64_t D = 4;
  AdaptiveDepth a(SpecSettings{D, 1, D + 1});
  SyntheticEngine env;
  env.curves = true;
  env.pairs = true;
  env.reach = 0.85;
  env.per_row = 5e-5;
  env.per_draft = 9e-5;
  ASSERT_EQ(a.choose(1), D) << "nothing measured: speculate at full depth, which measures it";
  StepSample first = env.run(1, D);
  first.seconds += 0.024;  // the fresh pages, all in the drafter's passes
  first.draft_seconds += 0.024;
  a.observe(first);
  int64_t speculating = 0;
  for (int i = 0; i < 400; ++i) {
    const int64_t d = a.choose(1);
    speculating += i >= 300 && d > 0;
    a.observe(env.run(1, d));
  }
  EXPECT_EQ(a.snapshot().current[0], best_depth(env, 1, D));
  EXPECT_GE(speculating, 90) << "still decoding plainly 300 steps after one slow first pass";
}

TEST(AdaptiveDepth, HysteresisKeepsTheDepthWhenTwoAreEqual) {
  AdaptiveOptions o;
  o.explore_share = 0;  // no exploration: only the choice itself
  AdaptiveDepth a(SpecSettings{2, 1, 3}, o);
  SyntheticEngine env;
  env.noise = 0.02;
  env.reach = 0.5;
  env.base = 1e-3;
  env.per_row = 1e-3 / 3.0;  // depth 0 and depth 2 predict almost the same throughput
  int64_t changes = 0, last = -1;
  for (int i = 0; i < 500; ++i) {
    const int64_t d = a.choose(1);
    changes += last >= 0 && d != last;
    last = d;
    a.observe(env.run(1, d));
  }
  EXPECT_LT(changes, 20) << "the depth flaps between near-equal choices";
}

// One stalled step (the OS, a neighbour on the host: 12 ms against 2.4 measured on the 2-core VM)
// must not price the best depth out: once it is no longer chosen it is no longer measured, so an
// inflated estimate would stay until the cell goes stale.
TEST(AdaptiveDepth, OneStalledStepDoesNotPriceTheBestDepthOut) {
  AdaptiveOptions o;
  o.explore_share = 0;  // no exploration: what the estimates alone decide
  const int64_t D = 4;
  AdaptiveDepth a(SpecSettings{D, 1, D + 1}, o);
  SyntheticEngine env;
  env.noise = 0.02;
  env.reach = 0.85;
  env.per_row = 5e-5;
  env.per_draft = 9e-5;  // the built-in pair's shape: depth 4 pays about 6% more than depth 3
  ASSERT_EQ(best_depth(env, 1, D), D);
  for (int64_t d = 0; d <= D; ++d)  // every depth measured, as after a warm-up
    for (int i = 0; i < 5; ++i)
      a.observe(env.run(1, d));
  for (int i = 0; i < 50; ++i)
    a.observe(env.run(1, a.choose(1)));
  ASSERT_EQ(a.choose(1), D);
  StepSample stall = env.run(1, D);
  stall.seconds *= 5;
  const double observed0 = a.snapshot().observed_seconds;
  ASSERT_EQ(a.snapshot().stall_steps, 0);
  a.observe(stall);
  // Counted as a stall, with the time it took beyond its cell's cost (about 4/5 of it).
  EXPECT_EQ(a.snapshot().stall_steps, 1);
  EXPECT_GT(a.snapshot().stall_seconds, 0.7 * stall.seconds);
  EXPECT_LT(a.snapshot().stall_seconds, 0.85 * stall.seconds);
  EXPECT_DOUBLE_EQ(a.snapshot().observed_seconds, observed0 + stall.seconds);
  for (int i = 0; i < 50; ++i)
    a.observe(env.run(1, a.choose(1)));
  EXPECT_EQ(a.choose(1), D) << "a single stall moved the choice off the best depth for good";
  // A real change (drafting got dearer: every step at depth 4 now over twice as slow) is followed.
  env.per_draft = 1e-3;
  ASSERT_LT(best_depth(env, 1, D), D);
  for (int i = 0; i < 20; ++i)
    a.observe(env.run(1, a.choose(1)));
  EXPECT_LT(a.choose(1), D) << "a lasting change of cost was taken for stalls";
  EXPECT_GE(a.snapshot().stall_steps, 1 + 3) << "the change's first steps count as stalls until it is followed";
}

TEST(AdaptiveDepth, TreesChooseBetweenTheFullSettingsAndPlainAndFixedDepthIsObeyed) {
  AdaptiveDepth tree(SpecSettings{3, 3, 8});
  SyntheticEngine env;
  for (int i = 0; i < 200; ++i) {
    const int64_t d = tree.choose(2);
    EXPECT_TRUE(d == 0 || d == 3) << d;
    tree.observe(env.run(2, d));
  }
  AdaptiveOptions fixed;
  fixed.fixed_depth = 2;
  AdaptiveDepth f(SpecSettings{4, 1, 5}, fixed);
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(f.choose(i + 1), 2);
  fixed.fixed_depth = 2;
  EXPECT_THROW(AdaptiveDepth(SpecSettings{3, 3, 8}, fixed), Error) << "a tree has no depth 2";
}

}  // namespace
}  // namespace updraft
