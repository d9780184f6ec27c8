// The rollout worker's hot-swap path (rollout/worker/worker.h): damaged, stale or misfitting
// versions are refused and counted with the serving version untouched; accepted ones serve from
// the next step with every completion labelled; a policy swap keeps speculation lossless; a
// drafter swapped in with requests in flight keeps them lossless and splits the metrics; a
// drafter that loses acceptance is rolled back (confirmed on the same completions when captured).
#include "rollout/worker/worker.h"

#include <gtest/gtest.h>

#include <fstream>
#include <future>

#include "app/worker_role.h"
#include "kernels/core/cpu_team.h"
#include "messaging/zmq_util.h"
#include "tests/cpu_team_util.h"
#include "tests/rollout/worker_fixture.h"

namespace updraft {
namespace {

using namespace testing_online;
using namespace std::chrono_literals;

TEST(Worker, RefusesDamagedStaleAndMisfittingDrafters) {
  WorkerFixture s;
  auto w = s.worker(std::make_shared<const DraftModel>(fresh_draft(*s.policy, 1)));
  const WeightVersion good = s.publish_draft(fresh_draft(*s.policy, 2), 2);
  {  // a damaged copy as version 3
    const WeightVersion bad = s.publish_draft(fresh_draft(*s.policy, 3), 3);
    std::fstream f(bad.dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    f.put('\x7f');
  }
  EXPECT_FALSE(w->offer_drafter(s.dir.str() + "/v/drafter-v00000003"));
  EXPECT_FALSE(w->offer_drafter(s.dir.str() + "/v/missing"));
  EXPECT_EQ(w->metrics().rejected_drafter, 2);
  EXPECT_TRUE(w->offer_drafter(good.dir));
  EXPECT_TRUE(w->wait_serving(true, 2, 10s)) << "an idle worker takes a staged drafter at once";
  EXPECT_FALSE(w->offer_drafter(good.dir));  // not newer than the serving one
  const BatchReport b = w->generate(greedy_requests(s.ps), GenMode::kServing);
  for (const Completion& c : b.completions) {
    EXPECT_EQ(c.policy_version, 1u);
    EXPECT_EQ(c.drafter_version, 2u);
  }
  EXPECT_EQ(w->metrics().drafter_swaps, 1);
  EXPECT_EQ(w->metrics().mid_batch_swaps, 0);
  EXPECT_EQ(w->metrics().by_version.count({1, 2}), 1u);
  // A policy with another vocabulary does not fit: refused, still serving v1.
  PolicyConfig other = config();
  other.vocab_size = 50;
  train::TrainableLlama m2(other, 3);
  EXPECT_FALSE(w->offer_policy(publish_policy(m2, s.dir.str() + "/v", 2).dir));
  EXPECT_EQ(w->metrics().rejected_policy, 1);
  EXPECT_EQ(w->policy_version(), 1u);
}

TEST(Worker, PolicySwapRebindsTheDrafterAndStaysLossless) {
  WorkerFixture s;
  const auto samples = capture(*s.policy, rollouts(*s.policy, prompts(16, 1)), 1);
  auto w = s.worker(std::make_shared<const DraftModel>(trained_draft(*s.policy, samples, 60)));
  train::TrainableLlama m2 = make_policy(4);
  for (train::Param* p : m2.params())  // a different policy, same shapes (an RL update)
    p->value.data<float>()[0] += 0.5f;
  const WeightVersion p2 = publish_policy(m2, s.dir.str() + "/v", 2);
  EXPECT_TRUE(w->offer_policy(p2.dir));
  const BatchReport spec = w->generate(greedy_requests(s.ps), GenMode::kServing);
  const BatchReport plain = w->generate(greedy_requests(s.ps), GenMode::kPlain);
  EXPECT_EQ(w->metrics().policy_swaps, 1);
  const PolicyModel direct = PolicyModel::load(p2.dir);
  Engine e(direct);
  for (const GenRequest& r : greedy_requests(s.ps))
    e.submit(r);
  auto ref = e.run();
  for (size_t i = 0; i < s.ps.size(); ++i) {
    EXPECT_EQ(spec.completions[i].policy_version, 2u) << "a version staged before a request serves it";
    EXPECT_EQ(spec.completions[i].result.tokens, ref[i].tokens);
    EXPECT_EQ(plain.completions[i].result.tokens, ref[i].tokens);
    EXPECT_EQ(plain.completions[i].drafter_version, 0u);
  }
  EXPECT_GT(spec.spec.rounds, 0);
}

// A policy staged while requests run waits for them (a completion comes from one policy
// version): no new request is admitted meanwhile, and the next ones run on the new policy.
TEST(Worker, APolicyStagedMidRunWaitsForTheRunningRequests) {
  WorkerFixture s;
  auto w = s.worker(std::make_shared<const DraftModel>(fresh_draft(*s.policy, 1)));
  train::TrainableLlama m2 = make_policy(4);
  m2.params()[1].value.data<float>()[0] += 1.0f;
  const WeightVersion p2 = publish_policy(m2, s.dir.str() + "/v", 2);
  std::promise<void> started;
  std::atomic<bool> once{false};
  std::vector<GenRequest> first = greedy_requests(s.ps, 40);
  first[0].on_tokens = [&](uint64_t, const std::vector<int32_t>&, const std::vector<float>&) {
    if (!once.exchange(true))
      started.set_value();
  };
  std::future<BatchReport> a = std::async(std::launch::async, [&] { return w->generate(first, GenMode::kServing); });
  started.get_future().wait();
  ASSERT_TRUE(w->offer_policy(p2.dir));
  const BatchReport later = w->generate(greedy_requests(s.ps, 4), GenMode::kServing);
  const BatchReport early = a.get();
  for (const Completion& c : early.completions)
    EXPECT_EQ(c.policy_version, 1u);
  for (size_t i = 0; i < later.completions.size(); ++i) {
    EXPECT_EQ(later.completions[i].policy_version, 2u);
    EXPECT_GE(later.completions[i].result.admitted_step, early.completions[i].result.finished_step);
  }
  EXPECT_EQ(w->policy_version(), 2u);
}

// A drafter offered while requests run is swapped in between two steps: completions that
// finished before report the old version, the rest the new one; the metrics split the rounds at
// the swap; greedy tokens stay those of plain decoding.
TEST(Worker, SwapsADrafterInBetweenStepsWithRequestsInFlight) {
  WorkerFixture s;
  const WeightVersion v2 = s.publish_draft(fresh_draft(*s.policy, 2), 2);
  std::vector<GenRequest> reqs = greedy_requests(prompts(6, 11), 24);
  WorkerOptions o = s.options();
  o.engine.max_batch = 1;  // one request after another: many steps
  Worker w(o, s.policy, 1, std::make_shared<const DraftModel>(fresh_draft(*s.policy, 1)), 1, nullptr);
  const BatchReport plain = w.generate(reqs, GenMode::kPlain);
  std::promise<void> first_done;
  std::atomic<bool> once{false};
  reqs[1].on_tokens = [&](uint64_t, const std::vector<int32_t>&, const std::vector<float>&) {
    if (!once.exchange(true))
      first_done.set_value();  // request 0 has finished (max_batch 1): offer now
  };
  std::future<BatchReport> run = std::async(std::launch::async, [&] { return w.generate(reqs, GenMode::kServing); });
  first_done.get_future().wait();
  ASSERT_TRUE(w.offer_drafter(v2.dir));
  const BatchReport b = run.get();
  EXPECT_EQ(w.drafter_version(), 2u);
  EXPECT_EQ(w.metrics().mid_batch_swaps, 1);
  EXPECT_EQ(w.metrics().drafter_swaps, 1);
  int64_t old_ones = 0, rounds = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(b.completions[i].result.tokens, plain.completions[i].result.tokens) << i;
    old_ones += b.completions[i].drafter_version == 1u;
    rounds += b.completions[i].result.spec.rounds;
  }
  EXPECT_EQ(b.completions[0].drafter_version, 1u);
  EXPECT_EQ(b.completions.back().drafter_version, 2u);
  const WorkerMetrics m = w.metrics();
  EXPECT_EQ(m.by_version.at({1, 1}).completions, old_ones);
  EXPECT_EQ(m.by_version.at({1, 2}).completions, static_cast<int64_t>(reqs.size()) - old_ones);
  EXPECT_GT(m.by_version.at({1, 1}).spec.rounds, 0);
  EXPECT_GT(m.by_version.at({1, 2}).spec.rounds, 0);
  EXPECT_EQ(m.by_version.at({1, 1}).spec.rounds + m.by_version.at({1, 2}).spec.rounds, rounds);
}

// A drafter that loses acceptance is rolled back once rollback_rounds rounds have run on it.
// Without captures the verdict compares live acceptance with the previous drafter's recent
// rounds. With captured completions a live alarm is confirmed on the same completions: a damaged
// drafter is rolled back (confirmed), while a copy of the serving drafter swapped in as the
// requests turn to a strong repetition penalty, which the drafter knows nothing of (live
// acceptance falls by far more than the margin), is kept, because on the same completions the two
// are equal. (Hot sampling no longer does it: a sampling chain draws its drafts at the request's
// temperature, drafter/proposer.h, and keeps its acceptance.)
TEST(Worker, RollsBackADrafterThatLosesAcceptance) {
  WorkerFixture s;
  const auto samples = capture(*s.policy, rollouts(*s.policy, prompts(24, 1)), 1);
  const DraftModel trained = trained_draft(*s.policy, samples, 300);
  {
    auto w = s.worker(std::make_shared<const DraftModel>(trained), {}, 20);
    const BatchReport good = w->generate(greedy_requests(s.ps), GenMode::kServing);
    ASSERT_GT(good.spec.tau(), 1.2) << "the trained drafter should accept well";
    ASSERT_TRUE(w->offer_drafter(s.publish_draft(fresh_draft(*s.policy, 9), 2).dir));
    ASSERT_TRUE(w->wait_serving(true, 2, 10s));
    w->generate(greedy_requests(s.ps), GenMode::kServing);
    EXPECT_EQ(w->metrics().rollbacks, 1);
    EXPECT_EQ(w->drafter_version(), 1u);
    EXPECT_LT(w->metrics().by_version.at({1, 2}).spec.tau_at(4), good.spec.tau() * 0.9);
    const BatchReport after = w->generate(greedy_requests(s.ps), GenMode::kServing);
    EXPECT_EQ(after.drafter_version, 1u);
    EXPECT_NEAR(after.spec.tau(), good.spec.tau(), 1e-9);  // the same drafter, the same greedy rounds
    EXPECT_FALSE(w->offer_drafter(s.dir.str() + "/v/drafter-v00000002")) << "a rolled-back version is banned";
  }
  messaging::SenderOptions sopt;
  sopt.endpoint = "inproc://nobody-listens";  // records queue up; capture needs a sender, not a buffer
  messaging::ZmqContext ctx;
  sopt.zmq_context = ctx.get();
  auto sender = std::make_shared<messaging::RecordSender>(sopt);
  auto w = s.worker(std::make_shared<const DraftModel>(trained), sender, 20);
  const BatchReport calm = w->generate(greedy_requests(s.ps), GenMode::kServing);
  ASSERT_TRUE(calm.completions[0].result.aux.defined()) << "serving completions with a sender are captured";
  ASSERT_TRUE(w->offer_drafter(s.publish_draft(fresh_draft(*s.policy, 9), 3).dir));
  ASSERT_TRUE(w->wait_serving(true, 3, 10s));
  w->generate(greedy_requests(s.ps), GenMode::kServing);
  ASSERT_TRUE(w->wait_rollback_verdict(60s)) << "the confirmation runs beside the engine";
  EXPECT_EQ(w->metrics().rollbacks, 1);
  EXPECT_EQ(w->metrics().rollback_confirmations, 1);
  EXPECT_EQ(w->drafter_version(), 1u);

  const BatchReport bar = w->generate(greedy_requests(s.ps), GenMode::kServing);  // v1's recent rounds: the bar
  ASSERT_EQ(bar.drafter_version, 1u);
  ASSERT_TRUE(w->offer_drafter(s.publish_draft(trained, 4).dir));  // the same weights as v1
  ASSERT_TRUE(w->wait_serving(true, 4, 10s));
  std::vector<GenRequest> penalised = greedy_requests(s.ps);
  for (GenRequest& r : penalised)
    r.params.repetition_penalty = 2.0f;
  w->generate(penalised, GenMode::kServing);
  ASSERT_TRUE(w->wait_rollback_verdict(60s));
  const WorkerMetrics m = w->metrics();
  ASSERT_GE(m.by_version.at({1, 4}).spec.rounds, 20) << "the watch must have closed";
  ASSERT_LT(m.by_version.at({1, 4}).spec.tau_at(4), 0.9 * bar.spec.tau()) << "the live bar must be crossed";
  EXPECT_EQ(m.rollbacks, 1);
  EXPECT_EQ(m.rollback_confirmations, 2);
  EXPECT_EQ(w->drafter_version(), 4u);
}

// A worker hands its CPU team back when it goes idle (kernels/core/cpu_team.h): a team held by
// an idle thread makes every other thread's team sleep between regions. The built-in policy, so
// that its products run on a team of two threads.
TEST(Worker, HandsItsCpuTeamBackWhenIdle) {
  auto policy =
      std::make_shared<const PolicyModel>(PolicyModel::load(std::string(UPDRAFT_SOURCE_DIR) + "/models/small"));
  WorkerOptions o;
  o.id = 1;
  o.threads = 2;
  o.speculate = false;
  o.engine.kv_cache_bytes = int64_t{16} << 20;
  Worker w(o, policy, 1, nullptr, 0, nullptr);
  release_cpu_team();  // loading may have started one on this thread
  const int base = cpu_team_util::own_threads();
  for (int round = 0; round < 2; ++round) {
    std::promise<int> during;
    w.submit(greedy_requests({{5, 6, 7, 8}}, 4)[0],
             [&](Completion) { during.set_value(cpu_team_util::own_threads()); });
    EXPECT_EQ(during.get_future().get(), base + 1) << "round " << round << ": the worker decodes on a team of two";
    EXPECT_EQ(cpu_team_util::wait_for_own_threads(base), base) << "round " << round << ": idle, it holds no team";
  }
}

}  // namespace
}  // namespace updraft
