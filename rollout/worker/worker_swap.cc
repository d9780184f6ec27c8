// The worker's hot-swaps on its engine thread (rollout/worker/worker.h): staged versions go
// in between steps, and the rollback watch decides on a new drafter.
#include <spdlog/spdlog.h>

#include "kernels/core/cpu_team.h"
#include "kernels/core/error.h"
#include "rollout/worker/worker.h"

namespace updraft {

void Worker::apply_versions() {
  if (versions_.policy_staged()) {
    for (ModeEngine& m : engines_)
      if (m.engine)
        m.engine->set_admission(false);
    if (any_running())
      return;  // drain first; a staged drafter waits for the policy (it was loaded against it)
    versions_.install_policy();
    const PolicyVersion p = versions_.policy();
    for (int k = 0; k < kGenModes; ++k) {
      ModeEngine& m = engines_[k];
      if (!m.engine)
        continue;
      // The engine swaps first: it still points at the old models, which the old references keep
      // alive until it no longer does.
      DrafterVersion d = drafter_of(static_cast<GenMode>(k));
      m.engine->set_policy(*p.model, d.model.get());
      m.policy = p.model;
      m.policy_version = p.version;
      m.drafter = std::move(d);
      m.engine->set_admission(!shutting_);
    }
    rollback_.policy_changed();
    close_window();
    window_policy_swapped_ = true;
    std::lock_guard<std::mutex> lock(mu_);
    ++metrics_.policy_swaps;
  }
  // A staged drafter waits for a confirmation in flight: installed now, it would take the drafter
  // under confirmation as its predecessor and bar, and the verdict would be dropped.
  if (options_.speculate && versions_.drafter_staged() && !confirmation_) {
    const DrafterVersion before = versions_.drafter();
    versions_.install_drafter();
    if (before.model)
      pending_watch_ = true;
  }
  sync_drafter();
}

void Worker::follow_serving_drafter() {
  const ModeEngine& s = engines_[static_cast<int>(GenMode::kServing)];
  ModeEngine& f = engines_[static_cast<int>(GenMode::kFull)];
  if (!f.engine || !options_.speculate || f.drafter.model == s.drafter.model)
    return;
  if (full_retry_when_idle_ && f.engine->running() > 0)
    return;
  try {
    f.engine->set_drafter(s.drafter.model.get());
    f.drafter = s.drafter;
    full_retry_when_idle_ = false;
  } catch (const Error&) {  // its draft cache cannot hold what it runs: again once it is idle
    full_retry_when_idle_ = true;
  }
}

void Worker::sync_drafter() {
  ModeEngine& s = engines_[static_cast<int>(GenMode::kServing)];
  const DrafterVersion want = versions_.drafter();
  if (want.model == s.drafter.model || !options_.speculate) {
    follow_serving_drafter();
    return;
  }
  const bool in_flight = s.engine->running() > 0;
  if (drafter_retry_when_idle_ && in_flight)
    return;
  try {
    s.engine->set_drafter(want.model.get());
  } catch (const Error& e) {
    if (!drafter_retry_when_idle_)
      spdlog::warn("worker {}: drafter v{} not swapped in with requests in flight ({}); it waits until idle",
                   options_.id, want.version, e.what());
    drafter_retry_when_idle_ = true;
    return;
  }
  drafter_retry_when_idle_ = false;
  s.drafter = want;
  follow_serving_drafter();
  if (std::exchange(pending_watch_, false))
    rollback_.swapped();
  close_window();
  window_drafter_swapped_ = true;
  std::lock_guard<std::mutex> lock(mu_);
  ++metrics_.drafter_swaps;
  metrics_.mid_batch_swaps += in_flight ? 1 : 0;
}

void Worker::watch_rollback() {
  if (confirmation_ || !rollback_.ready())
    return;  // one confirmation at a time: a watch that closes meanwhile waits for it
  const ModeEngine& s = engines_[static_cast<int>(GenMode::kServing)];
  const DrafterVersion prev = versions_.previous();
  if (!prev.model || !s.drafter.model) {
    rollback_.end_watch();
    versions_.confirm();
    return;
  }
  const RollbackWatch::Verdict v = rollback_.judge_live();
  if (v == RollbackWatch::Verdict::kConfirm)
    start_confirmation(prev);
  else
    apply_rollback_verdict(v, prev);
}

void Worker::start_confirmation(const DrafterVersion& previous) {
  const ModeEngine& s = engines_[static_cast<int>(GenMode::kServing)];
  confirming_new_ = s.drafter.version;
  confirming_old_ = previous.version;
  auto wake = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = true;  // an idle engine thread applies the verdict
    cv_.notify_all();
  };
  confirmation_ =
      std::make_unique<BackgroundConfirmation>(rollback_.scorer(), s.drafter.model, previous.model, s.policy,
                                               rollback_.confirmation_samples(), rollback_.depth(), std::move(wake));
  if (!BackgroundConfirmation::idle_priority())
    collect_confirmation(true);  // at normal priority it would slow the engine down several times
}

void Worker::collect_confirmation(bool now) {
  if (!confirmation_)
    return;
  if (!confirmation_->done() && !now) {
    if (confirmation_->age_seconds() < options_.rollback_wait_seconds)
      return;
    spdlog::warn("worker {}: the rollback confirmation of drafter v{} has run {:.1f} s; the engine waits for it",
                 options_.id, confirming_new_, confirmation_->age_seconds());
    confirmation_->hurry();
    release_cpu_team();  // this thread's team sleeps meanwhile
  }
  const BackgroundConfirmation::Result r = confirmation_->wait();
  confirmation_.reset();
  const DrafterVersion prev = versions_.previous();
  const uint64_t serving = engines_[static_cast<int>(GenMode::kServing)].drafter.version;
  if (serving != confirming_new_ || prev.version != confirming_old_ || !prev.model) {
    spdlog::info("worker {}: the rollback confirmation of drafter v{} no longer applies (v{} serves)", options_.id,
                 confirming_new_, serving);
    return;
  }
  RollbackWatch::Verdict v = RollbackWatch::Verdict::kKeep;
  if (r.error.empty()) {
    v = rollback_.judge_confirmed(r.tau_new, r.tau_old, r.samples, r.seconds);
  } else {
    spdlog::error("worker {}: the rollback confirmation failed ({}); the live comparison decides", options_.id,
                  r.error);
    v = rollback_.judge_unconfirmed();
  }
  apply_rollback_verdict(v, prev);
}

void Worker::apply_rollback_verdict(RollbackWatch::Verdict v, const DrafterVersion& previous) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.rollback_confirmations = rollback_.confirmations();
  }
  if (v != RollbackWatch::Verdict::kRollBack) {
    versions_.confirm();
    return;
  }
  const ModeEngine& s = engines_[static_cast<int>(GenMode::kServing)];
  spdlog::warn("worker {}: rolling drafter v{} back to v{}", options_.id, s.drafter.version, previous.version);
  versions_.roll_back();
  sync_drafter();
  std::lock_guard<std::mutex> lock(mu_);
  ++metrics_.rollbacks;
}

}  // namespace updraft
