#include "rollout/worker/adaptive_spec.h"

#include <algorithm>

#include "kernels/core/error.h"

namespace updraft {

AdaptiveSpec::AdaptiveSpec(int64_t full_depth, bool shorter, double ema)
    : full_depth_(full_depth), shorter_(shorter), ema_(ema) {
  UPD_REQUIRE(full_depth >= 1) << "adaptive speculation: full depth " << full_depth << " < 1";
  UPD_REQUIRE(ema > 0 && ema <= 1) << "adaptive speculation: ema weight " << ema << " outside (0, 1]";
  cost_.assign(static_cast<size_t>(full_depth) + 1, 0.0);
  reach_.assign(static_cast<size_t>(full_depth), -1.0);
}

double AdaptiveSpec::predicted_tps(int64_t depth) const {
  UPD_CHECK(depth >= 0 && depth <= full_depth_) << "depth " << depth;
  const size_t d = static_cast<size_t>(depth), D = static_cast<size_t>(full_depth_);
  double cost = cost_[d];
  if (cost <= 0 && cost_[0] > 0 && cost_[D] > 0)
    cost = cost_[0] + (cost_[D] - cost_[0]) * static_cast<double>(d) / static_cast<double>(D);
  if (cost <= 0)
    return 0.0;
  double per_round = 1.0;
  for (size_t j = 0; j < d; ++j)
    per_round += std::max(0.0, reach_[j]);
  return per_round / cost;
}

int64_t AdaptiveSpec::choose() const {
  if (cost_[static_cast<size_t>(full_depth_)] <= 0)
    return full_depth_;  // measure speculation first
  int64_t best = full_depth_;
  double best_tps = predicted_tps(full_depth_);
  for (int64_t d = shorter_ ? full_depth_ - 1 : 0; d >= 0; --d) {  // deepest first: ties keep it
    const double tps = predicted_tps(d);  // 0 for every d < full depth until plain is measured
    if (tps > best_tps) {
      best = d;
      best_tps = tps;
    }
  }
  return best;
}

void AdaptiveSpec::observe(int64_t depth, double seconds, int64_t tokens, const SpecStats& spec) {
  UPD_CHECK(depth >= 0 && depth <= full_depth_) << "depth " << depth;
  if (seconds <= 0 || tokens <= 0 || (depth > 0 && spec.rounds == 0))
    return;
  // The first measurement is taken as it is (cost 0 and reach -1 mean none yet).
  auto blend = [this](double& est, double x, bool first) { est = first ? x : (1 - ema_) * est + ema_ * x; };
  double& cost = cost_[static_cast<size_t>(depth)];
  if (depth == 0) {
    blend(cost, seconds / static_cast<double>(tokens), cost <= 0);
    return;
  }
  const double rounds = static_cast<double>(spec.rounds);
  blend(cost, seconds / rounds, cost <= 0);
  for (size_t j = 0; j < static_cast<size_t>(depth); ++j)
    blend(reach_[j], j < spec.accepted_at.size() ? static_cast<double>(spec.accepted_at[j]) / rounds : 0.0,
          reach_[j] < 0);
}

}  // namespace updraft
