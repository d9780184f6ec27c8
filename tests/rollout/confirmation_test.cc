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

// Whether this system lets an unprivileged thread take SCHED_IDLE (some sandboxes refuse it).
bool idle_priority_allowed() {
  bool ok = false;
  std::thread([&] {
    sched_param p{};
    ok = pthread_setschedparam(pthread_self(), SCHED_IDLE, &p) == 0;
  }).join();
  return ok;
}

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
  if (idle_priority_allowed())
    EXPECT_EQ(policies, (std::vector<int>{SCHED_IDLE, SCHED_IDLE}));
}

TEST(BackgroundConfirmation, HurryRestoresNormalPriorityAndErrorsAreReported) {
  if (!idle_priority_allowed())
    GTEST_SKIP() << "this system refuses SCHED_IDLE";
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

// A damaged drafter raises a live alarm. While its confirmation is held back, the worker goes on
// serving with it (two batches complete, every completion from the new drafter) and no verdict
// is out; released, the idle worker applies the verdict (rolled back). With a deadline of 0 s
// the engine waits for the confirmation instead: the next batch is served by the restored one.
TEST(Worker, ServesTheNewDrafterWhileItsConfirmationRuns) {
  WorkerFixture s;
  const auto samples = capture(*s.policy, rollouts(*s.policy, prompts(24, 1)), 1);
  const auto trained = std::make_shared<const DraftModel>(trained_draft(*s.policy, samples, 300));
  messaging::SenderOptions sopt;
  sopt.endpoint = "inproc://nobody-listens";  // records queue up; capture needs a sender
  messaging::ZmqContext ctx;
  sopt.zmq_context = ctx.get();
  auto sender = std::make_shared<messaging::RecordSender>(sopt);
  for (const bool deadline : {false, true}) {
    SCOPED_TRACE(deadline ? "deadline 0 s" : "no deadline");
    std::promise<void> gate;
    std::atomic<int> calls{0};
    WorkerOptions o = s.options(20);
    o.scorer = gated(gate.get_future().share(), &calls);
    o.rollback_wait_seconds = deadline ? 0 : 600;
    auto w = std::make_unique<Worker>(o, s.policy, 1, trained, 1, sender);
    w->generate(greedy_requests(s.ps), GenMode::kServing);  // the bar
    const uint64_t v = deadline ? 3 : 2;
    ASSERT_TRUE(w->offer_drafter(s.publish_draft(fresh_draft(*s.policy, 9), v).dir));
    ASSERT_TRUE(w->wait_serving(true, v, 10s));
    if (deadline) {
      std::thread release([&] {
        std::this_thread::sleep_for(200ms);
        gate.set_value();
      });
      w->generate(greedy_requests(s.ps), GenMode::kServing);  // the watch closes early in it
      const BatchReport next = w->generate(greedy_requests(s.ps), GenMode::kServing);
      release.join();
      for (const Completion& c : next.completions)
        EXPECT_EQ(c.drafter_version, 1u) << "the engine waited for the verdict";
      EXPECT_EQ(w->metrics().rollbacks, 1);
      continue;
    }
    for (int batch = 0; batch < 2; ++batch)
      for (const Completion& c : w->generate(greedy_requests(s.ps), GenMode::kServing).completions)
        EXPECT_EQ(c.drafter_version, v);
    EXPECT_EQ(calls.load(), 1) << "the confirmation is under way";
    EXPECT_FALSE(w->wait_rollback_verdict(50ms));
    EXPECT_EQ(w->metrics().rollbacks, 0);
    gate.set_value();
    ASSERT_TRUE(w->wait_rollback_verdict(60s)) << "an idle worker is woken by its confirmation";
    EXPECT_EQ(w->metrics().rollbacks, 1);
    EXPECT_EQ(w->metrics().rollback_confirmations, 1);
    EXPECT_EQ(w->drafter_version(), 1u);
  }
}

}  // namespace
}  // namespace updraft
