// The rollout worker's hot-swap path and record stream: damaged, stale or misfitting versions
// are refused and counted with the serving version untouched; accepted ones are served from
// the next batch with every completion labelled; a policy swap keeps speculation lossless; a
// drafter that loses acceptance is rolled back; records reach a real buffer, acknowledged.
#include "rollout/worker/worker.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "messaging/buffer_server.h"
#include "messaging/zmq_util.h"
#include "tests/trainer/online_fixture.h"
#include "trainer/capture.h"

namespace updraft {
namespace {

using namespace testing_online;

struct Fixture {
  TempDir dir{"worker"};
  train::TrainableLlama m = make_policy(4);
  WeightVersion p1 = publish_policy(m, dir.str() + "/v", 1);
  std::shared_ptr<const PolicyModel> policy = std::make_shared<const PolicyModel>(PolicyModel::load(p1.dir));
  std::vector<std::vector<int32_t>> ps = prompts(4, 7);

  WeightVersion publish_draft(const DraftModel& d, uint64_t v) {
    return publish_version(dir.str() + "/v", "drafter", v, [&](const std::string& x) { d.save(x); });
  }
  std::unique_ptr<Worker> worker(std::shared_ptr<const DraftModel> d, std::shared_ptr<messaging::RecordSender> s = {},
                                 int64_t rollback_rounds = 1 << 30) {
    WorkerOptions o;
    o.id = 1;
    o.engine.spec = SpecSettings{4, 1, 4};
    o.rollback_rounds = rollback_rounds;
    o.rollback_margin = 0.1;
    return std::make_unique<Worker>(o, policy, 1, std::move(d), 1, std::move(s));
  }
};

TEST(Worker, RefusesDamagedStaleAndMisfittingDrafters) {
  Fixture s;
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
  EXPECT_FALSE(w->offer_drafter(good.dir));  // not newer than the staged one
  EXPECT_EQ(w->drafter_version(), 1u);       // staged, not yet serving
  const BatchReport b = w->generate(greedy_requests(s.ps), GenMode::kServing);
  EXPECT_EQ(w->drafter_version(), 2u);
  for (const Completion& c : b.completions) {
    EXPECT_EQ(c.policy_version, 1u);
    EXPECT_EQ(c.drafter_version, 2u);
  }
  EXPECT_EQ(w->metrics().drafter_swaps, 1);
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
  Fixture s;
  const auto samples = capture(*s.policy, rollouts(*s.policy, prompts(16, 1)), 1);
  auto w = s.worker(std::make_shared<const DraftModel>(trained_draft(*s.policy, samples, 60)));
  train::TrainableLlama m2 = make_policy(4);
  for (train::Param* p : m2.params())  // a different policy, same shapes (an RL update)
    p->value.data<float>()[0] += 0.5f;
  const WeightVersion p2 = publish_policy(m2, s.dir.str() + "/v", 2);
  EXPECT_TRUE(w->offer_policy(p2.dir));
  EXPECT_EQ(w->policy_version(), 1u);
  const BatchReport spec = w->generate(greedy_requests(s.ps), GenMode::kServing);
  const BatchReport plain = w->generate(greedy_requests(s.ps), GenMode::kPlain);
  EXPECT_EQ(w->metrics().policy_swaps, 1);
  const PolicyModel direct = PolicyModel::load(p2.dir);
  Engine e(direct);
  for (const GenRequest& r : greedy_requests(s.ps))
    e.submit(r);
  auto ref = e.run();
  std::sort(ref.begin(), ref.end(), [](const GenResult& a, const GenResult& b) { return a.id < b.id; });
  for (size_t i = 0; i < s.ps.size(); ++i) {
    EXPECT_EQ(spec.completions[i].policy_version, 2u);
    EXPECT_EQ(spec.completions[i].result.tokens, ref[i].tokens);
    EXPECT_EQ(plain.completions[i].result.tokens, ref[i].tokens);
    EXPECT_EQ(plain.completions[i].drafter_version, 0u);
  }
}

// A drafter that loses acceptance is rolled back. Without captures (no record sender) the
// verdict compares live τ across batches. With captured batches a live alarm is confirmed on
// the same completions: the second worker swaps its drafter for a copy of itself on the same
// requests (live τ holds: kept, nothing re-scored), then for a damaged one (alarm, confirmed:
// rolled back, and the restored drafter's batch stays the bar), then for another copy while the
// requests change from greedy to hot sampling, where every drafter accepts less, so live τ falls
// by far more than the margin (the cross-batch rule alone would roll the copy back), but on the
// same completions the two are equal and the copy stays.
TEST(Worker, RollsBackADrafterThatLosesAcceptance) {
  Fixture s;
  const auto samples = capture(*s.policy, rollouts(*s.policy, prompts(24, 1)), 1);
  const DraftModel trained = trained_draft(*s.policy, samples, 300);
  {  // live τ across batches
    auto w = s.worker(std::make_shared<const DraftModel>(trained), {}, 20);
    const BatchReport good = w->generate(greedy_requests(s.ps), GenMode::kServing);
    ASSERT_GT(good.spec.tau(), 1.2) << "the trained drafter should accept well";
    ASSERT_TRUE(w->offer_drafter(s.publish_draft(fresh_draft(*s.policy, 9), 2).dir));
    const BatchReport worse = w->generate(greedy_requests(s.ps), GenMode::kServing);
    EXPECT_EQ(worse.drafter_version, 2u);
    EXPECT_LT(worse.spec.tau(), good.spec.tau() * 0.9);
    EXPECT_EQ(w->metrics().rollbacks, 1);
    EXPECT_EQ(w->drafter_version(), 1u);
    const BatchReport after = w->generate(greedy_requests(s.ps), GenMode::kServing);
    EXPECT_EQ(after.drafter_version, 1u);
    EXPECT_NEAR(after.spec.tau(), good.spec.tau(), 1e-9);  // the same drafter, the same greedy rounds
  }
  messaging::SenderOptions sopt;
  sopt.endpoint = "inproc://nobody-listens";  // records queue up; capture needs a sender, not a buffer
  messaging::ZmqContext ctx;
  sopt.zmq_context = ctx.get();
  auto sender = std::make_shared<messaging::RecordSender>(sopt);
  auto w = s.worker(std::make_shared<const DraftModel>(trained), sender, 20);
  const BatchReport calm = w->generate(greedy_requests(s.ps), GenMode::kServing);
  ASSERT_GT(calm.spec.tau(), 1.2);
  ASSERT_TRUE(calm.completions[0].result.aux.defined()) << "serving batches with a sender are captured";

  ASSERT_TRUE(w->offer_drafter(s.publish_draft(trained, 3).dir));  // the same weights as v1
  const BatchReport same = w->generate(greedy_requests(s.ps), GenMode::kServing);
  ASSERT_EQ(same.drafter_version, 3u);
  ASSERT_GE(same.spec.rounds, 20) << "the watch must have closed on this batch";
  EXPECT_EQ(w->metrics().rollbacks, 0);
  EXPECT_EQ(w->metrics().rollback_confirmations, 0) << "no alarm, nothing to confirm";

  ASSERT_TRUE(w->offer_drafter(s.publish_draft(fresh_draft(*s.policy, 9), 4).dir));
  const BatchReport worse = w->generate(greedy_requests(s.ps), GenMode::kServing);
  EXPECT_EQ(worse.drafter_version, 4u);
  EXPECT_EQ(w->metrics().rollbacks, 1);
  EXPECT_EQ(w->metrics().rollback_confirmations, 1);
  EXPECT_EQ(w->drafter_version(), 3u);

  ASSERT_TRUE(w->offer_drafter(s.publish_draft(trained, 5).dir));  // the same weights again
  std::vector<GenRequest> hot = greedy_requests(s.ps);
  for (size_t i = 0; i < hot.size(); ++i) {
    hot[i].params.temperature = 2.0f;
    hot[i].params.has_seed = true;
    hot[i].params.seed = 100 + i;
  }
  const BatchReport stormy = w->generate(hot, GenMode::kServing);
  ASSERT_EQ(stormy.drafter_version, 5u);
  ASSERT_GE(stormy.spec.rounds, 20) << "the watch must have closed on this batch";
  ASSERT_LT(stormy.spec.tau(), 0.9 * same.spec.tau()) << "the live bar must be crossed for this test to mean anything";
  EXPECT_EQ(w->metrics().rollbacks, 1);
  EXPECT_EQ(w->metrics().rollback_confirmations, 2);
  EXPECT_EQ(w->drafter_version(), 5u);
}

TEST(Worker, AdaptiveSpeculationFallsBackToPlainWhenTheDrafterDoesNotPayAndStaysLossless) {
  Fixture s;
  WorkerOptions o;
  o.id = 1;
  o.engine.spec = SpecSettings{4, 1, 4};
  o.adaptive.enabled = true;
  o.adaptive.probe_every = 3;
  // An untrained drafter accepts almost nothing: each round drafts 4 tokens and verifies 5 rows
  // for about one token, so speculation is measurably slower than plain decoding.
  Worker w(o, s.policy, 1, std::make_shared<const DraftModel>(fresh_draft(*s.policy, 5)), 1, nullptr);
  const std::vector<std::vector<int32_t>> ps = prompts(6, 3);
  const BatchReport plain = w.generate(greedy_requests(ps), GenMode::kPlain);
  const BatchReport first = w.generate(greedy_requests(ps), GenMode::kServing);
  EXPECT_EQ(first.speculated, 6);  // nothing measured yet: speculate
  const BatchReport second = w.generate(greedy_requests(ps), GenMode::kServing);
  EXPECT_EQ(second.speculated, 4);  // then plain on the probes (requests 0 and 3), the rest fully
  EXPECT_EQ(second.at_full, 4);
  EXPECT_GT(w.metrics().spec_tps_estimate, 0);
  EXPECT_GT(w.metrics().plain_tps_estimate, w.metrics().spec_tps_estimate);
  const BatchReport third = w.generate(greedy_requests(ps), GenMode::kServing);
  EXPECT_EQ(third.speculated, 2);  // plain is faster: probes only
  EXPECT_EQ(third.at_full, 2);
  EXPECT_EQ(third.depth, 0);       // no shorter chain either: the drafter accepts almost nothing
  EXPECT_DOUBLE_EQ(third.mean_depth, 4.0 * 2 / 6);
  EXPECT_EQ(w.metrics().adaptive_plain_batches, 1);
  EXPECT_EQ(w.metrics().adaptive_depth_batches, (std::vector<int64_t>{1, 0, 0, 0, 2}));
  EXPECT_GT(third.spec.rounds, 0);  // the probes keep acceptance measured
  for (const BatchReport* b : {&first, &second, &third})
    for (size_t i = 0; i < ps.size(); ++i) {  // greedy output is the same whichever way it was decoded
      EXPECT_EQ(b->completions[i].result.tokens, plain.completions[i].result.tokens) << i;
      EXPECT_EQ(b->completions[i].drafter_version, 1u);
    }
}

TEST(Worker, ShorterChainsAreLosslessAndCountedApartFromTheFullSettings) {
  Fixture s;
  const auto samples = capture(*s.policy, rollouts(*s.policy, prompts(16, 1)), 1);
  const auto drafter = std::make_shared<const DraftModel>(trained_draft(*s.policy, samples, 60));
  const std::vector<std::vector<int32_t>> ps = prompts(6, 3);
  WorkerOptions o;
  o.id = 1;
  o.engine.spec = SpecSettings{4, 1, 5};
  o.adaptive.enabled = true;
  o.adaptive.probe_every = 3;  // probes: requests 0 and 3
  Worker full(o, s.policy, 1, drafter, 1, nullptr);
  const BatchReport plain = full.generate(greedy_requests(ps), GenMode::kPlain);
  EXPECT_EQ(plain.depth, 0);
  EXPECT_EQ(plain.speculated, 0);
  const BatchReport all = full.generate(greedy_requests(ps), GenMode::kServing);  // nothing measured: full depth
  EXPECT_EQ(all.depth, 4);
  ASSERT_GT(all.spec.rounds, 0);
  EXPECT_EQ(all.spec_shortened.rounds, 0);
  for (int64_t d = 1; d <= 3; ++d) {
    WorkerOptions od = o;
    od.adaptive.fixed_depth = d;
    Worker w(od, s.policy, 1, drafter, 1, nullptr);
    const BatchReport b = w.generate(greedy_requests(ps), GenMode::kServing);
    EXPECT_EQ(b.depth, d);
    EXPECT_EQ(b.speculated, 6);
    ASSERT_GT(b.spec_shortened.rounds, 0);
    EXPECT_LE(b.spec_shortened.accepted_at.size(), static_cast<size_t>(d));  // never drafted deeper
    EXPECT_LE(b.spec_shortened.drafted, d * b.spec_shortened.rounds);
    // The live acceptance (rep.spec) is the probes' at the full settings: requests 0 and 3.
    EXPECT_EQ(b.spec.rounds, b.completions[0].result.spec.rounds + b.completions[3].result.spec.rounds);
    EXPECT_EQ(b.completions[0].result.spec.rounds, all.completions[0].result.spec.rounds);
    EXPECT_EQ(w.metrics().adaptive_depth_batches[static_cast<size_t>(d)], 1);
    for (size_t i = 0; i < ps.size(); ++i)
      EXPECT_EQ(b.completions[i].result.tokens, plain.completions[i].result.tokens) << "depth " << d << " request " << i;
  }
  WorkerOptions bad = o;
  bad.adaptive.fixed_depth = 5;
  EXPECT_THROW(Worker(bad, s.policy, 1, drafter, 1, nullptr), Error);
  bad.engine.spec = SpecSettings{4, 2, 6};  // a tree has no shorter chains
  bad.adaptive.fixed_depth = 2;
  EXPECT_THROW(Worker(bad, s.policy, 1, drafter, 1, nullptr), Error);
}

// A drafter offered while a serving batch runs is swapped in between its steps: completions
// that finished before report the old version, the rest the new one; the batch's acceptance is
// split at the swap; greedy tokens stay those of plain decoding. A drafter staged together with
// a policy waits for the batch boundary, and so does every drafter with swap_mid_batch off.
TEST(Worker, SwapsADrafterInMidBatchBetweenSteps) {
  Fixture s;
  const WeightVersion v2 = s.publish_draft(fresh_draft(*s.policy, 2), 2);
  const WeightVersion v3 = s.publish_draft(fresh_draft(*s.policy, 3), 3);
  train::TrainableLlama m2 = make_policy(4);
  m2.params()[1].value.data<float>()[0] += 1.0f;
  const WeightVersion p2 = publish_policy(m2, s.dir.str() + "/v", 2);
  const std::vector<GenRequest> reqs = greedy_requests(prompts(6, 11), 24);
  std::function<void()> offer;
  WorkerOptions o;
  o.id = 1;
  o.engine.spec = SpecSettings{4, 1, 4};
  o.engine.max_batch = 1;  // one request after another: many steps per batch
  o.rollback_rounds = 1 << 30;
  o.on_progress = [&](int64_t finished, int64_t total) {
    EXPECT_LE(finished, total);
    if (finished == 1 && offer)
      offer();
  };
  Worker w(o, s.policy, 1, std::make_shared<const DraftModel>(fresh_draft(*s.policy, 1)), 1, nullptr);
  const BatchReport plain = w.generate(reqs, GenMode::kPlain);

  offer = [&] { ASSERT_TRUE(w.offer_drafter(v2.dir)); };
  const BatchReport b = w.generate(reqs, GenMode::kServing);
  EXPECT_EQ(b.replaced_drafter_version, 1u);
  EXPECT_EQ(b.drafter_version, 2u);
  EXPECT_EQ(w.drafter_version(), 2u);
  EXPECT_EQ(w.metrics().mid_batch_swaps, 1);
  EXPECT_EQ(w.metrics().drafter_swaps, 1);
  int64_t rounds = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(b.completions[i].result.tokens, plain.completions[i].result.tokens) << i;
    EXPECT_EQ(b.completions[i].drafter_version, i == 0 ? 1u : 2u) << i;
    rounds += b.completions[i].result.spec.rounds;
  }
  EXPECT_GT(b.spec_replaced.rounds, 0);
  EXPECT_GT(b.spec.rounds, 0);
  EXPECT_EQ(b.spec.rounds + b.spec_replaced.rounds, rounds);
  const WorkerMetrics m = w.metrics();
  EXPECT_EQ(m.by_version.at({1, 1}).completions, 1);
  EXPECT_EQ(m.by_version.at({1, 2}).completions, 5);
  EXPECT_EQ(m.by_version.at({1, 1}).spec.rounds, b.spec_replaced.rounds);

  // Staged together with a policy: both wait for the next batch.
  offer = [&] {
    ASSERT_TRUE(w.offer_policy(p2.dir));
    ASSERT_TRUE(w.offer_drafter(v3.dir));
  };
  const BatchReport c = w.generate(reqs, GenMode::kServing);
  EXPECT_EQ(c.replaced_drafter_version, 0u);
  EXPECT_EQ(c.drafter_version, 2u);
  EXPECT_EQ(w.metrics().mid_batch_swaps, 1);
  offer = nullptr;
  const BatchReport d = w.generate(reqs, GenMode::kServing);
  EXPECT_EQ(d.policy_version, 2u);
  EXPECT_EQ(d.drafter_version, 3u);
  EXPECT_EQ(w.metrics().drafter_swaps, 2);

  // With swap_mid_batch off, a drafter offered mid-batch serves from the next batch.
  o.swap_mid_batch = false;
  Worker off(o, s.policy, 1, std::make_shared<const DraftModel>(fresh_draft(*s.policy, 1)), 1, nullptr);
  offer = [&] { ASSERT_TRUE(off.offer_drafter(v2.dir)); };
  EXPECT_EQ(off.generate(reqs, GenMode::kServing).drafter_version, 1u);
  offer = nullptr;
  EXPECT_EQ(off.generate(reqs, GenMode::kServing).drafter_version, 2u);
  EXPECT_EQ(off.metrics().mid_batch_swaps, 0);
}

TEST(Worker, StreamsAcknowledgedRecordsToTheBuffer) {
  Fixture s;
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
  auto sender = std::make_shared<messaging::RecordSender>(sopt);
  auto w = s.worker(std::make_shared<const DraftModel>(fresh_draft(*s.policy, 1)), sender);
  const BatchReport b = w->generate(greedy_requests(s.ps), GenMode::kServing);
  EXPECT_EQ(w->stream_records(b), static_cast<int64_t>(s.ps.size()));
  ASSERT_TRUE(sender->flush(std::chrono::milliseconds(10000)));
  EXPECT_EQ(sender->metrics().records_acked.load(), s.ps.size());
  const auto stored = store->latest(10);
  ASSERT_EQ(stored.size(), s.ps.size());
  int64_t stored_rounds = 0, stored_accepted = 0;
  for (const auto& r : stored) {
    for (const messaging::RoundStats& x : r.rounds) {
      ++stored_rounds;
      stored_accepted += x.accepted;
      EXPECT_EQ(x.drafted, 3u);  // a tree of 4 nodes: the root and 3 drafts
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
  EXPECT_GT(b.spec.rounds, 0);
  for (const Completion& c : b.completions)  // captured while generating
    EXPECT_TRUE(c.result.aux.defined());
  // A batch the engine did not capture needs a forward of its own policy: once that policy is
  // no longer served its records are refused (their aux states would come from another).
  const BatchReport plain = w->generate(greedy_requests(s.ps), GenMode::kPlain);
  EXPECT_FALSE(plain.completions[0].result.aux.defined());
  train::TrainableLlama m2 = make_policy(4);
  m2.params()[1].value.data<float>()[0] += 1.0f;
  ASSERT_TRUE(w->offer_policy(publish_policy(m2, s.dir.str() + "/v", 2).dir));
  w->generate(greedy_requests(s.ps), GenMode::kPlain);
  EXPECT_THROW(w->stream_records(plain), Error);
  EXPECT_EQ(w->stream_records(b), static_cast<int64_t>(s.ps.size()));  // captured: still fine

  // Volume bounds: half the completions recorded (evenly: 2 of 4, then 3 of 6), each cut into
  // records of at most 6 positions; the others are not even captured.
  WorkerOptions o;
  o.id = 2;
  o.engine.spec = SpecSettings{4, 1, 4};
  o.record_rate = 0.5;
  o.record_max_tokens = 6;
  Worker half(o, s.policy, 1, std::make_shared<const DraftModel>(fresh_draft(*s.policy, 1)), 1, sender);
  const BatchReport hb = half.generate(greedy_requests(s.ps), GenMode::kServing);
  int64_t recorded = 0, want_records = 0;
  for (const Completion& c : hb.completions) {
    EXPECT_EQ(c.record, c.result.aux.defined());
    recorded += c.record;
    const int64_t n = static_cast<int64_t>(c.result.prompt.size() + c.result.tokens.size());
    want_records += c.record ? static_cast<int64_t>(train::split_sample(train::sample_of(c.result, 1), 6).size()) : 0;
    EXPECT_TRUE(!c.record || n > 6) << "the test needs completions longer than the cap";
  }
  EXPECT_EQ(recorded, 2);
  const size_t before = store->latest(1000).size();
  EXPECT_EQ(half.stream_records(hb), want_records);
  EXPECT_GT(want_records, recorded);
  EXPECT_EQ(half.metrics().completions_unrecorded, 2);
  EXPECT_EQ(half.metrics().record_chunks, want_records - recorded);
  ASSERT_TRUE(sender->flush(std::chrono::milliseconds(10000)));
  const auto all = store->latest(1000);
  EXPECT_EQ(all.size(), before + static_cast<size_t>(want_records));
  int64_t short_records = 0;  // the first worker's records are whole completions, all longer
  for (const auto& r : all)
    short_records += r.tokens.size() <= 6 ? 1 : 0;
  EXPECT_EQ(short_records, want_records);
  int64_t split_rounds = 0, want_rounds = 0;  // a split completion's rounds are in its first record
  for (const auto& r : all)
    split_rounds += r.tokens.size() <= 6 ? static_cast<int64_t>(r.rounds.size()) : 0;  // the split ones
  for (const Completion& c : hb.completions)
    want_rounds += c.record ? static_cast<int64_t>(c.result.rounds.size()) : 0;
  EXPECT_EQ(split_rounds, want_rounds);
  EXPECT_GT(want_rounds, 0);
  const std::vector<std::vector<int32_t>> six = prompts(6, 9);
  int64_t recorded6 = 0;
  for (const Completion& c : half.generate(greedy_requests(six), GenMode::kServing).completions)
    recorded6 += c.record;
  EXPECT_EQ(recorded6, 3);
  o.record_rate = 1.5;
  EXPECT_THROW(Worker(o, s.policy, 1, nullptr, 0, nullptr), Error);
}

}  // namespace
}  // namespace updraft
