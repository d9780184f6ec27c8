// DrawChooser (rollout/spec/draft_sampling.h): auto draws until it has measured enough nodes,
// turns to the top tokens once their acceptance leads by the margin and back only when the draws'
// leads again, starts afresh after a drafter swap; on and off never change; names parse.
#include "rollout/spec/draft_sampling.h"

#include <gtest/gtest.h>

#include "kernels/core/error.h"

namespace updraft {
namespace {

TEST(DrawChooser, FollowsTheHigherMeasuredAcceptanceWithHysteresis) {
  DrawChooser c;
  EXPECT_TRUE(c.draw()) << "nothing measured: draw";
  c.observe(0.5 * 20, 0.9 * 20, 20);  // the top tokens far ahead, but too few nodes yet
  EXPECT_TRUE(c.draw());
  c.observe(0.5 * 20, 0.9 * 20, 20);
  EXPECT_FALSE(c.draw()) << "40 nodes with the top tokens ahead";
  for (int i = 0; i < 400; ++i)  // the draws' acceptance catches up, within the margin
    c.observe(0.9, 0.905, 1);
  EXPECT_FALSE(c.draw()) << "a lead inside the margin does not switch back";
  for (int i = 0; i < 400; ++i)
    c.observe(0.95, 0.80, 1);
  EXPECT_TRUE(c.draw());
  EXPECT_NEAR(c.snapshot().overlap, 0.95, 0.02);
  EXPECT_NEAR(c.snapshot().top, 0.80, 0.02);
  c.observe(0, 0, 0);  // a step with nothing measured changes nothing
  EXPECT_TRUE(c.draw());
  c.observe(0.1 * 40, 0.9 * 40, 40);
  EXPECT_FALSE(c.draw());
  c.drafter_changed();
  EXPECT_TRUE(c.draw()) << "a new drafter is measured afresh";
  EXPECT_EQ(c.snapshot().nodes, 0);
}

TEST(DrawChooser, OnAndOffAreFixedAndNamesParse) {
  DrawChooser on(DraftSampling::kOn), off(DraftSampling::kOff);
  for (int i = 0; i < 100; ++i) {
    on.observe(0.1, 0.9, 1);
    off.observe(0.9, 0.1, 1);
  }
  EXPECT_TRUE(on.draw());
  EXPECT_FALSE(off.draw());
  for (DraftSampling m : {DraftSampling::kAuto, DraftSampling::kOn, DraftSampling::kOff})
    EXPECT_EQ(parse_draft_sampling(draft_sampling_name(m)), m);
  EXPECT_THROW(parse_draft_sampling("sometimes"), Error);
}

}  // namespace
}  // namespace updraft
