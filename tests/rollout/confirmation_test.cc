// Rollback confirmations off the engine thread (rollout/worker/confirmation.h): the scorer runs
// on a thread of its own at idle priority with one OpenMP thread; the worker keeps serving the
// new drafter meanwhile, applies the verdict when it is ready (waking when idle), and waits for
// a confirmation that has run past its deadline.
#include "rollout/worker/confirmation.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <future>
#include <thread>

#include "drafter/random_draft.h"
#include "messaging/zmq_util.h"
#include "rollout/random_policy.h"
#include "tests/drafter/test_drafts.h"
#include "tests/rollout/test_models.h"
#include "tests/rollout/worker_fixture.h"

namespace updraft {
namespace {

using namespace testing_online;
using namespace std::chrono_literals;

struct Tiny {
  std::shared_ptr<const PolicyModel> policy =
      std::make_shared<const PolicyModel>(random_policy(testing_models::tiny_config(), 3, DType::F32));
  std::shared_ptr<const DraftModel> draft = std::make_shared<const DraftModel>(
      random_draft(testing_models::tiny_draft_config(policy->config(), policy->config().vocab_size),
                   VocabMap::identity(policy->config().vocab_size), policy->draft_target(), 5, DType::F32));
  std::shared_ptr<const DraftModel> other = std::make_shared<const DraftModel>(*draft);
};

TEST(BackgroundConfirmation, ScoresBothDraftersOnItsOwnIdleThread) {
  Tiny t;
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<std::thread::id> ids;
  std::vector<int> policies, threads;
  std::promise<void> done;
  BackgroundConfirmation c(
      [&](const DraftModel& d, const PolicyModel&, const std::vector<TttSample>& s, int64_t depth) {
        ids.push_back(std::this_thread::get_id());
        policies.push_back(sched_getscheduler(0));
        threads.push_back(omp_get_max_threads());
        return (&d == t.draft.get() ? 1.5 : 2.5) + static_cast<double>(s.size() + depth);
      },
      t.draft, t.other, t.policy, std::vector<TttSample>(3), 4, [&] { done.set_value(); });
  ASSERT_EQ(done.get_future().wait_for(30s), std::future_status::ready) << "on_done runs when it is ready";
  EXPECT_TRUE(c.done());
  const BackgroundConfirmation::Result r = c.wait();
  EXPECT_EQ(r.tau_new, 1.5 + 7);  // the candidate's estimate, then the previous drafter's
  EXPECT_EQ(r.tau_old, 2.5 + 7);
  EXPECT_EQ(r.samples, 3u);
  EXPECT_TRUE(r.error.empty());
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_NE(ids[0], caller);
  EXPECT_EQ(threads, (std::vector<int>{1, 1})) << "no thread team beside the engine's";
  const int want = BackgroundConfirmation::idle_priority() ? SCHED_IDLE : SCHED_OTHER;
  EXPECT_EQ(policies, (std::vector<int>{want, want}));
}

TEST(BackgroundConfirmation, HurryRestoresNormalPriorityAndErrorsAreReported) {
  if (!BackgroundConfirmation::idle_priority())
    GTEST_SKIP() << "this process may not leave idle priority once taken";
  Tiny t;
  std::promise<void> started, go;
  std::shared_future<void> go_f = go.get_future().share();
  int policy = -1;
  BackgroundConfirmation c(
      [&](const DraftModel&, const PolicyModel&, const std::vector<TttSample>&, int64_t) -> double {
        started.set_value();
        go_f.wait();
        policy = sched_getscheduler(0);
        throw Error("the scorer ran out of memory");
      },
      t.draft, t.other, t.policy, {}, 4, nullptr);
  started.get_future().wait();
  EXPECT_FALSE(c.done());
  c.hurry();
  go.set_value();
  const BackgroundConfirmation::Result r = c.wait();
  EXPECT_EQ(policy, SCHED_OTHER);
  EXPECT_NE(r.error.find("ran out of memory"), std::string::npos);
}

// A scorer that waits for `gate` before estimating with the trainer's teacher-forced one.
DrafterScorer gated(std::shared_future<void> gate, std::atomic<int>* calls) {
  return [gate, calls, real = teacher_forced_scorer()](const DraftModel& d, const PolicyModel& p,
                                                       const std::vector<TttSample>& s, int64_t depth) {
    ++*calls;
    gate.wait();
    return real(d, p, s, depth);
  };
}

// A published policy, a drafter trained on it (v1) and a record sender (captures need one),
// shared by the worker's confirmation tests.
class WorkerConfirmation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_ = new WorkerFixture;
    const auto samples = capture(*s_->policy, rollouts(*s_->policy, prompts(24, 1)), 1);
    trained_ = new std::shared_ptr<const DraftModel>(
        std::make_shared<const DraftModel>(trained_draft(*s_->policy, samples, 300)));
  }
  static void TearDownTestSuite() {
    delete trained_;
    delete s_;
  }

  // A worker serving v1 (one batch: the bar), then the damaged drafter `v`, which raises a live
  // alarm in its first batch.
  std::unique_ptr<Worker> swapped_to_a_damaged_drafter(const WorkerOptions& o, uint64_t v) {
    auto w = std::make_unique<Worker>(o, s_->policy, 1, *trained_, 1, sender_);
    w->generate(greedy_requests(s_->ps), GenMode::kServing);
    EXPECT_TRUE(w->offer_drafter(s_->publish_draft(fresh_draft(*s_->policy, 9), v).dir));
    EXPECT_TRUE(w->wait_serving(true, v, 10s));
    return w;
  }
  BatchReport serve(Worker& w) { return w.generate(greedy_requests(s_->ps), GenMode::kServing); }

  static WorkerFixture* s_;
  static std::shared_ptr<const DraftModel>* trained_;
  messaging::ZmqContext ctx_;
  std::shared_ptr<messaging::RecordSender> sender_ = [this] {
    messaging::SenderOptions o;
    o.endpoint = "inproc://nobody-listens";  // records queue up
    o.zmq_context = ctx_.get();
    return std::make_shared<messaging::RecordSender>(o);
  }();
};
WorkerFixture* WorkerConfirmation::s_ = nullptr;
std::shared_ptr<const DraftModel>* WorkerConfirmation::trained_ = nullptr;

// While a damaged drafter's confirmation is held back, the worker goes on serving with it (two
// batches complete, every completion from the new drafter), no verdict is out, and a newer
// drafter offered meanwhile waits; released, the idle worker applies the verdict (rolled back),
// then takes the newer drafter.
TEST_F(WorkerConfirmation, TheNewDrafterServesWhileItsConfirmationRuns) {
  if (!BackgroundConfirmation::idle_priority())
    GTEST_SKIP() << "this process may not leave idle priority: the engine waits for confirmations";
  std::promise<void> gate;
  std::atomic<int> calls{0};
  std::atomic<bool> opened{false};
  WorkerOptions o = s_->options(20);
  o.scorer = gated(gate.get_future().share(), &calls);
  o.rollback_wait_seconds = 600;
  auto w = swapped_to_a_damaged_drafter(o, 2);
  std::thread watchdog([&] {  // a confirmation that blocks the engine fails the test, not hangs it
    for (int i = 0; i < 600 && !opened; ++i)
      std::this_thread::sleep_for(100ms);
    if (!opened.exchange(true))
      gate.set_value();
  });
  for (int batch = 0; batch < 2; ++batch)
    for (const Completion& c : serve(*w).completions)
      EXPECT_EQ(c.drafter_version, 2u);
  // The confirmation runs at idle priority: under ctest -j2 on two cores it may not have started
  // yet (seen once in a CI run: no call after both batches). Held at the gate once it has.
  for (int i = 0; i < 300 && calls.load() == 0; ++i)
    std::this_thread::sleep_for(100ms);
  EXPECT_EQ(calls.load(), 1) << "the confirmation is under way";
  EXPECT_FALSE(w->wait_rollback_verdict(50ms));
  EXPECT_EQ(w->metrics().rollbacks, 0);
  ASSERT_TRUE(w->offer_drafter(s_->publish_draft(fresh_draft(*s_->policy, 11), 3).dir));
  EXPECT_FALSE(w->wait_serving(true, 3, 300ms)) << "a staged drafter waits for the verdict";
  EXPECT_FALSE(opened.exchange(true)) << "the engine waited for the confirmation";
  gate.set_value();
  watchdog.join();
  ASSERT_TRUE(w->wait_serving(true, 3, 60s)) << "an idle worker is woken by its confirmation";
  EXPECT_EQ(w->metrics().rollbacks, 1);
  EXPECT_EQ(w->metrics().rollback_confirmations, 1);
}

// With a deadline of 0 s the engine waits for the confirmation: the next batch is served by the
// restored drafter (as everywhere when the process may not leave idle priority).
TEST_F(WorkerConfirmation, PastItsDeadlineTheEngineWaitsForTheVerdict) {
  std::promise<void> gate;
  std::atomic<int> calls{0};
  WorkerOptions o = s_->options(20);
  o.scorer = gated(gate.get_future().share(), &calls);
  o.rollback_wait_seconds = 0;
  auto w = swapped_to_a_damaged_drafter(o, 4);
  std::thread release([&] {
    std::this_thread::sleep_for(200ms);
    gate.set_value();
  });
  serve(*w);  // the watch closes early in it
  const BatchReport next = serve(*w);
  release.join();
  for (const Completion& c : next.completions)
    EXPECT_EQ(c.drafter_version, 1u) << "the engine waited for the verdict";
  EXPECT_EQ(w->metrics().rollbacks, 1);
}

// A scorer that throws leaves the verdict to the live comparison (an alarm: rolled back).
TEST_F(WorkerConfirmation, AFailedConfirmationLeavesTheLiveAlarmToDecide) {
  WorkerOptions o = s_->options(20);
  o.scorer = [](const DraftModel&, const PolicyModel&, const std::vector<TttSample>&, int64_t) -> double {
    throw Error("out of memory");
  };
  auto w = swapped_to_a_damaged_drafter(o, 5);
  serve(*w);
  ASSERT_TRUE(w->wait_rollback_verdict(60s));
  EXPECT_EQ(w->metrics().rollbacks, 1);
  EXPECT_EQ(w->metrics().rollback_confirmations, 0);
  EXPECT_EQ(w->drafter_version(), 1u);
}

}  // namespace
}  // namespace updraft
