#include "trainer/online/online_trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "kernels/core/cpu_team.h"
#include "kernels/core/error.h"
#include "trainer/draft_train.h"
#include "trainer/train_checkpoint.h"

namespace updraft::train {
namespace {

std::string checkpoint_dir(const OnlineTrainerOptions& o) {
  return (std::filesystem::path(o.dir) / "trainer").string();
}

}  // namespace

AdamWOptions OnlineTrainer::adamw_options() {
  AdamWOptions ao;
  ao.beta2 = 0.95;
  ao.weight_decay = 0;
  return ao;
}

LrScheduleOptions round_schedule(const OnlineTrainerOptions& o) {
  LrScheduleOptions s;
  s.decay = o.round_decay;
  s.peak_lr = o.lr;
  s.total_steps = o.steps_per_round;
  s.min_lr_ratio = o.round_min_lr_ratio;
  return s;
}

OnlineTrainer::OnlineTrainer(OnlineTrainerOptions options, std::shared_ptr<messaging::RecordStore> store,
                             std::shared_ptr<const PolicyModel> policy, uint64_t policy_version,
                             const DraftModel& initial, uint64_t initial_version)
    : options_(std::move(options)),
      store_(std::move(store)),
      rng_(options_.seed),
      policy_(std::move(policy)),
      policy_version_(policy_version),
      bound_policy_version_(policy_version),
      trained_policy_version_(policy_version),
      serving_version_(initial_version) {
  UPD_REQUIRE(!options_.dir.empty()) << "OnlineTrainer: dir is required";
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  if (ec)
    throw Error("online trainer: cannot create " + options_.dir + ": " + ec.message());
  if (options_.steps_per_round <= 0 || options_.samples_per_step <= 0 || !(options_.lr > 0) || !(options_.clip > 0) ||
      options_.window_records == 0 || options_.window_versions == 0 || options_.heldout_fraction < 0 ||
      options_.heldout_fraction >= 1 || !(options_.newest_share >= 0 && options_.newest_share <= 1))
    throw Error(
        "online trainer: steps, samples per step, lr, clip, window sizes must be positive, "
        "heldout_fraction in [0, 1) and newest_share in [0, 1]");
  const LrSchedule check(round_schedule(options_));  // Error naming min_lr_ratio when out of [0, 1]
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!paused_ || stop_)
      return !stop_;
  }
  release_cpu_team();  // parked: the CPU team goes back (kernels/core/cpu_team.h)
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
  if (rounds_ > 0 && idle_rounds_done_ < options_.idle_rounds)
    return "idle " + std::to_string(idle_rounds_done_ + 1) + "/" + std::to_string(options_.idle_rounds);
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
      idle_rounds_done_ = trigger.rfind("idle ", 0) == 0 ? idle_rounds_done_ + 1 : 0;
      running_round_ = true;
    }
    try {
      run_round(trigger);
    } catch (const std::exception& e) {
      if (options_.progress)
        options_.progress(std::string("online trainer: round failed: ") + e.what());
    }
    release_cpu_team();  // between rounds the trainer only polls
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

  std::vector<TttSample> train, heldout;
  uint64_t eval_id = 0;
  const uint64_t max_v = load_window(*policy, policy_version, rep, train, heldout, eval_id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    trained_policy_version_ = std::max(trained_policy_version_, policy_version);
  }
  if (train.empty()) {
    rep.serving_version = serving_version();
    return rep;
  }

  train_steps(train, max_v, rep);

  yield_while_paused();
  // 3. Evaluation on held-out records (the training records when none are held out yet); 4. promotion.
  evaluate_round(heldout.empty() ? train : heldout, policy_version, eval_id, rep);
  promote_if_better(*policy, policy_version, rep);

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
                  static_cast<unsigned long long>(rep.max_policy_version), rep.loss, rep.candidate_tau, rep.serving_tau,
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
