#include "rollout/spec/adaptive.h"

#include <algorithm>
#include <cmath>

#include "kernels/core/error.h"

namespace updraft {

AdaptiveDepth::AdaptiveDepth(const SpecSettings& full, const AdaptiveOptions& options) : full_(full), opt_(options) {
  full.validate();
  UPD_REQUIRE(opt_.explore_share >= 0 && opt_.explore_share <= 1 && opt_.cost_ema > 0 && opt_.cost_ema <= 1 &&
              opt_.reach_decay > 0 && opt_.reach_decay <= 1 && opt_.hysteresis >= 0 && opt_.min_samples >= 1)
      << "adaptive speculation: explore_share in [0, 1], cost_ema and reach_decay in (0, 1], min_samples >= 1";
  depths_.push_back(0);
  for (int64_t d = full.chain() ? 1 : full.steps; d <= full.steps; ++d)
    depths_.push_back(d);
  UPD_REQUIRE(opt_.fixed_depth < 0 || std::find(depths_.begin(), depths_.end(), opt_.fixed_depth) != depths_.end())
      << "adaptive speculation: fixed depth " << opt_.fixed_depth << " is not plain, a chain depth up to "
      << full.steps << ", or the full settings";
  for (auto& row : cells_)
    row.assign(depths_.size(), Cell());
  current_.fill(full.steps);
  num_.assign(static_cast<size_t>(full.steps), 0.0);
  den_.assign(static_cast<size_t>(full.steps), 0.0);
}

int AdaptiveDepth::bucket(int64_t batch) {
  int b = 0;
  while (b < kBuckets - 1 && (int64_t{2} << b) <= batch)
    ++b;
  return b;
}

size_t AdaptiveDepth::index_of(int64_t depth) const {
  const auto it = std::find(depths_.begin(), depths_.end(), depth);
  UPD_CHECK(it != depths_.end()) << "adaptive speculation: depth " << depth << " not allowed";
  return static_cast<size_t>(it - depths_.begin());
}

double AdaptiveDepth::reach(size_t j) const { return den_[j] > 0 ? num_[j] / den_[j] : 1.0; }

// cost(b, d) / cost(b, 0): measured in b, else borrowed from the nearest bucket that has both,
// else the prior.
double AdaptiveDepth::ratio(int b, size_t d) const {
  if (d == 0)
    return 1.0;
  for (int dist = 0; dist < kBuckets; ++dist)
    for (const int bb : {b - dist, b + dist}) {
      if (bb < 0 || bb >= kBuckets)
        continue;
      const auto& row = cells_[static_cast<size_t>(bb)];
      if (row[d].cost > 0 && row[0].cost > 0)
        return row[d].cost / row[0].cost;
    }
  return 1.0 + 0.1 * static_cast<double>(depths_[d]);
}

double AdaptiveDepth::predicted(int b, int64_t depth) const {
  const size_t d = index_of(depth);
  double per_round = 1.0;
  for (size_t j = 0; j < static_cast<size_t>(depth); ++j)
    per_round += reach(j);
  const auto& row = cells_[static_cast<size_t>(b)];
  const double plain = row[0].cost;  // 0 when unmeasured: the prediction is relative then
  return per_round / (ratio(b, d) * (plain > 0 ? plain : 1.0));
}

int64_t AdaptiveDepth::explore_candidate(int b) const {
  const auto& row = cells_[static_cast<size_t>(b)];
  int64_t best = -1;
  for (size_t d = 0; d < depths_.size(); ++d) {
    if (depths_[d] == current_[static_cast<size_t>(b)])
      continue;
    const Cell& c = row[d];
    const bool wanted = c.samples < opt_.min_samples || steps_ - c.last_step > opt_.stale_steps;
    if (!wanted)
      continue;
    if (best < 0) {
      best = static_cast<int64_t>(d);
      continue;
    }
    const Cell& o = row[static_cast<size_t>(best)];
    if (c.samples < o.samples || (c.samples == o.samples && c.last_step < o.last_step))
      best = static_cast<int64_t>(d);
  }
  return best < 0 ? -1 : depths_[static_cast<size_t>(best)];
}

int64_t AdaptiveDepth::choose(int64_t batch) {
  ++steps_;
  ++since_explore_;
  last_batch_ = batch;
  last_explored_ = false;
  const int b = bucket(std::max<int64_t>(1, batch));
  int64_t depth = opt_.fixed_depth;
  if (depth < 0) {
    int64_t& cur = current_[static_cast<size_t>(b)];
    int64_t best = cur;
    double best_tps = predicted(b, cur);
    for (int64_t d : depths_) {
      const double tps = predicted(b, d);
      if (tps > best_tps * (1.0 + opt_.hysteresis)) {
        best = d;
        best_tps = tps;
      }
    }
    cur = best;
    depth = best;
    if (opt_.explore_share > 0 && static_cast<double>(since_explore_) * opt_.explore_share >= 1.0) {
      const int64_t e = explore_candidate(b);
      if (e >= 0) {
        depth = e;
        last_explored_ = true;
        ++explore_steps_;
        since_explore_ = 0;
      }
    }
  }
  last_depth_ = depth;
  last_pred_ = predicted(b, depth);
  return depth;
}

void AdaptiveDepth::observe(const StepSample& s) {
  if (s.batch <= 0 || s.seconds <= 0)
    return;
  const int b = bucket(s.batch);
  const size_t d = index_of(s.depth);
  const double per_seq = s.seconds / static_cast<double>(s.batch);
  // The measured throughput against what was predicted for this depth (relative error, EMA),
  // when the plain cost of the bucket anchors the prediction.
  if (s.depth == last_depth_ && cells_[static_cast<size_t>(b)][0].cost > 0 && last_pred_ > 0) {
    const double measured = (1.0 + static_cast<double>(s.spec.accepted) / static_cast<double>(s.batch)) / per_seq;
    const double err = std::fabs(last_pred_ - measured) / measured;
    error_ = error_ == 0 ? err : 0.9 * error_ + 0.1 * err;
  }
  Cell& c = cells_[static_cast<size_t>(b)][d];
  c.cost = c.samples == 0 ? per_seq : (1 - opt_.cost_ema) * c.cost + opt_.cost_ema * per_seq;
  ++c.samples;
  c.last_step = steps_;
  for (size_t j = 0; j < num_.size(); ++j) {
    num_[j] *= opt_.reach_decay;
    den_[j] *= opt_.reach_decay;
    if (j < s.spec.accepted_at.size())
      num_[j] += static_cast<double>(s.spec.accepted_at[j]);
    if (j < s.spec.tried_at.size())
      den_[j] += static_cast<double>(s.spec.tried_at[j]);
  }
}

void AdaptiveDepth::drafter_changed(uint64_t) {
  // The predecessor's acceptance is the prior, worth at most two rounds per position.
  for (size_t j = 0; j < num_.size(); ++j)
    if (den_[j] > 2.0) {
      num_[j] *= 2.0 / den_[j];
      den_[j] = 2.0;
    }
}

AdaptiveDepth::Snapshot AdaptiveDepth::snapshot() const {
  Snapshot s;
  s.depths = depths_;
  s.cells = cells_;
  s.current = current_;
  for (size_t j = 0; j < num_.size(); ++j)
    s.reach.push_back(den_[j] > 0 ? num_[j] / den_[j] : -1.0);
  s.steps = steps_;
  s.explore_steps = explore_steps_;
  s.prediction_error = error_;
  s.last_depth = last_depth_;
  s.last_batch = last_batch_;
  s.last_explored = last_explored_;
  return s;
}

}  // namespace updraft
