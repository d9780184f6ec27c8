// The rollout worker as a server of requests (rollout/worker/worker.h): adaptive speculation
// falls back to plain decoding when the drafter does not pay, plain serving and the cold start
// (no drafter until one arrives, requests in flight included), abort, the pause modes, flush,
// stop, and records streamed to a real buffer, acknowledged, within the volume bounds.
#include <gtest/gtest.h>

#include <future>

#include "messaging/buffer_server.h"
#include "messaging/zmq_util.h"
#include "rollout/capture/capture.h"
#include "rollout/capture/record_convert.h"
#include "tests/rollout/worker_fixture.h"

namespace updraft {
namespace {

using namespace testing_online;
using namespace std::chrono_literals;

// Calls `fn` once, when the request has emitted its first tokens.
TokenCallback once_started(std::function<void()> fn) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  return [done, fn](uint64_t, const std::vector<int32_t>&, const std::vector<float>&) {
    if (!done->exchange(true))
      fn();
  };
}

TEST(WorkerServing, AdaptiveSpeculationFallsBackToPlainWhenTheDrafterDoesNotPayAndStaysLossless) {
  WorkerFixture s;
  WorkerOptions o = s.options();
  o.adaptive.enabled = true;
  // An untrained drafter accepts almost nothing: each round drafts a 3-level tree of 7 tokens and
  // verifies 8 rows for about one token, so speculation is measurably slower than plain decoding.
  // (A chain's depth 1 verifies 2 rows, which on this tiny policy costs about what 1 does: with
  // almost no acceptance it comes close enough to paying that timing noise can tip the choice.)
  o.engine.spec = SpecSettings{3, 3, 8};
  Worker w(o, s.policy, 1, std::make_shared<const DraftModel>(fresh_draft(*s.policy, 5)), 1, nullptr);
  const std::vector<std::vector<int32_t>> ps = prompts(6, 3);
  const BatchReport plain = w.generate(greedy_requests(ps), GenMode::kPlain);
  for (int k = 0; k < 4; ++k) {
    const BatchReport b = w.generate(greedy_requests(ps), GenMode::kServing);
    for (size_t i = 0; i < ps.size(); ++i)  // greedy output is the same whichever depth ran
      ASSERT_EQ(b.completions[i].result.tokens, plain.completions[i].result.tokens) << "batch " << k << " request " << i;
  }
  const WorkerMetrics m = w.metrics();
  ASSERT_TRUE(m.adaptive);
  ASSERT_EQ(m.depth_steps.size(), 4u);
  EXPECT_GT(m.depth_steps[3], 0) << "nothing measured at first: speculate";
  EXPECT_GT(m.depth_steps[0], 3 * m.depth_steps[3]) << "then mostly plain";
  EXPECT_EQ(m.adaptive_model.current[static_cast<size_t>(AdaptiveDepth::bucket(6))], 0);
  EXPECT_LE(static_cast<double>(m.adaptive_model.explore_steps), 0.05 * static_cast<double>(m.adaptive_model.steps) + 1);
}

// Plain serving is first-class: with no drafter the worker decodes plainly and still records; a
// drafter arriving with requests in flight is taken between two steps (their pairs recomputed)
// and later requests speculate; greedy tokens never change. A worker with speculation off
// refuses drafters by reason.
TEST(WorkerServing, ColdStartWithoutADrafterThenTheFirstVersionServes) {
  WorkerFixture s;
  messaging::SenderOptions sopt;
  sopt.endpoint = "inproc://nobody-listens";
  messaging::ZmqContext ctx;
  sopt.zmq_context = ctx.get();
  auto sender = std::make_shared<messaging::RecordSender>(sopt);
  WorkerOptions o = s.options();
  o.adaptive.enabled = true;
  // The chooser's depth once the drafter is there is fixed: whether speculating pays on this tiny
  // model depends on the machine's timing, and this test is about the drafter arriving.
  o.adaptive.model.fixed_depth = o.engine.spec.steps;
  Worker w(o, s.policy, 1, nullptr, 0, sender);
  const std::vector<GenRequest> reqs = greedy_requests(prompts(4, 5), 28);
  const BatchReport cold = w.generate(reqs, GenMode::kServing);
  EXPECT_EQ(cold.spec.rounds, 0);
  EXPECT_EQ(cold.drafter_version, 0u);
  for (const Completion& c : cold.completions)
    EXPECT_TRUE(c.result.aux.defined()) << "records flow without a drafter";
  EXPECT_EQ(w.metrics().records.queued, 4);
  const auto samples = capture(*s.policy, rollouts(*s.policy, prompts(16, 1)), 1);
  const WeightVersion v2 = s.publish_draft(trained_draft(*s.policy, samples, 60), 2);
  std::vector<GenRequest> warm = reqs;
  warm[0].on_tokens = once_started([&] { ASSERT_TRUE(w.offer_drafter(v2.dir)); });
  const BatchReport mid = w.generate(warm, GenMode::kServing);
  EXPECT_EQ(w.drafter_version(), 2u);
  EXPECT_EQ(w.metrics().mid_batch_swaps, 1);
  EXPECT_GT(mid.spec.rounds, 0) << "requests in flight speculate once the drafter arrives";
  const BatchReport hot = w.generate(reqs, GenMode::kServing);
  EXPECT_GT(hot.spec.rounds, 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(mid.completions[i].result.tokens, cold.completions[i].result.tokens) << i;
    EXPECT_EQ(hot.completions[i].result.tokens, cold.completions[i].result.tokens) << i;
    EXPECT_EQ(hot.completions[i].drafter_version, 2u);
  }
  WorkerOptions off = s.options();
  off.speculate = false;
  off.engine.spec = SpecSettings{0, 0, 0};  // not looked at: speculation is off
  Worker plain(off, s.policy, 1, std::make_shared<const DraftModel>(fresh_draft(*s.policy, 1)), 1, nullptr);
  std::string why;
  EXPECT_FALSE(plain.offer_drafter(v2.dir, &why));
  EXPECT_NE(why.find("does not speculate"), std::string::npos) << why;
  const BatchReport p = plain.generate(reqs, GenMode::kServing);
  EXPECT_EQ(p.spec.rounds, 0);
  EXPECT_EQ(p.drafter_version, 0u);
  EXPECT_EQ(p.completions[0].result.tokens, cold.completions[0].result.tokens);
}

TEST(WorkerServing, AbortFreesTheKvCacheAndAnswersWithWhatItHad) {
  WorkerFixture s;
  auto w = s.worker(std::make_shared<const DraftModel>(fresh_draft(*s.policy, 1)));
  const GenRequest long_one = greedy_requests({s.ps[0]}, 100)[0];
  const BatchReport whole = w->generate({long_one}, GenMode::kPlain);
  std::promise<Completion> got;
  std::atomic<uint64_t> id{0};
  GenRequest r = long_one;
  r.on_tokens = once_started([&] {
    while (id.load() == 0)
      std::this_thread::yield();
    EXPECT_TRUE(w->abort(id.load()));
  });
  id = w->submit(r, [&](Completion c) { got.set_value(std::move(c)); });
  const Completion c = got.get_future().get();
  EXPECT_EQ(c.result.finish_reason, "abort");
  EXPECT_LT(c.result.tokens.size(), whole.completions[0].result.tokens.size());
  EXPECT_TRUE(std::equal(c.result.tokens.begin(), c.result.tokens.end(), whole.completions[0].result.tokens.begin()));
  EXPECT_FALSE(w->abort(id.load())) << "already finished";
  const Worker::Load l = w->load();
  EXPECT_EQ(l.running, 0);
  EXPECT_EQ(l.free_blocks, l.total_blocks);
  EXPECT_EQ(w->metrics().aborted, 1);
}

// abort() finds a request from the moment submit() returns, whether it is still in the inbox,
// being admitted, or running: each ends as aborted, well before its length.
TEST(WorkerServing, AnAbortRightAfterSubmitIsHonoured) {
  WorkerFixture s;
  auto w = s.worker(nullptr);
  const GenRequest long_one = greedy_requests({s.ps[0]}, 100)[0];
  for (int k = 0; k < 40; ++k) {
    std::promise<Completion> got;
    // The first plain request builds the plain engine while it is admitted (milliseconds between
    // leaving the inbox and entering the engine): the abort arrives in between.
    const GenMode mode = k == 0 ? GenMode::kPlain : GenMode::kServing;
    const uint64_t id = w->submit(long_one, [&](Completion c) { got.set_value(std::move(c)); }, {mode, false});
    if (k % 2 == 0)
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    ASSERT_TRUE(w->abort(id)) << "submission " << k;
    const Completion c = got.get_future().get();
    EXPECT_EQ(c.status, CompletionStatus::kAborted) << k;
    EXPECT_EQ(c.result.finish_reason, "abort") << k;
    EXPECT_LT(c.result.tokens.size(), 100u) << k;
  }
  EXPECT_EQ(w->load().free_blocks, w->load().total_blocks);
}

// The server's own requests (SubmitOptions::internal, the health check) generate like any other
// but are never recorded and not counted as serving completions.
TEST(WorkerServing, InternalRequestsAreNeitherRecordedNorCounted) {
  WorkerFixture s;
  messaging::ZmqContext ctx;
  messaging::SenderOptions sopt;
  sopt.endpoint = "inproc://nobody-listens";
  sopt.zmq_context = ctx.get();
  auto w = s.worker(nullptr, std::make_shared<messaging::RecordSender>(sopt));
  const std::vector<GenRequest> reqs = greedy_requests({s.ps[0]}, 8);
  const std::vector<Completion> internal = w->submit_all(reqs, {GenMode::kServing, true})->take();
  const std::vector<Completion> client = w->submit_all(reqs)->take();
  EXPECT_EQ(internal[0].result.tokens, client[0].result.tokens);
  EXPECT_FALSE(internal[0].record);
  EXPECT_TRUE(client[0].record);
  const WorkerMetrics m = w->metrics();
  EXPECT_EQ(m.records.queued, 1);
  int64_t completions = 0;
  for (const auto& [v, cell] : m.by_version)
    completions += cell.completions;
  EXPECT_EQ(completions, 1);
}

TEST(WorkerServing, PauseModesFlushAndStop) {
  WorkerFixture s;
  auto w = s.worker(std::make_shared<const DraftModel>(fresh_draft(*s.policy, 1)));
  const std::vector<GenRequest> reqs = greedy_requests(s.ps, 40);
  const BatchReport want = w->generate(reqs, GenMode::kPlain);
  auto run_paused = [&](Worker::PauseMode mode) {
    std::vector<GenRequest> rs = reqs;
    std::promise<void> started;
    rs[0].on_tokens = once_started([&] { started.set_value(); });
    std::future<BatchReport> f = std::async(std::launch::async, [&] { return w->generate(rs, GenMode::kServing); });
    started.get_future().wait();
    w->pause(mode);
    const Worker::FlushResult busy = w->flush_cache();
    EXPECT_EQ(busy.ok, mode == Worker::PauseMode::kAbort) << busy.message;
    const int64_t steps = w->metrics().steps;
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(w->metrics().steps, steps) << "no step runs while paused";
    w->resume();
    return f.get();
  };
  const BatchReport in_place = run_paused(Worker::PauseMode::kInPlace);
  const BatchReport retract = run_paused(Worker::PauseMode::kRetract);
  int64_t preempted = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(in_place.completions[i].result.tokens, want.completions[i].result.tokens) << i;
    EXPECT_EQ(retract.completions[i].result.tokens, want.completions[i].result.tokens) << i;
    preempted += retract.completions[i].result.preemptions;
  }
  EXPECT_GT(preempted, 0) << "retract frees the KV of running requests; they are recomputed";
  const BatchReport aborted = run_paused(Worker::PauseMode::kAbort);
  for (const Completion& c : aborted.completions) {
    EXPECT_EQ(c.result.finish_reason, "abort");
    EXPECT_EQ(c.status, CompletionStatus::kAborted);
  }
  const Worker::FlushResult idle = w->flush_cache();
  EXPECT_TRUE(idle.ok) << idle.message;
  EXPECT_NE(idle.message.find("KV blocks of the serving engine are free"), std::string::npos) << idle.message;
  // Stop: a running request finishes; one not admitted yet is answered "shutting down".
  w->pause(Worker::PauseMode::kInPlace);
  std::promise<Completion> waiting;
  w->submit(reqs[1], [&](Completion c) { waiting.set_value(std::move(c)); });
  w->stop();
  const Completion c = waiting.get_future().get();
  EXPECT_EQ(c.status, CompletionStatus::kShuttingDown);
  EXPECT_EQ(c.error, "shutting down");
  EXPECT_THROW(w->submit(reqs[1], nullptr), Error);
}

TEST(WorkerServing, StreamsAcknowledgedRecordsToTheBufferWithinTheVolumeBounds) {
  WorkerFixture s;
  messaging::StoreOptions so;
  so.path = s.dir.str() + "/buffer";
  auto store = std::shared_ptr<messaging::RecordStore>(messaging::RecordStore::open(so));
  messaging::ZmqContext ctx;
  messaging::BufferServerOptions bo;
  bo.endpoints = {"inproc://worker-test"};
  bo.zmq_context = ctx.get();
  messaging::BufferServer server(bo, store);
  messaging::SenderOptions sopt;
  sopt.endpoint = bo.endpoints[0];
  sopt.worker = 1;
  sopt.zmq_context = ctx.get();
  auto draft = std::make_shared<const DraftModel>(fresh_draft(*s.policy, 1));
  sopt.model = record_model(s.policy->config(), s.options().engine, draft.get());  // checked by the buffer
  auto sender = std::make_shared<messaging::RecordSender>(sopt);
  auto w = s.worker(draft, sender);
  const BatchReport b = w->generate(greedy_requests(s.ps), GenMode::kServing);
  ASSERT_TRUE(sender->flush(10000ms));
  EXPECT_EQ(sender->metrics().records_acked.load(), s.ps.size());
  EXPECT_EQ(server.metrics().rejected_count(messaging::Reject::kModelMismatch), 0u);
  const auto stored = store->latest(10);
  ASSERT_EQ(stored.size(), s.ps.size());
  int64_t stored_rounds = 0, stored_accepted = 0, stored_rejected = 0, marked = 0;
  for (const auto& c : b.completions)
    for (const SpecRound& x : c.result.rounds)
      marked += x.rejected_at >= 0 ? 1 : 0;
  for (const auto& r : stored) {
    stored_rejected += static_cast<int64_t>(r.rejected.size());
    for (const messaging::RoundStats& x : r.rounds) {
      ++stored_rounds;
      stored_accepted += x.accepted;
      EXPECT_EQ(x.drafted, 4u);  // a chain of 4
      EXPECT_LE(x.accepted, x.drafted);
    }
    EXPECT_EQ(r.policy_version, 1u);
    EXPECT_EQ(r.drafter_version, 1u);
    EXPECT_EQ(r.worker, 1u);
    EXPECT_EQ(r.teacher_k, 16u);
    EXPECT_EQ(r.aux.shape[1], 3u * config().hidden_size);
  }
  EXPECT_EQ(stored_rounds, b.spec.rounds) << "every speculation round in its completion's record";
  EXPECT_EQ(stored_accepted, b.spec.accepted);
  EXPECT_GT(marked, 0);
  EXPECT_EQ(stored_rejected, marked) << "every rejected position in its completion's record";
  const BatchReport plain = w->generate(greedy_requests(s.ps), GenMode::kPlain);
  EXPECT_FALSE(plain.completions[0].result.aux.defined()) << "comparison modes are not recorded";

  // Volume bounds: half the completions recorded (evenly: 2 of 4, then 3 of 6), each cut into
  // records of at most 6 positions; the others are not even captured.
  WorkerOptions o = s.options();
  o.id = 2;
  o.record_rate = 0.5;
  o.record_max_tokens = 6;
  Worker half(o, s.policy, 1, std::make_shared<const DraftModel>(fresh_draft(*s.policy, 1)), 1, sender);
  const size_t before = store->latest(1000).size();
  const BatchReport hb = half.generate(greedy_requests(s.ps), GenMode::kServing);
  int64_t recorded = 0, want_records = 0, want_rounds = 0;
  for (const Completion& c : hb.completions) {
    EXPECT_EQ(c.record, c.result.aux.defined());
    recorded += c.record;
    want_records += c.record ? static_cast<int64_t>(split_sample(sample_of(c.result, 1), 6).size()) : 0;
    want_rounds += c.record ? static_cast<int64_t>(c.result.rounds.size()) : 0;
  }
  EXPECT_EQ(recorded, 2);
  EXPECT_GT(want_records, recorded);
  ASSERT_TRUE(sender->flush(10000ms));
  EXPECT_EQ(half.metrics().records.unrecorded, 2);
  EXPECT_EQ(half.metrics().records.chunks, want_records - recorded);
  const auto all = store->latest(1000);
  EXPECT_EQ(all.size(), before + static_cast<size_t>(want_records));
  int64_t split_rounds = 0;  // a split completion's rounds are in its first record
  for (const auto& r : all)  // the first worker's records are whole completions, all longer than 6
    split_rounds += r.tokens.size() <= 6 ? static_cast<int64_t>(r.rounds.size()) : 0;
  EXPECT_EQ(split_rounds, want_rounds);
  int64_t recorded6 = 0;
  for (const Completion& c : half.generate(greedy_requests(prompts(6, 9)), GenMode::kServing).completions)
    recorded6 += c.record;
  EXPECT_EQ(recorded6, 3);
  o.record_rate = 1.5;
  EXPECT_THROW(Worker(o, s.policy, 1, nullptr, 0, nullptr), Error);
}

}  // namespace
}  // namespace updraft
