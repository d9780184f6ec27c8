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

RollbackWatch::Verdict RollbackWatch::decide(const DraftModel& candidate, const DraftModel& previous,
                                             const PolicyModel& policy) {
  if (!ready())
    return Verdict::kWatching;
  watching_ = false;
  // Live, both at the depth both measured: a drafter that the depth chooser keeps shallow (as
  // after a domain switch) tried no deep positions, and tau_at would count them as rejected
  // against a bar that tried them.
  const int64_t min_tried = std::max<int64_t>(1, opt_.rounds / 4),
                live_depth =
                    std::min(watched_.tried_depth(opt_.depth, min_tried), bar_.tried_depth(opt_.depth, min_tried));
  double tau_new = watched_.tau_at(live_depth), tau_old = bar_.tau_at(live_depth);
  // Below the margin: on tau at the full depth; at a shallower one on the accepted drafts
  // (tau - 1), since 1 + a1 alone ranges over [1, 2] and a margin on it would pass a large drop.
  bool shallow = live_depth < opt_.depth;
  const auto line = [&](double bar) {
    return shallow ? 1.0 + (1.0 - opt_.margin) * (bar - 1.0) : (1.0 - opt_.margin) * bar;
  };
  const bool alarm = live_depth > 0 && tau_new < line(tau_old);
  bool same = false;
  if (alarm && scorer_ && !samples_.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<TttSample> data(samples_.begin(), samples_.end());
    const double live_new = tau_new, live_old = tau_old;
    tau_new = scorer_(candidate, policy, data, opt_.depth);
    tau_old = scorer_(previous, policy, data, opt_.depth);
    same = true;
    shallow = false;  // both scored at the full depth
    ++confirmations_;
    spdlog::info(
        "rollback: live tau {:.2f} against the bar's {:.2f} (depth {}): confirmed on {} completions in {:.2f} s",
        live_new, live_old, live_depth, data.size(),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  last_new_ = tau_new;
  last_old_ = tau_old;
  const bool comparable = same || live_depth > 0;
  if (comparable && tau_new < line(tau_old)) {
    spdlog::warn("rollback: tau {:.2f} fell below {:.2f} (the previous drafter's {:.2f}, {})", tau_new, line(tau_old),
                 tau_old, same ? "both estimated on the same completions" : "live, on different requests");
    recent_.clear();
    recent_sum_ = bar_;  // the restored drafter's rounds stay the bar for its next successor
    recent_.push_back(bar_);
    return Verdict::kRollBack;
  }
  if (comparable)
    spdlog::info("rollback: new drafter kept: tau {:.2f} vs {:.2f} ({})", tau_new, tau_old,
                 same ? "same completions" : "live");
  return Verdict::kKeep;
}

}  // namespace updraft
