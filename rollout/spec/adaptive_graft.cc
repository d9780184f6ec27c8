// AdaptiveDepth's pricing of grafted suffix nodes (rollout/spec/adaptive.h: a step's grafted rows
// priced on the forward's cost curve apart from its depth, and the graft budget, row_worth).
#include <algorithm>

#include "rollout/spec/adaptive.h"

namespace updraft {

double AdaptiveDepth::rows_at(int64_t depth) const {
  return static_cast<double>(depth == full_.steps ? full_.draft_tokens : depth + 1);
}

// Suffix nodes grafted per sequence at depth index d in class `suffix`: measured there, else the
// most the class grafted at another depth of the bucket (0: none measured).
double AdaptiveDepth::graft_rows(int b, size_t d, int suffix) const {
  const auto k = static_cast<size_t>(suffix);
  const auto& row = cells_[static_cast<size_t>(b)];
  double most = 0;
  for (const Cell& c : row)
    most = std::max(most, c.graft_samples[k] > 0 ? c.graft[k] : 0.0);
  return row[d].graft_samples[k] > 0 ? row[d].graft[k] : most;
}

// F(B r_d + B g) - F(B r_d) over B (the header's model), or 0 while the curve cannot tell.
double AdaptiveDepth::graft_cost(int b, size_t d, int suffix) const {
  if (suffix < 0)
    return 0.0;
  const double g = graft_rows(b, d, suffix);
  const double B = typical_batch_[static_cast<size_t>(b)], base = B * rows_at(depths_[d]);
  const double f0 = forward_at(base), f1 = forward_at(base + B * g);
  return g > 0 && f0 > 0 ? std::max(0.0, f1 - f0) / B : 0.0;
}

// F(rows) - F(rows - grafted) for a measured step, at most the grafted rows' proportional share of
// its forward (a forward's time grows slower than its rows), 0 while the curve cannot tell.
double AdaptiveDepth::grafted_seconds(const StepSample& s) const {
  if (s.grafted_rows <= 0 || s.forward_rows <= s.grafted_rows || s.forward_seconds <= 0)
    return 0.0;
  const auto rows = static_cast<double>(s.forward_rows), g = static_cast<double>(s.grafted_rows);
  const double f1 = forward_at(rows), f0 = forward_at(rows - g);
  return f1 > 0 && f0 > 0 ? std::clamp(f1 - f0, 0.0, s.forward_seconds * g / rows) : 0.0;
}

// The forward less what its decoding rows alone would have taken on the curve; by rows until the
// curve has a point.
double AdaptiveDepth::prefill_seconds(const StepSample& s) const {
  if (s.prefill_rows <= 0 || s.forward_rows <= 0 || s.forward_seconds <= 0)
    return 0.0;
  const auto rows = static_cast<double>(s.forward_rows), own = rows - static_cast<double>(s.prefill_rows);
  const double f1 = forward_at(rows), f0 = forward_at(own);
  return s.forward_seconds * (1.0 - (f1 > 0 && f0 > 0 ? std::min(1.0, f0 / f1) : own / rows));
}

// The drafter's time beyond what its levels take in a typical step (d E(B), which absorbs the
// previous step's pairs): the backlog's absorption. 0 until E rests on min_samples steps.
double AdaptiveDepth::backlog_seconds(const StepSample& s, int b) const {
  bool settled = false;
  const double e = draft_level_at(b, &settled);
  return settled && e > 0 ? std::max(0.0, s.draft_seconds - static_cast<double>(s.depth) * e) : 0.0;
}

double AdaptiveDepth::row_worth(int64_t batch, int64_t depth, int suffix) const {
  const int b = bucket(std::max<int64_t>(1, batch));
  if (suffix < 0 || cells_[static_cast<size_t>(b)][0].cost <= 0)
    return 0.0;
  const auto B = static_cast<double>(std::max<int64_t>(1, batch));
  const double rows = B * (rows_at(depth) + graft_rows(b, index_of(depth), suffix));
  const double f0 = forward_at(rows), f1 = forward_at(rows + B);  // B more rows: one a sequence
  // A row's seconds times the step's tokens/s without suffix drafts (predicted() is per batch).
  return f0 > 0 && f1 > f0 ? (f1 - f0) / B * predicted(b, depth, kNoSuffix) : 0.0;
}

}  // namespace updraft
