// What the engine tells the depth chooser (StepSample, DepthChooser::canary), on the speculation
// tests' tiny random pair:
//  - a chain that stopped early counts its undrafted positions as tried;
//  - a step that also prefilled reports its prefill rows;
//  - a canary: when the chooser asks for one in a step that does not run the full depth, exactly
//    one decoding sequence drafts at the full settings beside the others; the step is mixed, the
//    canary's round is tried to the full depth, and greedy output stays token-identical to plain
//    decoding.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rollout/engine/engine.h"
#include "tests/rollout/random_depth.h"
#include "tests/rollout/spec_fixture.h"
#include "tests/rollout/test_models.h"

namespace updraft {
namespace {

using SpecEngine = testing_spec::SpecFixture;
using Canary = testing_spec::SpecFixture;

// What the depth chooser learns acceptance from: a chain that stopped early (stop_below) counts
// the positions it did not draft as tried and not reached, so that 1 + the sum of the positions'
// acceptance is the tokens a round at that depth brings. Counting only the drafted positions
// made each deep position's acceptance that of the confident rounds alone: at chain 8 stop 0.35
// the chooser expected about 6.9 tokens a round where 5.9 came, and speculated at live batch 8,
// where that overestimate outweighed what plain decoding's rows cost less.
TEST_F(SpecEngine, TheChooserCountsAStoppedChainsUndraftedPositionsAsTried) {
  EngineOptions o;
  o.kv_cache_bytes = 64 << 20;
  o.max_batch = 4;
  o.spec = SpecSettings{6, 1, 7, 0.005};
  Engine e(*model_, o, draft_.get());
  RandomDepth chooser(o.spec, 5);
  chooser.keep = true;
  e.set_depth_chooser(&chooser);
  for (const GenRequest& r : greedy_requests())
    e.submit(r);
  e.run();
  int64_t stopped = 0, rounds = 0;
  for (const StepSample& s : chooser.seen) {
    if (s.depth == 0 || s.mixed || s.spec.rounds == 0)
      continue;
    rounds += s.spec.rounds;
    stopped += s.spec.rounds * s.depth - s.spec.drafted;
    ASSERT_GE(static_cast<int64_t>(s.spec.tried_at.size()), s.depth);
    for (int64_t j = 0; j < s.depth; ++j)
      EXPECT_EQ(s.spec.tried_at[static_cast<size_t>(j)], s.spec.rounds) << "depth " << s.depth << ", position " << j;
  }
  EXPECT_GT(rounds, 50);
  EXPECT_GT(stopped, 20) << "too few chains stopped early to exercise the count";
}

// A step that also prefilled reports its prefill rows and its whole time: the chooser prices the
// prefill's share on its cost curve (AdaptiveDepth.APrefillsShareIsPricedOnTheCostCurve).
TEST_F(SpecEngine, AStepThatPrefillsReportsItsPrefillRows) {
  EngineOptions o;
  o.kv_cache_bytes = 64 << 20;
  o.max_batch = 4;
  o.spec = SpecSettings{4, 1, 5};
  Engine e(*model_, o, draft_.get());
  RandomDepth chooser(o.spec, 3);
  chooser.keep = true;
  e.set_depth_chooser(&chooser);
  for (const GenRequest& r : greedy_requests())
    e.submit(r);
  int64_t prefilled = 0;
  while (e.has_work()) {
    const int64_t prompt0 = e.stats().prompt_tokens;
    const size_t seen0 = chooser.seen.size();
    e.step();
    if (chooser.seen.size() == seen0)
      continue;  // nothing decoded
    const StepSample& s = chooser.seen.back();
    EXPECT_EQ(s.prefill_rows, e.stats().prompt_tokens - prompt0) << "step " << e.stats().steps;
    EXPECT_LT(s.prefill_rows, s.forward_rows);
    prefilled += s.prefill_rows > 0;
  }
  EXPECT_GT(prefilled, 20) << "too few admissions beside decoding sequences";
}

// Always `depth`; a canary whenever `want`.
class ScriptedDepth final : public DepthChooser {
 public:
  int64_t choose(int64_t, int64_t, int) override { return depth; }
  void observe(const StepSample& s) override { seen.push_back(s); }
  void drafter_changed(uint64_t) override {}
  bool canary() const override { return want; }
  int64_t depth = 0;
  bool want = true;
  std::vector<StepSample> seen;
};

TEST_F(Canary, OneSequenceDraftsAtTheFullSettingsAndGreedyStaysLossless) {
  std::vector<GenRequest> reqs;
  for (int i = 0; i < 12; ++i)
    reqs.push_back(req(testing_spec::pattern_prompt(i, 3 + (i * 5) % 13, cfg_.vocab_size), 0.f, 10 + (i * 7) % 23, 0));
  const auto plain = run(reqs, 6, nullptr);
  EngineOptions o;
  o.max_batch = 6;
  o.kv_cache_bytes = 64 << 20;
  o.prefill_chunk = 7;
  o.spec = SpecSettings{4, 1, 5, 0.02};  // some chains stop early: still tried to the full depth
  for (const int64_t depth : {int64_t{0}, int64_t{2}, int64_t{4}}) {
    Engine e(*model_, o, draft_.get());
    ScriptedDepth chooser;
    chooser.depth = depth;
    e.set_depth_chooser(&chooser);
    for (const GenRequest& r : reqs)
      e.submit(r);
    const std::vector<GenResult> out = e.run();
    const std::string where = "depth " + std::to_string(depth);
    ASSERT_NO_FATAL_FAILURE(testing_models::expect_same_outputs(out, plain, where));
    int64_t steps = 0, rounds = 0, stopped = 0;
    for (const StepSample& s : chooser.seen) {
      EXPECT_EQ(s.depth, depth) << where;
      EXPECT_EQ(s.mixed, depth != 4) << where << ": a canary step's cost is no one depth's";
      if (depth == 0) {  // the canary's round alone, tried to the full depth
        EXPECT_LE(s.spec.rounds, 1) << where;
        ASSERT_GE(static_cast<int64_t>(s.spec.tried_at.size()), 4);
        if (s.spec.rounds == 1) {
          EXPECT_EQ(s.spec.tried_at[3], 1) << where;
        }
        stopped += s.spec.rounds * 4 - s.spec.drafted;
      } else if (depth == 2 && s.spec.rounds > 0) {
        EXPECT_LE(s.spec.tried_at.size() > 3 ? s.spec.tried_at[3] : 0, 1) << where << ": one sequence past depth 2";
      }
      steps += 1;
      rounds += s.spec.rounds;
    }
    EXPECT_EQ(e.stats().canary_steps, depth == 4 ? 0 : steps) << where;
    if (depth == 0) {
      EXPECT_GT(rounds, 20) << where;
      EXPECT_GT(stopped, 3) << "too few canary chains stopped early to exercise the count";
    }
  }
}

}  // namespace
}  // namespace updraft
