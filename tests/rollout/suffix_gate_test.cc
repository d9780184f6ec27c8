// The suffix gate (rollout/spec/suffix_gate.h) alone and in the engine:
//  - the faster arm per live batch, the other explored in at most 5% of steps;
//  - in the engine: a step whose lookups found nothing does not ask it (nor graft, nor count as a
//    suffix step).
#include "rollout/spec/suffix_gate.h"

#include <gtest/gtest.h>

#include <vector>

#include "rollout/engine/engine.h"
#include "tests/rollout/spec_fixture.h"

namespace updraft {
namespace {

// The gate: each arm measured first, then the faster one, the other explored in <= 5% of steps;
// buckets learn apart (suffix drafts pay at batch 2 and cost at batch 64 here). Below min_batch
// (2 by default) every step grafts and none is counted.
TEST(SuffixGateTest, RunsTheFasterArmPerBatchAndExploresLittle) {
  SuffixGate g;
  int64_t on2 = 0, on64 = 0;
  const int64_t steps = 2000;
  for (int64_t i = 0; i < steps; ++i) {
    const bool a = g.choose(2);
    on2 += a;
    g.observe(2, a, a ? 6 : 2, 0.001 * (a ? 1.2 : 1.0), false);  // on: 2.5x the tokens/s
    const bool b = g.choose(64);
    on64 += b;
    g.observe(64, b, 64 * (b ? 1.3 : 1.0), 0.01 * (b ? 1.6 : 1.0), false);  // on: 0.81x
  }
  EXPECT_GE(on2, steps * 94 / 100);
  EXPECT_LE(on64, steps * 6 / 100);
  EXPECT_GE(on64, steps * 4 / 100) << "the slower arm was not explored";
  EXPECT_TRUE(g.snapshot().on[1]);
  EXPECT_FALSE(g.snapshot().on[6]);
  EXPECT_EQ(g.snapshot().steps, 2 * steps);
  // Cold steps teach nothing.
  SuffixGate c;
  c.observe(4, true, 100, 0.001, true);
  EXPECT_EQ(c.snapshot().arms[2][1].samples, 0);
  // Batch 1: always on, uncounted, even where the "off" arm measures faster; with min_batch 1 the
  // gate decides there too.
  for (const int64_t min_batch : {2, 1}) {
    SuffixGateOptions o;
    o.min_batch = min_batch;
    SuffixGate one(o);
    int64_t on1 = 0;
    for (int64_t i = 0; i < steps; ++i) {
      const bool a = one.choose(1);
      on1 += a;
      one.observe(1, a, 1, 0.001 * (a ? 1.6 : 1.0), false);  // on: 0.63x
    }
    if (min_batch == 2) {
      EXPECT_EQ(on1, steps);
      EXPECT_EQ(one.snapshot().steps, 0);
      EXPECT_EQ(one.snapshot().arms[0][1].samples, 0);
    } else {
      EXPECT_LE(on1, steps * 6 / 100);
    }
  }
  SuffixGateOptions bad;
  bad.min_batch = 0;
  EXPECT_THROW(SuffixGate{bad}, Error);
}

using SuffixEngine = testing_spec::SpecFixture;

// With the history alone, a first wave of requests finds nothing to draft from: its steps are the
// drafter's, and the gate, which weighs grafting steps against the others, never hears of them.
// Their completions then draft for a second wave with the same prompts, whose steps ask the gate
// (two requests at a time: the gate leaves batch 1 to always graft).
TEST_F(SuffixEngine, StepsThatFindNoCandidatesLeaveTheGateOut) {
  EngineOptions o;
  o.kv_cache_bytes = 64 << 20;
  o.suffix.mode = SuffixMode::kHistory;
  o.suffix.min_match = 2;
  o.suffix.gate = true;
  o.spec = SpecSettings{4, 1, 5};
  Engine e(*model_, o, draft_.get());
  ASSERT_NE(e.suffix_gate(), nullptr);
  auto wave = [&] {
    for (int p = 0; p < 2; ++p) {
      GenRequest r = req(testing_spec::pattern_prompt(1 + p, 6, cfg_.vocab_size), 0.f, 24, 0);
      r.params.ignore_eos = true;
      e.submit(r);
    }
    e.run();
  };
  wave();
  EXPECT_EQ(e.suffix_gate()->snapshot().steps, 0) << "a step with nothing to graft asked the gate";
  EXPECT_EQ(e.stats().suffix_steps, 0);
  EXPECT_GT(e.stats().spec.rounds, 0) << "the drafter did not run";
  wave();
  const int64_t asked = e.suffix_gate()->snapshot().steps;
  EXPECT_GT(asked, 0) << "the history never matched the repeated prompts";
  EXPECT_GT(e.stats().suffix_steps, 0) << "the gate's first answer is yes, and it was never given";
  EXPECT_LE(e.stats().suffix_steps, asked) << "a step grafted without asking the gate";
}

// The calibration of suffix nodes' path probabilities: 1 until enough were predicted, then the
// accepted share of the predicted (EMA), never above 1 nor below its floor.
TEST(SuffixCalibration, ScalesByTheAcceptedShareOfThePredictedNodes) {
  SuffixCalibration c(0.5, 8.0, 0.1);
  EXPECT_EQ(c.factor(), 1.0);
  c.observe(4.0, 1);
  EXPECT_EQ(c.factor(), 1.0) << "4 predicted nodes are not enough to judge by";
  c.observe(4.0, 1);
  EXPECT_DOUBLE_EQ(c.factor(), 0.25);
  c.observe(0.0, 3);  // a step whose grafts predicted nothing teaches nothing
  EXPECT_DOUBLE_EQ(c.factor(), 0.25);
  c.observe(4.0, 3);  // EMA 0.5: accepted 2 of 4 predicted
  EXPECT_DOUBLE_EQ(c.factor(), 0.5);
  for (int i = 0; i < 40; ++i)
    c.observe(2.0, 4);  // accepted more than the counts claimed: left at 1
  EXPECT_EQ(c.factor(), 1.0);
  for (int i = 0; i < 40; ++i)
    c.observe(5.0, 0);
  EXPECT_EQ(c.factor(), 0.1) << "the floor";
  EXPECT_THROW(SuffixCalibration(0.0), Error);
}

}  // namespace
}  // namespace updraft
