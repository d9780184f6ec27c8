// Adaptive speculation (rollout/spec/adaptive.h): the parts of a step that are not its depth's
// typical cost are priced apart. A step that also prefilled is priced as its forward times
// F(decoding rows) / F(all rows) on the cost curve, not by its share of the rows; one that absorbed
// a cheap backlog less its drafter time beyond d E.
#include <gtest/gtest.h>

#include <algorithm>

#include "rollout/spec/adaptive.h"

namespace updraft {
namespace {

// A made-up forward that reads its weights once for any rows (1 ms) plus 20 us a row, and a draft
// level of 50 us; each round of depth 4 accepts 3 drafts.
constexpr double kBase = 1e-3, kRow = 2e-5, kLevel = 5e-5;

StepSample step(int64_t batch, int64_t depth, int64_t prefill) {
  StepSample s;
  s.batch = batch;
  s.depth = depth;
  s.forward_rows = batch * (depth + 1) + prefill;
  s.prefill_rows = prefill;
  s.forward_seconds = kBase + kRow * static_cast<double>(s.forward_rows);
  s.draft_seconds = kLevel * static_cast<double>(depth);
  s.draft_rows = depth > 0 ? batch * (depth + 1) : 0;
  s.seconds = s.forward_seconds + s.draft_seconds;
  for (int64_t i = 0; i < batch && depth > 0; ++i)
    s.spec.add_round(depth, std::min<int64_t>(3, depth), depth);
  return s;
}

// A serving stream at batch 4 that admits a request as each one finishes: batch 3 is seen only in
// the steps that prefill the newcomer's prompt (50 rows). Priced by rows, plain decoding there
// measured 9x cheaper per sequence than it is, and those steps all decoded plainly.
TEST(AdaptiveDepth, APrefillsShareIsPricedOnTheCostCurve) {
  AdaptiveOptions o;
  o.explore_share = 0;
  AdaptiveDepth a(SpecSettings{4, 1, 5}, o);
  for (int i = 0; i < 20; ++i) {
    a.observe(step(4, i % 2 == 0 ? 0 : 4, 0));
    a.observe(step(3, i % 2 == 0 ? 0 : 4, 50));
  }
  const AdaptiveDepth::Snapshot s = a.snapshot();
  const int b3 = AdaptiveDepth::bucket(3);
  const double alone = (kBase + 3 * kRow) / 3;  // plain decoding of 3 sequences, per sequence
  EXPECT_NEAR(s.cells[b3][0].cost, alone, 0.2 * alone);
  const double spec = (kBase + 15 * kRow + 4 * kLevel) / 3;
  EXPECT_NEAR(s.cells[b3][4].cost, spec, 0.2 * spec);
  EXPECT_GT(a.choose(3), 0) << "4 tokens a sequence for 1.4x plain's cost: speculate";
}

// At batch 1 the first step of each sequence absorbs its prompt (30 pairs here, 0.6 ms): counted
// whole in the depth it ran at, it made that depth look dearer than when run alone.
TEST(AdaptiveDepth, ACheapBacklogsAbsorptionIsPricedApart) {
  AdaptiveOptions o;
  o.explore_share = 0;
  AdaptiveDepth a(SpecSettings{4, 1, 5}, o);
  for (int i = 0; i < 200; ++i) {
    const int64_t d = i % 5;
    StepSample s = step(1, d, 0);
    if (d == 4 && i % 4 == 0) {  // a sequence's first step
      s.draft_rows = 30;
      s.draft_seconds += 30 * 2e-5;
      s.seconds += 30 * 2e-5;
    }
    a.observe(s);
  }
  const double typical = kBase + 5 * kRow + 4 * kLevel;
  EXPECT_NEAR(a.snapshot().cells[0][4].cost, typical, 0.03 * typical);
}

}  // namespace
}  // namespace updraft
