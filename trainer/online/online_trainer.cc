#include "trainer/online/online_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "kernels/core/error.h"
#include "kernels/ops/sampling.h"
#include "messaging/key.h"
#include "trainer/draft_train.h"
#include "rollout/capture/record_convert.h"
#include "trainer/train_checkpoint.h"

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

AdamWOptions adamw_options() {
  AdamWOptions ao;
  ao.beta2 = 0.95;
  ao.weight_decay = 0;
  return ao;
}

std::string checkpoint_dir(const OnlineTrainerOptions& o) {
  return (std::filesystem::path(o.dir) / "trainer").string();
}

}  // namespace

OnlineTrainer::OnlineTrainer(OnlineTrainerOptions options, std::shared_ptr<messaging::RecordStore> store,
                             std::shared_ptr<const PolicyModel> policy, uint64_t policy_version,
                             const DraftModel& initial, uint64_t initial_version)
    : options_(std::move(options)), store_(std::move(store)), rng_(options_.seed), policy_(std::move(policy)),
      policy_version_(policy_version), bound_policy_version_(policy_version), trained_policy_version_(policy_version),
      serving_version_(initial_version) {
  UPD_REQUIRE(!options_.dir.empty()) << "OnlineTrainer: dir is required";
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  if (ec)
    throw Error("online trainer: cannot create " + options_.dir + ": " + ec.message());
  if (options_.steps_per_round <= 0 || options_.samples_per_step <= 0 || !(options_.lr > 0) || !(options_.clip > 0) ||
      options_.window_records == 0 || options_.window_versions == 0 || options_.heldout_fraction < 0 ||
      options_.heldout_fraction >= 1 || !(options_.newest_share >= 0 && options_.newest_share <= 1))
    throw Error("online trainer: steps, samples per step, lr, clip, window sizes must be positive, "
                "heldout_fraction in [0, 1) and newest_share in [0, 1]");
  const DraftTarget target = policy_->draft_target();
  draft_ = std::make_unique<TrainableDraft>(initial, target);
  opt_ = std::make_unique<AdamW>(draft_->params(), adamw_options());
  const std::string ckpt = checkpoint_dir(options_);
  quarantine_ =
      std::make_unique<messaging::QuarantineLog>((std::filesystem::path(options_.dir) / "quarantine.tsv").string());
  const WeightVersion latest = latest_version(options_.dir, "drafter");
  if (std::filesystem::exists(std::filesystem::path(ckpt) / "trainer_state.json")) {
    const TrainState st = load_train_checkpoint(ckpt, draft_->params(), *opt_);
    rounds_ = st.step;
    resumed_ = true;
  }
  if (!latest.dir.empty() && latest.version >= serving_version_) {
    verify_version(latest.dir, "drafter");
    serving_ = std::make_unique<TrainableDraft>(DraftModel::load(latest.dir, target), target);
    serving_version_ = latest.version;
  } else {
    serving_ = std::make_unique<TrainableDraft>(initial, target);
  }
}

OnlineTrainer::~OnlineTrainer() {
  stop();
}

void OnlineTrainer::start() {
  std::lock_guard<std::mutex> lock(mu_);
  UPD_REQUIRE(!thread_.joinable()) << "OnlineTrainer: already started";
  stop_ = false;
  thread_ = std::thread([this] { loop(); });
}

void OnlineTrainer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

void OnlineTrainer::notify_policy(std::shared_ptr<const PolicyModel> policy, uint64_t version) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (version <= policy_version_)
      return;
    policy_ = std::move(policy);
    policy_version_ = version;
  }
  cv_.notify_all();
}

void OnlineTrainer::report_tau(double tau) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_tau_ = tau;
  }
  cv_.notify_all();
}

void OnlineTrainer::set_paused(bool paused) {
  std::unique_lock<std::mutex> lock(mu_);
  paused_ = paused;
  cv_.notify_all();
  if (paused)  // until the round's thread has parked (or no round runs)
    cv_.wait(lock, [&] { return !running_round_ || parked_ || stop_; });
}

bool OnlineTrainer::yield_while_paused() {
  std::unique_lock<std::mutex> lock(mu_);
  if (paused_ && !stop_) {
    parked_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !paused_ || stop_; });
    parked_ = false;
  }
  return !stop_;
}

void OnlineTrainer::wait_idle() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !running_round_; });
}

bool OnlineTrainer::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !running_round_ && due_trigger().empty();
}

std::vector<RoundReport> OnlineTrainer::reports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reports_;
}

uint64_t OnlineTrainer::serving_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return serving_version_;
}

std::string OnlineTrainer::due_trigger() const {
  if (options_.train_on_new_policy && policy_version_ > trained_policy_version_ && store_->consumer_lag() > 0)
    return "policy v" + std::to_string(policy_version_);
  const uint64_t lag = store_->consumer_lag();
  if (options_.min_new_records > 0 && lag >= options_.min_new_records)
    return std::to_string(lag) + " new records";
  if (options_.min_new_tokens > 0 && lag > 0) {
    const uint64_t tokens = store_->consumer_lag_tokens();
    if (tokens >= options_.min_new_tokens)
      return std::to_string(tokens) + " new response tokens";
  }
  if (options_.tau_floor > 0 && live_tau_ > 0 && live_tau_ < options_.tau_floor && lag > 0)
    return "live tau " + std::to_string(live_tau_).substr(0, 4);
  return "";
}

void OnlineTrainer::loop() {
  auto caught_up = std::chrono::steady_clock::now() - std::chrono::hours(1);
  for (;;) {
    if (store_->is_secondary() &&
        std::chrono::steady_clock::now() - caught_up >= std::chrono::milliseconds(options_.catch_up_ms)) {
      try {
        store_->catch_up();
      } catch (const std::exception& e) {
        if (options_.progress)
          options_.progress(std::string("online trainer: catching up with the buffer failed: ") + e.what());
      }
      caught_up = std::chrono::steady_clock::now();
    }
    std::string trigger;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(options_.poll_ms), [&] { return stop_; });
      if (stop_)
        return;
      if (paused_)
        continue;
      trigger = due_trigger();
      if (trigger.empty())
        continue;
      running_round_ = true;
    }
    try {
      run_round(trigger);
    } catch (const std::exception& e) {
      if (options_.progress)
        options_.progress(std::string("online trainer: round failed: ") + e.what());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_round_ = false;
    }
    cv_.notify_all();
  }
}

RoundReport OnlineTrainer::run_round(const std::string& trigger) {
  std::lock_guard<std::mutex> round_lock(round_mu_);
  const auto t0 = std::chrono::steady_clock::now();
  RoundReport rep;
  rep.trigger = trigger;
  std::shared_ptr<const PolicyModel> policy;
  uint64_t policy_version;
  {
    std::lock_guard<std::mutex> lock(mu_);
    policy = policy_;
    policy_version = policy_version_;
    rep.round = ++rounds_;
  }
  if (policy_version != bound_policy_version_) {  // follow RL: the draft reads the policy's embedding
    const DraftTarget t = policy->draft_target();
    draft_->set_target(t);
    serving_->set_target(t);
    bound_policy_version_ = policy_version;
  }

  // 1. The window.
  std::vector<messaging::RecordData> recs = store_->latest(options_.window_records);
  if (!recs.empty()) {
    messaging::RecordKey newest{recs.front().policy_version, recs.front().worker, recs.front().seq};
    store_->mark_consumed(newest);
  }
  uint64_t max_v = 0;
  for (const auto& r : recs)
    max_v = std::max(max_v, r.policy_version);
  const uint64_t min_keep = max_v + 1 > options_.window_versions ? max_v + 1 - options_.window_versions : 0;
  std::vector<TttSample> train, heldout;
  rep.min_policy_version = max_v;
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
      s.validate(aux_width, policy->config().vocab_size, "buffer record");
    } catch (const Error& e) {
      quarantine_->add(key, rep.round, e.what());
      ++rep.quarantined;
      spdlog::warn("online trainer: record {} quarantined: {}", messaging::key_text(key), e.what());
      continue;
    }
    rep.min_policy_version = std::min(rep.min_policy_version, r.policy_version);
    (is_heldout(r, options_.heldout_fraction) ? heldout : train).push_back(std::move(s));
  }
  rep.max_policy_version = max_v;
  rep.trained_on_policy = policy_version;
  rep.train_records = train.size();
  rep.heldout_records = heldout.size();
  if (options_.eval_records > 0 && heldout.size() > options_.eval_records) {  // the newest policy's first
    std::stable_sort(heldout.begin(), heldout.end(),
                     [](const TttSample& a, const TttSample& b) { return a.policy_version > b.policy_version; });
    heldout.resize(options_.eval_records);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    trained_policy_version_ = std::max(trained_policy_version_, policy_version);
  }
  if (train.empty()) {
    rep.serving_version = serving_version();
    return rep;
  }

  // 2. Training.
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
  for (int64_t step = 0; step < options_.steps_per_round; ++step) {
    if (!yield_while_paused())  // a stop ends the round early
      break;
    draft_->params().zero_grad();
    for (int64_t j = 0; j < options_.samples_per_step; ++j) {
      const size_t i = draw();
      ++rep.samples;
      rep.samples_newest += train[i].policy_version == max_v ? 1 : 0;
      const TttStats st = draft_->forward_backward(train[i], options_.ttt, scale);
      loss_sum += st.loss;
      ++loss_n;
    }
    const double norm = clip_grad_norm(draft_->params(), options_.clip);
    const double warm = options_.warmup_steps > 0
                            ? std::min(1.0, static_cast<double>(opt_->steps() + 1) / static_cast<double>(options_.warmup_steps))
                            : 1.0;
    if (std::isfinite(norm))
      opt_->step(options_.lr * warm);
    draft_->params().zero_grad();
  }
  rep.loss = loss_n ? loss_sum / static_cast<double>(loss_n) : 0.0;

  yield_while_paused();
  // 3. Evaluation on held-out records (the training records when none are held out yet).
  const InMemoryDataset eval(heldout.empty() ? train : heldout);
  rep.evaluated_records = eval.size();
  const TttStats cand = evaluate_drafter(*draft_, eval, options_.ttt);
  const TttStats serv = evaluate_drafter(*serving_, eval, options_.ttt);
  rep.candidate_tau = estimated_chain_tau(cand);
  rep.serving_tau = estimated_chain_tau(serv);
  for (size_t k = 0; k < cand.rows.size(); ++k) {
    rep.candidate_acc.push_back(cand.accuracy(k));
    rep.serving_acc.push_back(serv.accuracy(k));
  }

  // 4. Promotion, never of a non-finite candidate (it would poison every worker's drafts).
  const std::string bad = draft_->params().non_finite();
  if (!bad.empty()) {
    rep.refused = "tensor " + bad + " holds a non-finite value";
    spdlog::error("online trainer: round {}: the candidate's {}; not published, training restarts from the serving "
                  "drafter v{}",
                  rep.round, rep.refused, serving_version());
    draft_ = std::make_unique<TrainableDraft>(serving_->to_draft(), policy->draft_target());
    opt_ = std::make_unique<AdamW>(draft_->params(), adamw_options());
  } else if (rep.candidate_tau > (1.0 + options_.promote_margin) * rep.serving_tau) {
    const uint64_t version = serving_version() + 1;
    const DraftModel published = draft_->to_draft();
    const nlohmann::json meta = {{"policy_version", policy_version},
                                 {"round", rep.round},
                                 {"heldout_tau_estimate", rep.candidate_tau},
                                 {"previous_tau_estimate", rep.serving_tau},
                                 {"heldout_records", eval.size()}};
    const WeightVersion v = publish_version(
        options_.dir, "drafter", version, [&](const std::string& d) { published.save(d); }, meta);
    serving_ = std::make_unique<TrainableDraft>(published, policy->draft_target());
    {
      std::lock_guard<std::mutex> lock(mu_);
      serving_version_ = version;
    }
    rep.promoted = true;
    if (options_.on_promote)
      options_.on_promote(v);
  }
  rep.serving_version = serving_version();

  // 5. Checkpoint.
  TrainState st;
  st.step = rep.round;
  st.schedule.decay = LrDecay::Constant;
  st.schedule.peak_lr = options_.lr;
  st.user = {{"serving_version", rep.serving_version}, {"policy_version", policy_version}};
  save_train_checkpoint(checkpoint_dir(options_), draft_->params(), *opt_, st);

  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (options_.progress) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "online trainer: round %lld (%s): %zu train / %zu held-out records, policy v%llu..v%llu, loss %.3f, "
                  "tau-hat candidate %.2f vs serving %.2f%s, %.1f s",
                  static_cast<long long>(rep.round), trigger.c_str(), rep.train_records, rep.heldout_records,
                  static_cast<unsigned long long>(rep.min_policy_version),
                  static_cast<unsigned long long>(rep.max_policy_version), rep.loss, rep.candidate_tau,
                  rep.serving_tau,
                  rep.promoted ? (" -> promoted v" + std::to_string(rep.serving_version)).c_str() : "", rep.seconds);
    options_.progress(buf);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    reports_.push_back(rep);
  }
  return rep;
}

}  // namespace updraft::train
