// The online trainer over a real RocksDB buffer: records convert losslessly, a round trains on
// the window, promotes a better drafter as a verified published version (which the engine
// measures as better), and a restarted trainer resumes from its checkpoint.
#include "trainer/online/online_trainer.h"

#include <gtest/gtest.h>

#include "messaging/codec.h"
#include "messaging/record_store.h"
#include "rollout/capture/record_convert.h"
#include "tests/trainer/online_fixture.h"

namespace updraft::train {
namespace {

using namespace testing_online;

TEST(RecordConvert, RoundTripThroughTheWireIsExact) {
  const train::TrainableLlama m = make_policy(4);
  TempDir t("rc");
  const PolicyModel p = PolicyModel::load(publish_policy(m, t.str(), 1).dir);
  const auto samples = capture(p, rollouts(p, prompts(2, 1)), 7);
  for (const TttSample& s : samples) {
    messaging::RecordData r = to_record(s);
    r.worker = 3;
    const messaging::EncodedMessage msg = messaging::encode_record(r);
    const TttSample back = to_sample(messaging::decode_record(msg.data(), msg.size()));
    EXPECT_EQ(back.tokens, s.tokens);
    EXPECT_EQ(back.prompt_length, s.prompt_length);
    EXPECT_EQ(back.policy_version, 7u);
    EXPECT_EQ(back.teacher_ids, s.teacher_ids);
    EXPECT_EQ(back.teacher_logprobs, s.teacher_logprobs);
    ASSERT_EQ(back.aux.dtype(), s.aux.dtype());
    ASSERT_EQ(back.aux.shape(), s.aux.shape());
    EXPECT_EQ(0, std::memcmp(back.aux.raw(), s.aux.raw(), s.aux.nbytes()));
  }
}

TEST(OnlineTrainer, RoundPromotesABetterDrafterAndRestartResumes) {
  const train::TrainableLlama m = make_policy(4);
  TempDir t("ot");
  auto policy = std::make_shared<const PolicyModel>(PolicyModel::load(publish_policy(m, t.str() + "/p", 1).dir));
  const auto train_prompts = prompts(24, 1), eval_prompts = prompts(6, 99);
  const auto samples = capture(*policy, rollouts(*policy, train_prompts), 1);
  messaging::StoreOptions so;
  so.path = t.str() + "/buffer";
  auto store = std::shared_ptr<messaging::RecordStore>(messaging::RecordStore::open(so));
  store_samples(*store, samples, 1, 0);
  EXPECT_EQ(store->consumer_lag(), samples.size());

  const DraftModel initial = fresh_draft(*policy, 5);
  OnlineTrainerOptions o;
  o.dir = t.str() + "/versions";
  o.steps_per_round = 300;
  o.lr = 1e-3;
  o.ttt.steps = 3;
  o.heldout_fraction = 0.25;
  std::vector<uint64_t> announced;
  o.on_promote = [&](const WeightVersion& v) { announced.push_back(v.version); };
  {
    OnlineTrainer tr(o, store, policy, 1, initial, 1);
    EXPECT_FALSE(tr.resumed());
    const RoundReport r = tr.run_round("test");
    EXPECT_EQ(r.train_records + r.heldout_records, samples.size());
    EXPECT_GT(r.heldout_records, 0u);
    EXPECT_GT(r.candidate_tau, r.serving_tau);
    ASSERT_TRUE(r.promoted);
    EXPECT_EQ(r.serving_version, 2u);
    EXPECT_EQ(announced, std::vector<uint64_t>{2});
    EXPECT_EQ(store->consumer_lag(), 0u);
  }
  // The published version verifies, loads, and is measurably better in the engine.
  const WeightVersion v = verify_version(latest_version(o.dir, "drafter").dir, "drafter");
  EXPECT_EQ(v.version, 2u);
  EXPECT_EQ(v.meta["policy_version"], 1);
  const DraftModel promoted = DraftModel::load(v.dir, policy->draft_target());
  const double tau_before = acceptance(*policy, initial, eval_prompts).tau();
  const double tau_after = acceptance(*policy, promoted, eval_prompts).tau();
  EXPECT_GT(tau_after, tau_before + 0.2) << "before " << tau_before;

  // A restarted trainer continues from its checkpoint with the newest version serving.
  OnlineTrainer again(o, store, policy, 1, initial, 1);
  EXPECT_TRUE(again.resumed());
  EXPECT_EQ(again.serving_version(), 2u);
  const RoundReport r2 = again.run_round("restart");
  EXPECT_EQ(r2.round, 2);
}

// A candidate that diverged (here: a learning rate beyond float's range puts infinities in its
// weights) is never published, whatever its estimated τ; training restarts from the serving one.
TEST(OnlineTrainer, ANonFiniteCandidateIsNeverPublished) {
  BufferBed b("otnan");
  const auto samples = capture(*b.policy, rollouts(*b.policy, prompts(8, 1)), 1);
  store_samples(*b.store, samples, 1, 0);
  OnlineTrainerOptions o;
  o.dir = b.t.str() + "/versions";
  o.steps_per_round = 3;
  o.lr = 1e39;
  o.promote_margin = -1;  // anything would be promoted, were it finite
  o.heldout_fraction = 0.25;
  OnlineTrainer tr(o, b.store, b.policy, 1, fresh_draft(*b.policy, 5), 1);
  const RoundReport r = tr.run_round("test");
  EXPECT_FALSE(r.promoted);
  EXPECT_NE(r.refused.find("non-finite"), std::string::npos) << r.refused;
  EXPECT_EQ(r.serving_version, 1u);
  EXPECT_EQ(latest_version(o.dir, "drafter").version, 0u) << "nothing published";
}

// Records the trainer cannot use (stored before the buffer checked them, or from a sender that
// declared no model) never fail a round: each is skipped and quarantined by key, for good and
// across restarts, and the round trains on the rest.
TEST(OnlineTrainer, BadRecordsAreQuarantinedAndTheRoundGoesOn) {
  BufferBed b("otq");
  std::vector<TttSample> samples = capture(*b.policy, rollouts(*b.policy, prompts(8, 1)), 1);
  const size_t good = samples.size();
  TttSample teacher = samples[0], nan_aux = samples[1], narrow = samples[2];
  teacher.teacher_ids[3] = -5;
  nan_aux.aux = Tensor::empty(samples[1].aux.shape(), DType::F32);  // its own storage
  nan_aux.aux.copy_from(samples[1].aux.to_dtype(DType::F32));
  nan_aux.aux.data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  narrow.aux = narrow.aux.reshape({narrow.aux.size(0) * 2, -1});  // another width
  narrow.tokens.insert(narrow.tokens.end(), narrow.tokens.begin(), narrow.tokens.end());
  narrow.prompt_length += narrow.length() / 2;  // the teacher rows still match the response
  samples.insert(samples.end(), {teacher, nan_aux, narrow});
  store_samples(*b.store, samples, 1, 0);
  OnlineTrainerOptions o;
  o.dir = b.t.str() + "/versions";
  o.steps_per_round = 2;
  {
    OnlineTrainer tr(o, b.store, b.policy, 1, fresh_draft(*b.policy, 5), 1);
    const RoundReport r = tr.run_round("test");
    EXPECT_EQ(r.quarantined, 3);
    EXPECT_EQ(r.train_records + r.heldout_records, good);
    const RoundReport again = tr.run_round("again");
    EXPECT_EQ(again.quarantined, 0);
    EXPECT_EQ(again.skipped_quarantined, 3) << "not even looked at again";
  }
  OnlineTrainer restarted(o, b.store, b.policy, 1, fresh_draft(*b.policy, 5), 1);
  EXPECT_EQ(restarted.quarantined(), 3u);
  const auto entries = messaging::QuarantineLog::load(restarted.quarantine_path());
  ASSERT_EQ(entries.size(), 3u);
  std::string reasons;
  for (const auto& e : entries) {
    EXPECT_TRUE(b.store->contains(e.key));
    EXPECT_EQ(e.round, 1);
    reasons += e.reason + "\n";
  }
  EXPECT_NE(reasons.find("teacher id -5 outside the vocabulary"), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("not finite"), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("aux must be"), std::string::npos) << reasons;
}

TEST(OnlineTrainer, EvalRecordsBoundsTheEvaluation) {
  BufferBed bed("ote");
  auto& policy = bed.policy;
  auto& store = bed.store;
  const auto rolls = rollouts(*policy, prompts(16, 6));
  store_samples(*store, capture(*policy, {rolls.begin(), rolls.begin() + 8}, 1), 1, 0);
  store_samples(*store, capture(*policy, {rolls.begin() + 8, rolls.end()}, 2), 1, 8);
  auto round = [&](size_t cap) {
    OnlineTrainerOptions o;
    o.steps_per_round = 2;
    o.ttt.steps = 2;
    o.heldout_fraction = 0.5;
    o.eval_records = cap;
    o.dir = bed.t.str() + "/cap" + std::to_string(cap);
    return OnlineTrainer(o, store, policy, 2, fresh_draft(*policy, 5), 1).run_round("test");
  };
  const RoundReport all = round(0), two = round(2);
  ASSERT_GT(all.heldout_records, 2u) << "the split held out too few of 16 records for this test";
  EXPECT_EQ(all.evaluated_records, all.heldout_records);
  EXPECT_EQ(two.heldout_records, all.heldout_records);
  EXPECT_EQ(two.evaluated_records, 2u);
  EXPECT_NE(two.serving_tau, all.serving_tau) << "the same drafter scored on 2 of the records, not all";
}

// Within a round the lr is constant, or falls from lr towards round_min_lr_ratio x lr by the
// decay; the round applies it (the same draws at another lr train to another loss), and a ratio
// outside [0, 1] is refused by name.
TEST(OnlineTrainer, ARoundsLrFallsByItsDecay) {
  OnlineTrainerOptions o;
  o.lr = 1e-3;
  o.steps_per_round = 40;
  const LrSchedule constant(round_schedule(o));
  o.round_decay = LrDecay::Cosine;
  const LrSchedule cosine(round_schedule(o));
  EXPECT_DOUBLE_EQ(constant.lr(39), 1e-3);
  EXPECT_DOUBLE_EQ(cosine.lr(0), 1e-3);
  EXPECT_NEAR(cosine.lr(20), 0.55e-3, 1e-12);  // halfway: the mean of 1e-3 and 0.1e-3
  EXPECT_NEAR(cosine.lr(39), 1e-4, 2e-6);      // step 39 of 40: just above the floor

  BufferBed bed("otlr");
  auto& policy = bed.policy;
  store_samples(*bed.store, capture(*policy, rollouts(*policy, prompts(8, 6)), 1), 1, 0);
  auto round = [&](LrDecay d, double ratio) {
    OnlineTrainerOptions r;
    r.steps_per_round = 3;  // the third step's loss follows the second update, at the round's lr
    r.ttt.steps = 2;
    r.warmup_steps = 0;
    r.round_decay = d;
    r.round_min_lr_ratio = ratio;
    r.dir = bed.t.str() + "/" + lr_decay_name(d) + std::to_string(ratio);
    return OnlineTrainer(r, bed.store, policy, 1, fresh_draft(*policy, 5), 1).run_round("test");
  };
  const RoundReport flat = round(LrDecay::Constant, 0.1), falling = round(LrDecay::Linear, 0.0);
  EXPECT_EQ(flat.samples, falling.samples);
  EXPECT_NE(flat.loss, falling.loss);
  try {
    round(LrDecay::Cosine, 1.5);
    ADD_FAILURE() << "a min_lr_ratio of 1.5 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("min_lr_ratio"), std::string::npos) << e.what();
  }
}

// By default the AdamW moments carry over into the next round; with fresh_optimizer_each_round
// every round starts from zero moments: the first round trains alike, the second does not.
TEST(OnlineTrainer, AFreshOptimizerEachRoundForgetsTheMoments) {
  BufferBed bed("otfresh");
  auto& policy = bed.policy;
  store_samples(*bed.store, capture(*policy, rollouts(*policy, prompts(8, 6)), 1), 1, 0);
  auto two_rounds = [&](bool fresh) {
    OnlineTrainerOptions r;
    r.steps_per_round = 3;
    r.ttt.steps = 2;
    r.warmup_steps = 0;
    r.fresh_optimizer_each_round = fresh;
    r.dir = bed.t.str() + (fresh ? "/fresh" : "/carried");
    OnlineTrainer t(r, bed.store, policy, 1, fresh_draft(*policy, 5), 1);
    const RoundReport first = t.run_round("test");
    return std::make_pair(first, t.run_round("test"));
  };
  const auto carried = two_rounds(false), fresh = two_rounds(true);
  EXPECT_EQ(carried.first.samples, fresh.first.samples);
  EXPECT_EQ(carried.first.loss, fresh.first.loss);
  EXPECT_EQ(carried.second.samples, fresh.second.samples);
  EXPECT_NE(carried.second.loss, fresh.second.loss);
}

}  // namespace
}  // namespace updraft::train

namespace updraft::train {
namespace {

using namespace testing_online;

// What the engine captures while generating equals the separate capture pass: the aux states
// of every position but the last, and the teacher top-k of every output token, for plain and
// speculative requests, greedy and sampled, including tokens accepted in multi-token rounds.
TEST(EngineCapture, MatchesTheCapturePass) {
  const train::TrainableLlama m = make_policy(4);
  TempDir t("cap");
  const PolicyModel p = PolicyModel::load(publish_policy(m, t.str(), 1).dir);
  const auto samples = capture(p, rollouts(p, prompts(16, 1)), 1);
  const DraftModel d = trained_draft(p, samples, 100);
  for (const bool spec : {false, true})
    for (const float temp : {0.0f, 1.0f}) {
      EngineOptions eo;
      eo.spec = SpecSettings{3, 2, 5};
      eo.capture_teacher_k = 8;
      Engine e(p, eo, &d);
      for (GenRequest r : greedy_requests(prompts(5, 3), 20)) {
        r.speculate = spec;
        r.capture = true;
        r.params.temperature = temp;
        r.params.has_seed = true;
        r.params.seed = 5;
        e.submit(r);
      }
      auto res = e.run();
      if (spec) {
        ASSERT_GT(e.stats().spec.accepted, 0) << "no multi-token round exercised";
      }
      EXPECT_GT(e.stats().capture_seconds, 0.0) << "the capture timer must see the capture work";
      {  // and an engine that captures nothing times nothing
        Engine quiet(p, eo, &d);
        GenRequest r = greedy_requests(prompts(1, 3), 4)[0];
        r.speculate = spec;
        quiet.submit(r);
        quiet.run();
        EXPECT_EQ(quiet.stats().capture_seconds, 0.0);
      }
      std::vector<Rollout> ro;
      for (const auto& g : res)
        ro.push_back({g.prompt, g.tokens});
      CaptureOptions co;
      co.teacher_k = 8;
      co.aux_layers = d.aux_layers();
      const auto ref = capture_samples(p, ro, co, 1);
      for (size_t i = 0; i < res.size(); ++i) {
        const GenResult& g = res[i];
        const TttSample& x = ref[i];
        SCOPED_TRACE("spec " + std::to_string(spec) + " temperature " + std::to_string(temp) + " request " +
                     std::to_string(i));
        ASSERT_EQ(g.aux.shape(), x.aux.shape());
        ASSERT_EQ(g.teacher_k, 8);
        const auto a = g.aux.to_f32_vector(), b = x.aux.to_f32_vector();
        const int64_t W = x.aux.size(1), n = x.length();
        for (int64_t j = 0; j < (n - 1) * W; ++j)
          ASSERT_NEAR(a[static_cast<size_t>(j)], b[static_cast<size_t>(j)],
                      0.02f * std::abs(b[static_cast<size_t>(j)]) + 1e-3f)
              << "aux row " << j / W;
        for (int64_t r = 0; r < x.response_length(); ++r) {
          std::vector<std::pair<int32_t, float>> u, v;
          for (int64_t c = 0; c < 8; ++c) {
            u.push_back({g.teacher_ids[r * 8 + c], g.teacher_logprobs[r * 8 + c]});
            v.push_back({x.teacher_ids[r * 8 + c], x.teacher_logprobs[r * 8 + c]});
          }
          std::sort(u.begin(), u.end());
          std::sort(v.begin(), v.end());
          for (size_t c = 0; c < u.size(); ++c) {
            ASSERT_EQ(u[c].first, v[c].first) << "teacher row " << r;
            ASSERT_NEAR(u[c].second, v[c].second, 1e-3f) << "teacher row " << r;
          }
        }
      }
    }
}

// The token-count trigger: a round starts once the records stored since the last one hold
// min_new_tokens response tokens, however few records that is.
// The window's mix: with newest_share 1 every training draw comes from the newest policy
// version's records; with 0 (uniform) older versions' records are drawn too.
TEST(OnlineTrainer, NewestShareSetsTheMixOfPolicyVersions) {
  BufferBed bed("otm");
  TempDir& t = bed.t;
  auto& policy = bed.policy;
  auto& store = bed.store;
  const auto rolls = rollouts(*policy, prompts(12, 6));
  store_samples(*store, capture(*policy, {rolls.begin(), rolls.begin() + 8}, 1), 1, 0);
  store_samples(*store, capture(*policy, {rolls.begin() + 8, rolls.end()}, 2), 1, 8);
  for (const double share : {1.0, 0.0}) {
    OnlineTrainerOptions o;
    o.dir = t.str() + "/versions-" + std::to_string(static_cast<int>(share));
    o.steps_per_round = 6;
    o.ttt.steps = 2;
    o.heldout_fraction = 0;
    o.newest_share = share;
    OnlineTrainer tr(o, store, policy, 2, fresh_draft(*policy, 5), 1);
    const RoundReport r = tr.run_round("test");
    EXPECT_EQ(r.samples, 6 * o.samples_per_step);
    if (share == 1.0)
      EXPECT_EQ(r.samples_newest, r.samples);
    else
      EXPECT_LT(r.samples_newest, r.samples) << "uniform draws over 8 v1 and 4 v2 records";
  }
  OnlineTrainerOptions bad;
  bad.dir = t.str() + "/bad";
  bad.newest_share = 1.5;
  EXPECT_THROW(OnlineTrainer(bad, store, policy, 2, fresh_draft(*policy, 5), 1), Error);
}

}  // namespace
}  // namespace updraft::train
