#include "rollout/spec/suffix_gate.h"

#include <algorithm>
#include <cmath>

#include "kernels/core/error.h"
#include "rollout/spec/adaptive.h"

namespace updraft {

SuffixGate::SuffixGate(const SuffixGateOptions& o) : o_(o) {
  UPD_REQUIRE(o.explore_share > 0 && o.explore_share <= 0.5 && o.ema > 0 && o.ema <= 1 && o.hysteresis >= 0 &&
              o.min_samples >= 1 && o.min_batch >= 1)
      << "suffix gate: explore_share in (0, 0.5], ema in (0, 1], hysteresis >= 0, min_samples >= 1 and "
         "min_batch >= 1";
  s_.on.fill(true);
}

bool SuffixGate::choose(int64_t batch) {
  if (batch < o_.min_batch)
    return true;
  const int b = AdaptiveDepth::bucket(batch);
  const auto& arm = s_.arms[static_cast<size_t>(b)];
  ++s_.steps;
  if (arm[0].samples < o_.min_samples || arm[1].samples < o_.min_samples)  // measure both first, alternating
    return arm[1].samples <= arm[0].samples;
  bool& on = s_.on[static_cast<size_t>(b)];
  const double cur = arm[on ? 1 : 0].rate, other = arm[on ? 0 : 1].rate;
  if (other > (1.0 + o_.hysteresis) * cur)
    on = !on;
  int64_t& since = since_explore_[static_cast<size_t>(b)];
  if (++since >= static_cast<int64_t>(std::lround(1.0 / o_.explore_share))) {
    since = 0;
    ++s_.explore_steps;
    return !on;
  }
  return on;
}

void SuffixGate::observe(int64_t batch, bool on, int64_t tokens, double seconds, bool cold) {
  if (batch < o_.min_batch || seconds <= 0 || cold)
    return;
  Arm& a = s_.arms[static_cast<size_t>(AdaptiveDepth::bucket(batch))][on ? 1 : 0];
  const double rate = static_cast<double>(tokens) / seconds / static_cast<double>(batch);
  // The first samples average evenly, then the EMA takes over.
  const double w = std::max(o_.ema, 1.0 / static_cast<double>(a.samples + 1));
  a.rate = a.samples == 0 ? rate : (1.0 - w) * a.rate + w * rate;
  ++a.samples;
}

SuffixCalibration::SuffixCalibration(double ema, double min_claimed, double floor)
    : ema_(ema), min_claimed_(min_claimed), floor_(floor) {
  UPD_REQUIRE(ema > 0 && ema <= 1 && min_claimed >= 0 && floor > 0 && floor <= 1)
      << "suffix calibration: ema in (0, 1], min_claimed >= 0, floor in (0, 1]";
}

void SuffixCalibration::observe(double claimed, int64_t accepted) {
  if (claimed <= 0)
    return;
  const bool first = total_ == 0;
  claimed_ = first ? claimed : (1 - ema_) * claimed_ + ema_ * claimed;
  accepted_ = first ? static_cast<double>(accepted) : (1 - ema_) * accepted_ + ema_ * static_cast<double>(accepted);
  total_ += claimed;
}

double SuffixCalibration::factor() const {
  if (total_ < min_claimed_ || claimed_ <= 0)
    return 1.0;
  return std::clamp(accepted_ / claimed_, floor_, 1.0);
}

}  // namespace updraft
