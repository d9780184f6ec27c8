// Adaptive speculation (rollout/spec/adaptive.h): a step that also prefilled is priced as its
// forward times F(decoding rows) / F(all rows) on the cost curve, not by its share of the rows.
#include <gtest/gtest.h>

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
    s.spec.add_round(depth, 3, depth);
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

}  // namespace
}  // namespace updraft
