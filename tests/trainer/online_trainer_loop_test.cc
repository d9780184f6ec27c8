// The online trainer's background loop over a real RocksDB buffer: what triggers a round (new
// records, a new policy version, new response tokens) and the idle rounds on an unchanged window.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "kernels/core/cpu_team.h"
#include "tests/cpu_team_util.h"
#include "tests/trainer/online_fixture.h"
#include "trainer/online/online_trainer.h"

namespace updraft::train {
namespace {

using namespace testing_online;

TEST(OnlineTrainer, BackgroundLoopTrainsOnNewRecordsAndFollowsThePolicy) {
  BufferBed bed("otl");
  TempDir& t = bed.t;
  auto& policy = bed.policy;
  auto& store = bed.store;
  OnlineTrainerOptions o;
  o.dir = t.str() + "/versions";
  o.steps_per_round = 5;
  o.ttt.steps = 2;
  o.min_new_records = 4;
  o.poll_ms = 5;
  o.progress = [](const std::string& l) { std::fprintf(stderr, "%s\n", l.c_str()); };
  OnlineTrainer tr(o, store, policy, 1, fresh_draft(*policy, 5), 1);
  tr.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(tr.reports().empty());  // nothing stored: nothing due
  store_samples(*store, capture(*policy, rollouts(*policy, prompts(4, 2)), 1), 1, 0);
  for (int i = 0; i < 400 && tr.reports().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  ASSERT_FALSE(tr.reports().empty());
  EXPECT_EQ(tr.reports()[0].trigger, "4 new records");
  // A new policy version with new records triggers a round bound to it.
  train::TrainableLlama m2 = make_policy(4);
  m2.params()[0].value.data<float>()[0] += 1.0f;
  auto policy2 = std::make_shared<const PolicyModel>(PolicyModel::load(publish_policy(m2, t.str() + "/p", 2).dir));
  tr.notify_policy(policy2, 2);
  store_samples(*store, capture(*policy2, rollouts(*policy2, prompts(2, 3)), 2), 1, 4);
  for (int i = 0; i < 400 && tr.reports().size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  tr.stop();
  ASSERT_GE(tr.reports().size(), 2u);
  EXPECT_EQ(tr.reports()[1].trigger, "policy v2");
  EXPECT_EQ(tr.reports()[1].trained_on_policy, 2u);
  EXPECT_EQ(tr.reports()[1].max_policy_version, 2u);
}

TEST(OnlineTrainer, TriggersOnNewResponseTokens) {
  BufferBed bed("ott");
  TempDir& t = bed.t;
  auto& policy = bed.policy;
  auto& store = bed.store;
  const auto first = capture(*policy, rollouts(*policy, prompts(2, 4)), 1);
  int64_t first_tokens = 0;
  for (const TttSample& x : first)
    first_tokens += x.response_length();
  OnlineTrainerOptions o;
  o.dir = t.str() + "/versions";
  o.steps_per_round = 2;
  o.ttt.steps = 2;
  o.min_new_records = 0;
  o.min_new_tokens = static_cast<uint64_t>(first_tokens + 1);
  o.poll_ms = 5;
  OnlineTrainer tr(o, store, policy, 1, fresh_draft(*policy, 5), 1);
  store_samples(*store, first, 1, 0);
  EXPECT_EQ(store->consumer_lag_tokens(), static_cast<uint64_t>(first_tokens));
  tr.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(tr.reports().empty()) << "one token short of the trigger";
  const auto more = capture(*policy, rollouts(*policy, prompts(1, 5)), 1);
  store_samples(*store, more, 1, 2);
  for (int i = 0; i < 400 && tr.reports().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  tr.stop();
  ASSERT_FALSE(tr.reports().empty());
  EXPECT_EQ(tr.reports()[0].trigger, std::to_string(first_tokens + more[0].response_length()) + " new response tokens");
  EXPECT_EQ(store->consumer_lag_tokens(), 0u);
}

// idle_rounds: after a round on new records, that many more rounds on the same window, then
// nothing until new records arrive (and then the idle rounds again). Nothing is promoted here, so
// an idle round evaluates the serving drafter exactly as the round before did and reuses it.
TEST(OnlineTrainer, IdleRoundsTrainOnTheWindowThenStop) {
  BufferBed bed("oti");
  TempDir& t = bed.t;
  auto& policy = bed.policy;
  auto& store = bed.store;
  OnlineTrainerOptions o;
  o.dir = t.str() + "/versions";
  o.steps_per_round = 2;
  o.ttt.steps = 2;
  o.min_new_records = 4;
  o.idle_rounds = 2;
  o.promote_margin = 1e6;
  o.poll_ms = 5;
  OnlineTrainer tr(o, store, policy, 1, fresh_draft(*policy, 5), 1);
  tr.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(tr.reports().empty()) << "no window yet: no idle round either";
  EXPECT_TRUE(tr.idle());
  store_samples(*store, capture(*policy, rollouts(*policy, prompts(4, 2)), 1), 1, 0);
  for (int i = 0; i < 400 && tr.reports().size() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  tr.wait_idle();
  ASSERT_EQ(tr.reports().size(), 3u);
  EXPECT_TRUE(tr.idle());
  store_samples(*store, capture(*policy, rollouts(*policy, prompts(4, 3)), 1), 1, 4);
  for (int i = 0; i < 400 && tr.reports().size() < 6; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  tr.stop();
  const auto reps = tr.reports();
  ASSERT_EQ(reps.size(), 6u);
  EXPECT_EQ(reps[0].trigger, "4 new records");
  EXPECT_EQ(reps[1].trigger, "idle 1/2");
  EXPECT_EQ(reps[2].trigger, "idle 2/2");
  EXPECT_EQ(reps[2].train_records, reps[0].train_records);  // the same window
  EXPECT_FALSE(reps[0].serving_eval_reused);
  for (size_t i : {1, 2, 4, 5}) {
    EXPECT_TRUE(reps[i].serving_eval_reused) << "round " << i;
    EXPECT_EQ(reps[i].serving_tau, reps[i - 1].serving_tau) << "round " << i;
    EXPECT_NE(reps[i].loss, reps[i - 1].loss) << "round " << i;  // the candidate trained on
  }
  EXPECT_EQ(reps[3].trigger, "4 new records");
  EXPECT_EQ(reps[5].trigger, "idle 2/2");
  EXPECT_GT(reps[5].train_records, reps[2].train_records);
}

// The trainer hands its CPU team back while parked and between rounds (kernels/core/cpu_team.h),
// so that the workers' teams keep spinning between regions while it waits.
TEST(OnlineTrainer, HoldsNoCpuTeamWhileParkedOrBetweenRounds) {
  BufferBed bed("otc");
  OnlineTrainerOptions o;
  o.dir = bed.t.str() + "/versions";
  o.steps_per_round = 400;
  o.ttt.steps = 2;
  o.min_new_records = 4;
  o.poll_ms = 5;
  OnlineTrainer tr(o, bed.store, bed.policy, 1, fresh_draft(*bed.policy, 5), 1);
  const auto samples = capture(*bed.policy, rollouts(*bed.policy, prompts(4, 2)), 1);
  tr.start();
  release_cpu_team();  // this thread's, from building the fixture and the samples
  const int base = cpu_team_util::own_threads();
  store_samples(*bed.store, samples, 1, 0);
  for (int i = 0; i < 400 && tr.idle(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_FALSE(tr.idle()) << "a round is due";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // into its optimiser steps
  const int training = cpu_team_util::own_threads();
  tr.set_paused(true);  // returns once the round is parked (or over)
  EXPECT_EQ(cpu_team_util::wait_for_own_threads(base), base)
      << "parked with " << training - base << " helper(s) before";
  tr.set_paused(false);
  tr.wait_idle();
  EXPECT_EQ(cpu_team_util::wait_for_own_threads(base), base) << "between rounds";
  tr.stop();
  ASSERT_EQ(tr.reports().size(), 1u);
}

}  // namespace
}  // namespace updraft::train
