#include "rollout/worker/rollback.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "kernels/core/error.h"

namespace updraft {

RollbackWatch::RollbackWatch(const RollbackOptions& options, DrafterScorer scorer)
    : opt_(options), scorer_(std::move(scorer)) {
  UPD_REQUIRE(opt_.margin >= 0 && opt_.margin < 1 && opt_.rounds >= 1 && opt_.depth >= 1)
      << "rollback: margin in [0, 1), rounds and depth at least 1";
}

void RollbackWatch::swapped() {
  bar_ = recent_sum_;
  recent_.clear();
  recent_sum_ = SpecStats();
  watched_ = SpecStats();
  watching_ = true;
}

void RollbackWatch::add_rounds(const SpecStats& step) {
  if (step.rounds == 0)
    return;
  if (watching_)
    watched_.merge(step);
  recent_.push_back(step);
  recent_sum_.merge(step);
  while (recent_.size() > 1 && recent_sum_.rounds - recent_.front().rounds >= 4 * opt_.rounds) {
    recent_sum_.subtract(recent_.front());
    recent_.pop_front();
  }
}

void RollbackWatch::add_sample(TttSample s) {
  if (s.response_length() < 2)
    return;
  samples_.push_back(std::move(s));
  while (samples_.size() > opt_.max_samples)
    samples_.pop_front();
}

RollbackWatch::Verdict RollbackWatch::judge_live() {
  if (!ready())
    return Verdict::kWatching;
  watching_ = false;
  // Live, both at the depth both measured: a drafter that the depth chooser keeps shallow (as
  // after a domain switch) tried no deep positions, and tau_at would count them as rejected
  // against a bar that tried them.
  const int64_t min_tried = std::max<int64_t>(1, opt_.rounds / 4);
  live_depth_ = std::min(watched_.tried_depth(opt_.depth, min_tried), bar_.tried_depth(opt_.depth, min_tried));
  live_new_ = watched_.tau_at(live_depth_);
  live_old_ = bar_.tau_at(live_depth_);
  const bool alarm = live_depth_ > 0 && live_new_ < line(live_old_, live_depth_);
  if (alarm && scorer_ && !samples_.empty())
    return Verdict::kConfirm;
  return conclude(live_new_, live_old_, live_depth_, false);
}

double RollbackWatch::line(double bar, int64_t depth) const {
  // Below the margin: on tau at the full depth; at a shallower one on the accepted drafts
  // (tau - 1), since 1 + a1 alone ranges over [1, 2] and a margin on it would pass a large drop.
  return depth < opt_.depth ? 1.0 + (1.0 - opt_.margin) * (bar - 1.0) : (1.0 - opt_.margin) * bar;
}

std::vector<TttSample> RollbackWatch::confirmation_samples() const {
  return std::vector<TttSample>(samples_.begin(), samples_.end());
}

RollbackWatch::Verdict RollbackWatch::judge_confirmed(double tau_new, double tau_old, size_t samples, double seconds) {
  ++confirmations_;
  spdlog::info("rollback: live tau {:.2f} against the bar's {:.2f} (depth {}): confirmed on {} completions in {:.2f} s",
               live_new_, live_old_, live_depth_, samples, seconds);
  return conclude(tau_new, tau_old, opt_.depth, true);  // both scored at the full depth
}

RollbackWatch::Verdict RollbackWatch::conclude(double tau_new, double tau_old, int64_t depth, bool same) {
  last_new_ = tau_new;
  last_old_ = tau_old;
  if (depth == 0)
    return Verdict::kKeep;  // nothing comparable
  if (tau_new < line(tau_old, depth)) {
    spdlog::warn("rollback: tau {:.2f} fell below {:.2f} (the previous drafter's {:.2f}, {})", tau_new,
                 line(tau_old, depth), tau_old,
                 same ? "both estimated on the same completions" : "live, on different requests");
    recent_.clear();
    recent_sum_ = bar_;  // the restored drafter's rounds stay the bar for its next successor
    recent_.push_back(bar_);
    return Verdict::kRollBack;
  }
  spdlog::info("rollback: new drafter kept: tau {:.2f} vs {:.2f} ({})", tau_new, tau_old,
               same ? "same completions" : "live");
  return Verdict::kKeep;
}

RollbackWatch::Verdict RollbackWatch::decide(const DraftModel& candidate, const DraftModel& previous,
                                             const PolicyModel& policy) {
  const Verdict live = judge_live();
  if (live != Verdict::kConfirm)
    return live;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<TttSample> data = confirmation_samples();
  const double tau_new = scorer_(candidate, policy, data, opt_.depth);
  const double tau_old = scorer_(previous, policy, data, opt_.depth);
  return judge_confirmed(tau_new, tau_old, data.size(),
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace updraft
