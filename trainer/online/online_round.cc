// OnlineTrainer's round, parts 1-4: the window of records, the optimiser steps on it, the evaluation of
// candidate and serving drafter, and the promotion.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "kernels/core/error.h"
#include "kernels/ops/sampling.h"
#include "messaging/key.h"
#include "rollout/capture/record_convert.h"
#include "trainer/online/online_trainer.h"

namespace updraft::train {
namespace {

// Held out by prompt, not by record: RL samples several responses per prompt (a GRPO group),
// and a candidate trained on some of them predicts the others far better than it predicts new
// prompts, which made every candidate look better than the serving drafter.
bool is_heldout(const messaging::RecordData& r, double fraction) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  const size_t n = std::min<size_t>(r.prompt_length, r.tokens.size());
  for (size_t i = 0; i < n; ++i)
    h = ops::mix64(h ^ static_cast<uint32_t>(r.tokens[i]));
  return static_cast<double>(h >> 11) * 0x1.0p-53 < fraction;
}

}  // namespace

// The newest window_records records of the newest window_versions policy versions, as samples
// split into training and held-out ones (eval_records of the held-out kept, the newest policy's
// first); records the trainer cannot use are quarantined. Returns the newest policy version seen.
uint64_t OnlineTrainer::load_window(const PolicyModel& policy, uint64_t policy_version, RoundReport& rep,
                                    std::vector<TttSample>& train, std::vector<TttSample>& heldout, uint64_t& eval_id) {
  std::vector<messaging::RecordData> recs = store_->latest(options_.window_records);
  if (!recs.empty()) {
    messaging::RecordKey newest{recs.front().policy_version, recs.front().worker, recs.front().seq};
    store_->mark_consumed(newest);
  }
  uint64_t max_v = 0;
  for (const auto& r : recs)
    max_v = std::max(max_v, r.policy_version);
  const uint64_t min_keep = max_v + 1 > options_.window_versions ? max_v + 1 - options_.window_versions : 0;
  rep.min_policy_version = max_v;
  std::vector<messaging::RecordKey> heldout_keys, train_keys;
  const int64_t aux_width = draft_->config().fc_in();
  for (const auto& r : recs) {
    if (r.policy_version < min_keep)
      continue;
    const messaging::RecordKey key{r.policy_version, r.worker, r.seq};
    if (quarantine_->contains(key)) {
      ++rep.skipped_quarantined;
      continue;
    }
    TttSample s;
    try {  // one bad record never fails a round: it is skipped, and quarantined for good
      s = to_sample(r);
      s.validate(aux_width, policy.config().vocab_size, "buffer record");
    } catch (const Error& e) {
      quarantine_->add(key, rep.round, e.what());
      ++rep.quarantined;
      spdlog::warn("online trainer: record {} quarantined: {}", messaging::key_text(key), e.what());
      continue;
    }
    rep.min_policy_version = std::min(rep.min_policy_version, r.policy_version);
    const bool held = is_heldout(r, options_.heldout_fraction);
    (held ? heldout : train).push_back(std::move(s));
    (held ? heldout_keys : train_keys).push_back(key);
  }
  rep.max_policy_version = max_v;
  rep.trained_on_policy = policy_version;
  rep.train_records = train.size();
  rep.heldout_records = heldout.size();
  if (options_.eval_records > 0 && heldout.size() > options_.eval_records) {  // the newest policy's first
    std::vector<size_t> order(heldout.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return heldout[a].policy_version > heldout[b].policy_version; });
    order.resize(options_.eval_records);
    std::vector<TttSample> kept;
    std::vector<messaging::RecordKey> kept_keys;
    for (size_t i : order) {
      kept.push_back(std::move(heldout[i]));
      kept_keys.push_back(heldout_keys[i]);
    }
    heldout = std::move(kept);
    heldout_keys = std::move(kept_keys);
  }
  // Evaluation reads the held-out records, or the training ones while none are held out.
  uint64_t h = 0x243f6a8885a308d3ull;
  for (const messaging::RecordKey& k : heldout.empty() ? train_keys : heldout_keys)
    h = ops::mix64(ops::mix64(ops::mix64(h ^ k.policy_version) ^ k.worker) ^ k.seq);
  eval_id = h;
  return max_v;
}

// steps_per_round optimiser steps of samples_per_step draws each (newest_share of them from the
// newest policy version's records), pausing at step boundaries while the trainer is paused.
void OnlineTrainer::train_steps(const std::vector<TttSample>& train, uint64_t max_v, RoundReport& rep) {
  std::uniform_int_distribution<size_t> pick(0, train.size() - 1);
  std::vector<size_t> newest;  // training records of the newest policy version in the window
  for (size_t i = 0; i < train.size(); ++i)
    if (train[i].policy_version == max_v)
      newest.push_back(i);
  std::uniform_int_distribution<size_t> pick_newest(0, newest.empty() ? 0 : newest.size() - 1);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  const auto draw = [&]() -> size_t {
    if (options_.newest_share > 0 && !newest.empty() && coin(rng_) < options_.newest_share)
      return newest[pick_newest(rng_)];
    return pick(rng_);
  };
  double loss_sum = 0;
  int64_t loss_n = 0;
  const float scale = 1.0f / static_cast<float>(options_.samples_per_step);
  draft_->params().zero_grad();  // and after every step: one pass over the gradients a step
  if (options_.fresh_optimizer_each_round)
    opt_ = std::make_unique<AdamW>(draft_->params(), adamw_options());
  const LrSchedule round_lr(round_schedule(options_));
  for (int64_t step = 0; step < options_.steps_per_round; ++step) {
    if (!yield_while_paused())  // a stop ends the round early
      break;
    for (int64_t j = 0; j < options_.samples_per_step; ++j) {
      const size_t i = draw();
      ++rep.samples;
      rep.samples_newest += train[i].policy_version == max_v ? 1 : 0;
      const TttStats st = draft_->forward_backward(train[i], options_.ttt, scale);
      loss_sum += st.loss;
      ++loss_n;
    }
    double norm = 0;
    const float clip = clip_scale(draft_->params(), options_.clip, &norm);
    const double warm = options_.warmup_steps > 0
                            ? std::min(1.0, static_cast<double>(std::max(opt_->steps(), optimizer_steps_) + 1) /
                                                static_cast<double>(options_.warmup_steps))
                            : 1.0;
    if (std::isfinite(norm)) {
      opt_->step(round_lr.lr(step) * warm, clip);
      ++optimizer_steps_;
    }
    draft_->params().zero_grad();
  }
  rep.loss = loss_n ? loss_sum / static_cast<double>(loss_n) : 0.0;
}

// Candidate and serving drafter on the evaluation records; the serving drafter's evaluation is
// reused while its version, the policy and the records (eval_id) stay the same.
void OnlineTrainer::evaluate_round(const std::vector<TttSample>& samples, uint64_t policy_version, uint64_t eval_id,
                                   RoundReport& rep) {
  const InMemoryDataset eval(samples);
  rep.evaluated_records = eval.size();
  const TttStats cand = evaluate_drafter(*draft_, eval, options_.ttt);
  const uint64_t serving_v = serving_version();
  ServingEval& se = serving_eval_;
  rep.serving_eval_reused =
      se.valid && se.serving_version == serving_v && se.policy_version == policy_version && se.eval_id == eval_id;
  if (!rep.serving_eval_reused)
    se = {serving_v, policy_version, eval_id, evaluate_drafter(*serving_, eval, options_.ttt), true};
  const TttStats& serv = se.stats;
  rep.candidate_tau = estimated_chain_tau(cand);
  rep.serving_tau = estimated_chain_tau(serv);
  for (size_t k = 0; k < cand.rows.size(); ++k) {
    rep.candidate_acc.push_back(cand.accuracy(k));
    rep.serving_acc.push_back(serv.accuracy(k));
  }
}

// Publishes the candidate when its τ̂ beats the serving drafter's by the margin; never a
// non-finite candidate (it would poison every worker's drafts): training restarts from the
// serving drafter instead.
void OnlineTrainer::promote_if_better(const PolicyModel& policy, uint64_t policy_version, RoundReport& rep) {
  const std::string bad = draft_->params().non_finite();
  if (!bad.empty()) {
    rep.refused = "tensor " + bad + " holds a non-finite value";
    spdlog::error(
        "online trainer: round {}: the candidate's {}; not published, training restarts from the serving "
        "drafter v{}",
        rep.round, rep.refused, serving_version());
    draft_ = std::make_unique<TrainableDraft>(serving_->to_draft(), policy.draft_target());
    opt_ = std::make_unique<AdamW>(draft_->params(), adamw_options());
  } else if (rep.candidate_tau > (1.0 + options_.promote_margin) * rep.serving_tau) {
    const uint64_t version = serving_version() + 1;
    const DraftModel published = draft_->to_draft();
    const nlohmann::json meta = {{"policy_version", policy_version},
                                 {"round", rep.round},
                                 {"heldout_tau_estimate", rep.candidate_tau},
                                 {"previous_tau_estimate", rep.serving_tau},
                                 {"heldout_records", rep.evaluated_records}};
    const WeightVersion v = publish_version(
        options_.dir, "drafter", version, [&](const std::string& d) { published.save(d); }, meta);
    serving_ = std::make_unique<TrainableDraft>(published, policy.draft_target());
    {
      std::lock_guard<std::mutex> lock(mu_);
      serving_version_ = version;
    }
    rep.promoted = true;
    if (options_.on_promote)
      options_.on_promote(v);
  }
  rep.serving_version = serving_version();
}

}  // namespace updraft::train
