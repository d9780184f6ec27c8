// Adaptive depth with suffix drafts (rollout/spec/adaptive.h): the tokens they add beyond the
// drafter's run at every depth, learned from every grafting step's runs, and the suffix class
// that lets a step choose its depth by how far its candidates reach. Synthetic engines: step time,
// acceptance and suffix runs are made up, so the right depth is known.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "rollout/spec/adaptive.h"
#include "rollout/spec/suffix_drafts.h"

namespace updraft {
namespace {

// Suffix drafts add tokens at every depth, and overlap with the drafter: a drafter whose own run
// pays for its cost over plain decoding no longer does when suffix drafts already give most of
// those tokens. Here the history's run is 3 in half the steps: plain + suffix drafts emit 2.5
// tokens per step for 1 ms; depth 1, 1.3 from the drafter's run (accepted 30%) plus 1.35 more
// for 1.2 ms. Without suffix drafts depth 1 pays (1.3 tokens against 1 for 1.2x the time); with
// them the chooser must keep plain, and it must count them only in the steps that graft them.
TEST(AdaptiveDepth, CountsTheSuffixDraftsTokensAtEveryDepth) {
  for (const bool suffix : {false, true}) {
    AdaptiveDepth a(SpecSettings{1, 1, 2});
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(0, 1);
    int64_t at1 = 0;
    for (int i = 0; i < 3000; ++i) {
      StepSample s;
      s.batch = 1;
      s.depth = a.choose(1, 0, suffix ? 1 : AdaptiveDepth::kNoSuffix);  // one class: the lookup tells nothing
      s.seconds = s.depth == 0 ? 1e-3 : 1.2e-3;
      const int32_t run = s.depth == 1 && u(rng) < 0.3 ? 1 : 0, history = suffix && u(rng) < 0.5 ? 3 : 0;
      if (s.depth == 1)
        s.spec.add_round(1, run, 1);
      s.suffix = suffix ? 1 : AdaptiveDepth::kNoSuffix;
      if (suffix)
        s.runs.push_back({static_cast<int32_t>(s.depth), run, history});
      s.extra_tokens = std::max(0, history - run);
      a.observe(s);
      at1 += i >= 1000 && s.depth == 1;
    }
    if (suffix)
      EXPECT_LT(at1, 2000 * 6 / 100) << "the drafter ran although suffix drafts made it a loss";
    else
      EXPECT_GT(at1, 2000 * 94 / 100) << "the drafter's gain over plain decoding was missed";
  }
}

// One grafting step teaches what suffix drafts add at every depth (adaptive.h): a round that ran
// the drafter to depth D, its accepted path a drafter run of a and a suffix run of s, adds
// max(0, s - min(a, d)) at d <= D or where a < D; where a = D < d, the drafter's further run
// is weighed by the estimated reach.
TEST(AdaptiveDepth, AGraftingStepTeachesTheSuffixDraftsWorthAtEveryDepth) {
  AdaptiveDepth a(SpecSettings{4, 1, 5});
  StepSample learn;  // acceptance first: half the rounds reach 4, half stop at 2
  learn.batch = 1;
  learn.depth = 4;
  learn.seconds = 1e-3;
  for (int i = 0; i < 10; ++i)
    learn.spec.add_round(4, i % 2 ? 4 : 2, 4);
  a.observe(learn);
  const std::vector<double> r = a.snapshot().reach;
  ASSERT_EQ(r.size(), 4u);
  ASSERT_LT(r[2], 0.9);  // the prior pulls the estimates up, not to 1

  StepSample s;
  s.batch = 2;
  s.depth = 2;
  s.seconds = 2e-3;
  s.suffix = 1;
  s.runs = {{2, 2, 4}, {2, 1, 3}};  // the drafter ran to its depth and was outrun; it stopped at 1
  a.observe(s);
  const double ran_to_2[5] = {4, 3, 2, 1 - r[2] / r[1] + 1, 1 - r[2] / r[1] + 1 - r[3] / r[1]};
  const double stopped_at_1[5] = {3, 2, 2, 2, 2};
  const AdaptiveDepth::Snapshot snap = a.snapshot();
  for (size_t d = 0; d < 5; ++d)
    EXPECT_NEAR(snap.cells[1][d].extra[1], (ran_to_2[d] + stopped_at_1[d]) / 2, 1e-9) << "depth " << d;  // bucket 2-3

  // Drawn drafts: up to the depth run (and everywhere the drafter stopped short) only what the
  // suffix run adds beyond the drafter's, s - a; deeper as before.
  AdaptiveDepth b(SpecSettings{4, 1, 5});
  b.observe(learn);
  s.runs = {{2, 2, 4, true}, {2, 1, 3, true}};
  b.observe(s);
  const double drawn_to_2[5] = {2, 2, 2, ran_to_2[3], ran_to_2[4]};
  const AdaptiveDepth::Snapshot drawn = b.snapshot();
  for (size_t d = 0; d < 5; ++d)
    EXPECT_NEAR(drawn.cells[1][d].extra[1], (drawn_to_2[d] + 2) / 2, 1e-9) << "drawn, depth " << d;
}

// A depth not chosen still learns what suffix drafts add there. A strong drafter and no suffix
// matches hold depth 4 for 2000 steps; then the drafter drifts (each position accepted at 0.3)
// and the history matches runs of 5 in half the steps, which makes suffix drafts alone (depth 0)
// the best: the chooser must get there within a few hundred steps, not wait for its exploration
// of stale depths (one step per depth in 2000) to relearn them one burst at a time.
TEST(AdaptiveDepth, ADepthNotChosenLearnsWhatSuffixDraftsAddThere) {
  AdaptiveDepth a(SpecSettings{4, 1, 5});
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> u(0, 1);
  std::map<int64_t, int64_t> late;  // depths run in the second stage after its first 300 steps
  for (int i = 0; i < 4000; ++i) {
    const bool drifted = i >= 2000;
    StepSample s;
    s.batch = 1;
    s.depth = a.choose(1, 0, 1);  // one suffix class throughout: the lookup tells nothing here
    s.seconds = 1e-3 * (1 + 0.15 * static_cast<double>(s.depth));
    int32_t run = 0;
    while (run < s.depth && u(rng) < (drifted ? 0.3 : 0.9))
      ++run;
    const int32_t history = drifted && u(rng) < 0.5 ? 5 : 0;
    if (s.depth > 0)
      s.spec.add_round(s.depth, run, s.depth);
    s.suffix = 1;
    s.runs.push_back({static_cast<int32_t>(s.depth), run, history});
    s.extra_tokens = std::max(0, history - run);
    a.observe(s);
    if (i == 1999) {
      ASSERT_EQ(a.snapshot().current[0], 4) << "the strong drafter's depth";
    }
    if (i >= 2300)
      ++late[s.depth];
  }
  EXPECT_GT(late[0], 1700 * 90 / 100) << "depth 0 ran " << late[0] << " of 1700 steps; depth 4 " << late[4];
}

// Steps at batch 1 of a synthetic engine: in 30% of them the history matches 6 tokens ahead
// (class 2, grafting `grafted` rows), else nothing (class 0); the drafter accepts each position
// at `accept`; timing(s) sets a step's times from its depth and rows. Returns the steps after the
// first 1000 of 4000 by [class][depth], and their totals per class in [class][-1].
template <class Timing>
std::map<int, std::map<int64_t, int64_t>> matched_steps(AdaptiveDepth& a, uint64_t seed, double accept, int64_t grafted,
                                                        Timing timing) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::map<int, std::map<int64_t, int64_t>> late;
  for (int i = 0; i < 4000; ++i) {
    const bool match = u(rng) < 0.3;
    StepSample s;
    s.batch = 1;
    s.suffix = match ? 2 : 0;
    s.depth = a.choose(1, 0, s.suffix);
    s.grafted_rows = match ? grafted : 0;
    s.forward_rows = s.depth + 1 + s.grafted_rows;
    timing(s);
    int32_t run = 0;
    while (run < s.depth && u(rng) < accept)
      ++run;
    if (s.depth > 0)
      s.spec.add_round(s.depth, run, s.depth);
    const int32_t history = match ? 6 : 0;
    s.runs.push_back({static_cast<int32_t>(s.depth), run, history});
    s.extra_tokens = std::max(0, history - run);
    a.observe(s);
    if (i >= 1000) {
      ++late[s.suffix][s.depth];
      ++late[s.suffix][-1];
    }
  }
  return late;
}

// The suffix class, known before the depth is chosen, lets a step whose history matches far
// ahead leave the drafter out and one with no match draft deep. A strong drafter (each position
// accepted at 0.85); in 30% of the steps the history matches 6 tokens ahead (class 2), else
// nothing (class 0). Matched steps do best at depth 0 (7 tokens for 1 ms against 7 for 1.6 ms at
// depth 4), the others at depth 4 (3.7 tokens for 1.6 ms against 1 for 1 ms).
TEST(AdaptiveDepth, TheSuffixClassLetsAFarMatchLeaveTheDrafterOut) {
  AdaptiveDepth a(SpecSettings{4, 1, 5});
  auto late = matched_steps(a, 13, 0.85, 0, [](StepSample& s) { s.seconds = 1e-3 * (1 + 0.15 * s.depth); });
  EXPECT_GT(late[2][0], late[2][-1] * 85 / 100)
      << "far matches ran the drafter: depth 4 in " << late[2][4] << " of " << late[2][-1];
  EXPECT_GT(late[0][4], late[0][-1] * 85 / 100) << "no match, yet depth 0 in " << late[0][0] << " of " << late[0][-1];
}

// Grafted suffix nodes are verification rows: the forward's cost curve prices them per class, and
// they are not charged to their depth's cell, so plain decoding does not look dear to the steps
// that graft none. A weak drafter (each position accepted at 0.2) makes plain decoding the best
// when nothing matches (70% of the steps); in the others the history matches 6 tokens ahead and
// 12 suffix nodes are grafted per step. The forward costs 0.9 + 0.1 rows ms, a draft level 0.25
// ms, the rest of a step 0.1 ms: plain decoding 1.1 ms, a matched step at depth 0 2.3 ms for 7
// tokens (the best there too). Charged to depth 0, the matched steps would raise plain's cost
// about 30% and make depth 1 look the better choice for the unmatched ones.
TEST(AdaptiveDepth, GraftedRowsArePricedByTheForwardCurveNotChargedToTheirDepth) {
  AdaptiveDepth a(SpecSettings{4, 1, 5});
  auto late = matched_steps(a, 17, 0.2, 12, [](StepSample& s) {
    s.forward_seconds = 1e-3 * (0.9 + 0.1 * static_cast<double>(s.forward_rows));
    s.draft_seconds = 0.25e-3 * static_cast<double>(s.depth);
    s.seconds = s.forward_seconds + s.draft_seconds + 0.1e-3;
  });
  const AdaptiveDepth::Snapshot snap = a.snapshot();
  EXPECT_NEAR(snap.cells[0][0].cost, 1.1e-3, 0.05e-3) << "plain's cost, its grafted rows' share out";
  EXPECT_NEAR(snap.cells[0][0].graft[2], 12, 1e-9);
  // A matched step at depth 0: 7 tokens for plain's 1.1 ms and 12 grafted rows on the curve.
  EXPECT_NEAR(a.predicted(0, 0, 2), 7 / 2.3e-3, 0.05 * 7 / 2.3e-3);
  EXPECT_GT(late[0][0], late[0][-1] * 85 / 100) << "no match, yet depth 1 in " << late[0][1] << " of " << late[0][-1];
  EXPECT_GT(late[2][0], late[2][-1] * 85 / 100) << "far matches ran the drafter: depth 1 in " << late[2][1];
}

// The graft budget (DepthChooser::row_worth): a suffix node pays for its verification row only if
// its path probability is above the tokens the step would emit without suffix drafts in the time
// the row takes. A made-up forward curve, flat to 8 rows and then 0.075 ms a row (a CPU turning
// compute-bound): at batch 1 a row costs 1% of a 1.1 ms plain step and the bar is near 0; at batch
// 8 a row costs 0.075 ms against 7 tokens/ms and the bar is about 0.5.
TEST(AdaptiveDepth, TheGraftBudgetFollowsWhatARowCostsAtTheBatch) {
  AdaptiveDepth a(SpecSettings{4, 1, 5});
  const auto F = [](int64_t rows) {  // seconds
    const double r = static_cast<double>(rows);
    return 1e-3 * (rows <= 8 ? 1.0 + 0.0075 * (r - 1) / 7 : 1.0075 + 0.075 * (r - 8));
  };
  const auto step = [&](int64_t batch, int64_t rows, int64_t grafted, bool cold) {
    StepSample s;
    s.batch = batch;
    s.forward_rows = rows;
    s.forward_seconds = F(s.forward_rows);
    s.seconds = s.forward_seconds + 0.1e-3;
    s.cold = cold;  // the curve learns from it, not the cell
    if (grafted > 0) {
      s.suffix = 2;
      s.grafted_rows = grafted;
      s.runs.assign(static_cast<size_t>(batch), {0, 0, 2});
    }
    a.observe(s);
  };
  for (int i = 0; i < 20; ++i)
    for (int64_t rows : {1, 2, 4, 8, 16, 32, 64})
      step(1, rows, 0, true);  // the curve at every row count
  for (int i = 0; i < 20; ++i) {
    step(1, 1, 0, false);  // plain decoding at batch 1 and 8
    step(8, 8, 0, false);
    step(1, 4, 3, false);  // 3 grafted nodes at batch 1, 2 per sequence at batch 8
    step(8, 24, 16, false);
  }
  // Batch 1: rows 1 + 3 -> 5; one more costs 0.0075 / 7 ms, at 1 / 1.1 tokens/ms.
  const double at1 = a.row_worth(1, 0, 2), at8 = a.row_worth(8, 0, 2);
  EXPECT_NEAR(at1, 0.0075 / 7 / 1.1, 0.1 * 0.0075 / 7 / 1.1);
  // Batch 8: rows 8 + 16 -> 24; 8 more cost 0.6 ms, 0.075 ms a row, at 8 / 1.1075 tokens/ms.
  EXPECT_NEAR(at8, 0.075 * 8 / 1.1075, 0.1 * 0.075 * 8 / 1.1075);
  EXPECT_EQ(a.row_worth(8, 0, AdaptiveDepth::kNoSuffix), 0.0);
  EXPECT_EQ(AdaptiveDepth(SpecSettings{4, 1, 5}).row_worth(8, 0, 2), 0.0) << "nothing measured: every node";
}

// graft_candidates' min_prob: a candidate below it adds no node (nor do its descendants), though
// it still joins a node the drafter proposed.
TEST(SuffixGraft, ACandidateBelowTheBarAddsNoRow) {
  DraftTree t = DraftTree::single(7);  // a drafter's chain 7 -> 3
  t.tokens = {7, 3};
  t.parent = {-1, 0};
  t.depth = {0, 1};
  t.score = {0, -0.1f};
  const auto cand = [](int32_t token, int32_t parent, double p, DraftSource src) {
    SuffixCandidate c;
    c.token = token;
    c.parent = parent;
    c.path_prob = c.prob = p;
    return SourcedCandidate{c, src};
  };
  const SuffixFound found = {{cand(3, -1, 0.4, DraftSource::kGroup), cand(5, 0, 0.35, DraftSource::kGroup)},
                             {cand(9, -1, 0.9, DraftSource::kHistory), cand(2, 0, 0.6, DraftSource::kHistory)}};
  DraftTree a = t;
  EXPECT_EQ(graft_candidates(a, found, 16, 0.5), 2);  // 9 and 9 -> 2; 3 -> 5 (0.35) is under the bar
  const std::vector<int32_t> tokens = {7, 3, 9, 2};   // children by score: 3 (-0.1) before 9 (log 0.9)
  EXPECT_EQ(a.tokens, tokens);
  EXPECT_EQ(a.proposers[1],
            (1u << static_cast<int>(DraftSource::kEagle)) | (1u << static_cast<int>(DraftSource::kGroup)))
      << "the group's 3 (0.4) joins the drafter's node though under the bar";
  DraftTree b = t;
  EXPECT_EQ(graft_candidates(b, found, 16, 0.0), 3);
}

}  // namespace
}  // namespace updraft
