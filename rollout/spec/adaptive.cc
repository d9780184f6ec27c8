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
  for (auto& row : current_)
    row.fill(full.steps);
  shown_.fill(full.steps);
  for (int b = 0; b < kBuckets; ++b)
    typical_batch_[static_cast<size_t>(b)] = static_cast<double>(int64_t{1} << b);
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

// kPriorRounds pseudo-rounds at the shallower position's estimate (1 for the first) join the
// measured ones: a few unlucky first rounds must not rule a depth out for good, since a depth not
// chosen measures nothing past its own positions (seen: two rejections at position 2 in a fresh
// chooser's first rounds held a batch-1 run at depth 1, tau 1.9 where depth 4 gave 4.2).
double AdaptiveDepth::reach(size_t j) const {
  const double prior = j == 0 ? 1.0 : reach(j - 1);
  return (num_[j] + kPriorRounds * prior) / (den_[j] + kPriorRounds);
}

// E[max(0, s - a_d)] for the drafter's run a_d at depth d (header: the model), with a_d known to
// be at least D: P(a_d <= k) = 1 - reach_k / reach_{D-1} below d (reach_j is the share of rounds
// whose run reaches j + 1; reach_{-1} = 1), 1 from d on.
double AdaptiveDepth::extra_at(const StepSample::Runs& r, int64_t d) const {
  const int64_t D = r.depth, a = r.eagle, s = r.suffix;
  // Drawn drafts: where a suffix candidate was also the draw, the draw was accepted with
  // min(1, p / q), and the candidate alone, a point mass, would have been with p: the rounds say
  // nothing of what the candidates give where the drafter stops short, only beyond its own run.
  // (Counting the drafter's run as theirs made the chooser cut the drafter short in grafting
  // steps: one sibling at a time, depth 4.2 against 6.5 without suffix drafts, fewer tokens.)
  if (r.drawn && (d <= D || a < D))
    return static_cast<double>(std::max<int64_t>(0, s - a));
  if (d <= D || a < D)
    return static_cast<double>(std::max<int64_t>(0, s - std::min(a, d)));
  // reach_j estimated per position need not fall with j: a running minimum keeps the CDF monotone.
  const double at_D = D == 0 ? 1.0 : reach(static_cast<size_t>(D - 1));
  double sum = 0, further = at_D;
  for (int64_t k = D; k < s; ++k) {
    if (k < d)
      further = std::min(further, reach(static_cast<size_t>(k)));
    sum += k < d && at_D > 0 ? 1 - further / at_D : 1.0;
  }
  return sum;
}

// Every grafting step teaches extra at every depth of its bucket (the header's counterfactual), and
// the nodes it grafted at its own.
void AdaptiveDepth::learn_extra(const StepSample& s, int b) {
  if (s.suffix < 0)
    return;
  UPD_CHECK(s.suffix < kSuffixClasses) << "adaptive speculation: suffix class " << s.suffix;
  const auto k = static_cast<size_t>(s.suffix);
  for (size_t d = 0; d < depths_.size(); ++d) {
    double sum = 0;
    for (const StepSample::Runs& r : s.runs)
      sum += extra_at(r, depths_[d]);
    Cell& c = cells_[static_cast<size_t>(b)][d];
    // Suffix drafts' tokens come in bursts (none for most steps, many when a repeat matches): a
    // mean over the last ~50 grafting steps, not the cost's short EMA.
    const double w = std::max(kExtraWeight, 1.0 / static_cast<double>(c.extra_samples[k] + 1));
    c.extra[k] = (1 - w) * c.extra[k] + w * sum / static_cast<double>(s.batch);
    ++c.extra_samples[k];
  }
  // The nodes it grafted per sequence, at its own depth (the cost's short EMA: no bursts here).
  Cell& c = cells_[static_cast<size_t>(b)][index_of(s.depth)];
  const double g = static_cast<double>(s.grafted_rows) / static_cast<double>(s.batch);
  c.graft[k] = c.graft_samples[k]++ == 0 ? g : (1 - opt_.cost_ema) * c.graft[k] + opt_.cost_ema * g;
}

double AdaptiveDepth::forward_at(double rows) const {
  double x0 = 0, y0 = 0;  // the measured point at or below `rows`, then the first above it
  for (int i = 0; i < kRowBuckets; ++i) {
    if (fwd_secs_[i] <= 0)
      continue;
    const double x = fwd_rows_[i], y = fwd_secs_[i];
    if (x >= rows)
      return y0 <= 0 ? y : y0 + (y - y0) * (rows - x0) / (x - x0);  // below the least: flat
    x0 = x;
    y0 = y;
  }
  return y0 <= 0 ? 0.0 : y0 * rows / x0;  // beyond the most rows measured: proportional
}

// E at batch bucket b: measured there, else from the nearest measured bucket, scaled like the
// policy's forward between the two batches (a draft level is one decoder layer over B rows: it
// turns from memory-bound to compute-bound where the policy's layers do).
double AdaptiveDepth::draft_level_at(int b, bool* settled) const {
  if (settled != nullptr)
    *settled = false;
  for (int dist = 0; dist < kBuckets; ++dist)
    for (const int bb : {b - dist, b + dist}) {
      if (bb < 0 || bb >= kBuckets || draft_level_[static_cast<size_t>(bb)] <= 0)
        continue;
      const double here = forward_at(typical_batch_[static_cast<size_t>(b)]),
                   there = forward_at(typical_batch_[static_cast<size_t>(bb)]);
      if (settled != nullptr)
        *settled = draft_level_n_[static_cast<size_t>(bb)] >= opt_.min_samples;
      return draft_level_[static_cast<size_t>(bb)] * (here > 0 && there > 0 ? here / there : 1.0);
    }
  return 0.0;
}

double AdaptiveDepth::curve_ratio(int b, int64_t depth) const {
  const double B = typical_batch_[static_cast<size_t>(b)];
  const double f0 = forward_at(B), fd = forward_at(B * rows_at(depth)), e = draft_level_at(b);
  if (f0 <= 0 || fd <= 0 || e <= 0)
    return 0.0;
  return (fd + static_cast<double>(depth) * e) / f0;
}

// cost(b, d) / cost(b, 0): measured in b, else the cost curves', else borrowed from the nearest
// bucket that has both, else the prior.
double AdaptiveDepth::ratio(int b, size_t d) const {
  if (d == 0)
    return 1.0;
  const auto& here = cells_[static_cast<size_t>(b)];
  if (here[d].cost > 0 && here[0].cost > 0) {
    // Until both cells have min_samples steps, the lesser of the measured ratio and the cost
    // curves' (learned from every step): one slow step of a depth rarely run must not price it
    // out, as a depth not chosen is measured only by exploration (at most one step in 20), and the
    // host's stalls only ever add time. (Leaning on the curves in proportion was not enough: a
    // fresh engine's first drafter pass, 10x a typical one, still kept the full depth below the
    // exploration floor for good.)
    const double measured = here[d].cost / here[0].cost;
    const int64_t n = std::min(here[d].samples, here[0].samples);
    const double curve = n < opt_.min_samples ? curve_ratio(b, depths_[d]) : 0.0;
    return curve > 0 ? std::min(measured, curve) : measured;
  }
  // Plain not measured here (it never pays at this batch): its cost from the best-measured depth
  // and the curves, so that measured depths still compare by what they measured.
  size_t anchor = 0;
  for (size_t k = 1; k < here.size(); ++k)
    if (here[k].samples > here[anchor].samples && here[k].cost > 0)
      anchor = k;
  const double anchor_curve = anchor > 0 ? curve_ratio(b, depths_[anchor]) : 0.0;
  if (here[d].cost > 0 && anchor_curve > 0)
    return here[d].cost / (here[anchor].cost / anchor_curve);
  const double curve = curve_ratio(b, depths_[d]);
  if (curve > 0)
    return curve;
  for (int dist = 1; dist < kBuckets; ++dist)
    for (const int bb : {b - dist, b + dist}) {
      if (bb < 0 || bb >= kBuckets)
        continue;
      const auto& row = cells_[static_cast<size_t>(bb)];
      if (row[d].cost > 0 && row[0].cost > 0)
        return row[d].cost / row[0].cost;
    }
  return 1.0 + 0.1 * static_cast<double>(depths_[d]);
}

double AdaptiveDepth::predicted(int b, int64_t depth, int suffix) const {
  UPD_CHECK(suffix >= kNoSuffix && suffix < kSuffixClasses) << "adaptive speculation: suffix class " << suffix;
  const size_t d = index_of(depth);
  double per_round = 1.0 + (suffix >= 0 ? cells_[static_cast<size_t>(b)][d].extra[static_cast<size_t>(suffix)] : 0.0);
  for (size_t j = 0; j < static_cast<size_t>(depth); ++j)
    per_round += reach(j);
  const auto& row = cells_[static_cast<size_t>(b)];
  const double plain = row[0].cost;  // 0 when unmeasured: the prediction is relative then
  return per_round / (plain > 0 ? ratio(b, d) * plain + graft_cost(b, d, suffix) : ratio(b, d));
}

int64_t AdaptiveDepth::explore_candidate(int b, int suffix) const {
  const int64_t cur = current_[static_cast<size_t>(b)][static_cast<size_t>(suffix + 1)];
  // A drafter not measured yet (since its swap) is measured at the full depth first: its
  // acceptance is what every speculative prediction rests on.
  if (new_drafter_rounds_ < kMeasureNewDrafter && cur != full_.steps)
    return full_.steps;
  // The curves can tell only once E rests on min_samples steps: a fresh engine's first drafter
  // pass, cold, can take 20-30 ms on a VM whose new huge pages are slow to fault in, and priced
  // every depth out.
  bool settled = false;
  draft_level_at(b, &settled);
  const auto& row = cells_[static_cast<size_t>(b)];
  int64_t best = -1;
  for (size_t d = 0; d < depths_.size(); ++d) {
    if (depths_[d] == cur)
      continue;
    const Cell& c = row[d];
    if (c.samples >= opt_.min_samples && steps_ - c.last_step <= opt_.stale_steps)
      continue;
    // Once the cost curves can tell, a depth far behind is not worth a measurement. Plain always
    // is: it costs no drafter pass, and it is what every speculative cost is measured against
    // (the curves alone misjudge small batches, where a forward's cost barely grows with rows).
    const bool curves = d > 0 && settled && curve_ratio(b, depths_[d]) > 0;
    if (curves && predicted(b, depths_[d], suffix) < opt_.explore_floor * predicted(b, cur, suffix))
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

// A cost estimate after `samples` earlier ones, with the newest x: the least of the first
// min_samples (the host's stalls only ever add time), then an EMA.
double AdaptiveDepth::settle(double est, int64_t samples, double x) const {
  if (samples == 0)
    return x;
  return samples < opt_.min_samples ? std::min(est, x) : (1 - opt_.cost_ema) * est + opt_.cost_ema * x;
}

// A drafter pass over up to a few dozen rows costs about what one over a single row does (it
// reads the same weights); beyond that, and beyond two steps' worth of pairs, it is a cost.
int64_t AdaptiveDepth::cheap_backlog(int64_t batch) const {
  return std::max<int64_t>(kCheapBacklog, 2 * std::max<int64_t>(1, batch) * (full_.steps + 1));
}

int64_t AdaptiveDepth::choose(int64_t batch, int64_t backlog, int suffix) {
  ++steps_;
  ++since_explore_;
  last_batch_ = batch;
  last_explored_ = false;
  const int b = bucket(std::max<int64_t>(1, batch));
  int64_t depth = opt_.fixed_depth;
  if (depth < 0) {
    int64_t& cur = current_[static_cast<size_t>(b)][static_cast<size_t>(suffix + 1)];
    int64_t best = cur;
    double best_tps = predicted(b, cur, suffix);
    for (int64_t d : depths_) {
      const double tps = predicted(b, d, suffix);
      if (tps > best_tps * (1.0 + opt_.hysteresis)) {
        best = d;
        best_tps = tps;
      }
    }
    cur = best;
    shown_[static_cast<size_t>(b)] = best;
    depth = best;
    const bool cheap = backlog <= cheap_backlog(batch);
    // Speculating now first absorbs the backlog (paid once, but only worth it for a clear gain).
    if (!cheap && depth > 0 && predicted(b, depth, suffix) < (1.0 + opt_.backlog_margin) * predicted(b, 0, suffix))
      depth = 0;
    if (cheap && opt_.explore_share > 0 && static_cast<double>(since_explore_) * opt_.explore_share >= 1.0) {
      const int64_t e = explore_candidate(b, suffix);
      if (e >= 0) {
        depth = e;
        last_explored_ = true;
        ++explore_steps_;
        since_explore_ = 0;
      }
    }
  }
  last_depth_ = depth;
  last_pred_ = predicted(b, depth, suffix);
  return depth;
}

void AdaptiveDepth::observe(const StepSample& s) {
  if (s.batch <= 0 || s.seconds <= 0)
    return;
  const int b = bucket(s.batch);
  const size_t d = index_of(s.depth);
  // A speculative step normally absorbs the pairs of the previous one (1 + accepted per sequence);
  // more is a backlog (a prompt, or pairs kept through plain steps), paid once: the drafter's
  // level time E is learned only without one, and a step's cost counts unless its backlog was
  // more than a cheap one (choose()). Every explored depth after plain steps absorbs their pairs
  // first, and not counting those steps at all left the depths explored from plain unmeasured for
  // good. A mixed step's cost belongs to no one depth.
  const bool absorbed = s.depth > 0 && s.draft_rows > 2 * s.batch * (s.depth + 1);
  const bool backlog = s.mixed || s.cold || (s.depth > 0 && s.draft_rows > cheap_backlog(s.batch));
  learn_curves(s, backlog || absorbed);
  learn_extra(s, b);
  // The decoding sequences' part of the step, on the curve that now includes its forward.
  const double own = s.seconds - prefill_seconds(s);
  // The measured throughput against what was predicted for this depth (relative error, EMA),
  // when the plain cost of the bucket anchors the prediction.
  if (s.depth == last_depth_ && !s.mixed && cells_[static_cast<size_t>(b)][0].cost > 0 && last_pred_ > 0) {
    const double measured =
        (1.0 + (static_cast<double>(s.spec.accepted) + s.extra_tokens) / static_cast<double>(s.batch)) /
        (own / static_cast<double>(s.batch));
    const double err = std::fabs(last_pred_ - measured) / measured;
    error_ = error_ == 0 ? err : 0.9 * error_ + 0.1 * err;
  }
  // What the cell prices: that less its grafted rows and a backlog's absorption.
  const double base_per_seq =
      (own - grafted_seconds(s) - (absorbed ? backlog_seconds(s, b) : 0.0)) / static_cast<double>(s.batch);
  Cell& c = cells_[static_cast<size_t>(b)][d];
  // A stall of the OS or the host must not price a depth out (once it is not chosen it is not
  // measured): a lone step over kStall times the settled estimate is left out; a run of
  // kStallRun, a real change, counts as at most kOutlier times it, so the estimate follows.
  const bool settled = c.samples >= opt_.min_samples;
  bool stall = false;
  observed_seconds_ += s.seconds;
  if (!backlog && settled) {
    c.stalls = base_per_seq > kStall * c.cost ? c.stalls + 1 : 0;
    stall = c.stalls > 0 && c.stalls < kStallRun;
    if (c.stalls > 0) {  // the first steps of a lasting change of cost count too, until the cost follows
      ++stall_steps_;
      stall_seconds_ += (base_per_seq - c.cost) * static_cast<double>(s.batch);
    }
  }
  if (!backlog && !stall) {
    // (settle: one slow first step, a fresh cache's pages faulted in, must not price a depth out.)
    const double x = settled ? std::min(base_per_seq, kOutlier * c.cost) : base_per_seq;
    c.cost = settle(c.cost, c.samples, x);
    ++c.samples;
    c.last_step = steps_;
  }
  // Older rounds weigh less as new ones try the same position (not per step: plain steps measure
  // no acceptance, and shallow rounds none of the deep positions; decaying through them would
  // leave an estimate resting on a few rounds).
  for (size_t j = 0; j < num_.size() && j < s.spec.tried_at.size(); ++j) {
    const double keep = std::pow(opt_.reach_decay, static_cast<double>(s.spec.tried_at[j]));
    num_[j] = num_[j] * keep + (j < s.spec.accepted_at.size() ? static_cast<double>(s.spec.accepted_at[j]) : 0.0);
    den_[j] = den_[j] * keep + static_cast<double>(s.spec.tried_at[j]);
  }
  new_drafter_rounds_ += s.spec.rounds;
}

void AdaptiveDepth::learn_curves(const StepSample& s, bool backlog) {
  auto blend = [this](double& est, double x) { est = est <= 0 ? x : (1 - opt_.cost_ema) * est + opt_.cost_ema * x; };
  const auto b = static_cast<size_t>(bucket(s.batch));
  blend(typical_batch_[b], static_cast<double>(s.batch));
  if (s.forward_rows > 0 && s.forward_seconds > 0) {  // a forward's time by rows holds for any step
    int rb = 0;
    while (rb < kRowBuckets - 1 && (int64_t{2} << rb) <= s.forward_rows)
      ++rb;
    blend(fwd_rows_[static_cast<size_t>(rb)], static_cast<double>(s.forward_rows));
    blend(fwd_secs_[static_cast<size_t>(rb)], s.forward_seconds);
  }
  if (s.depth > 0 && s.draft_seconds > 0 && !backlog) {  // as a cell's cost (observe)
    const double x = s.draft_seconds / static_cast<double>(s.depth);
    double& e = draft_level_[b];
    const int64_t n = draft_level_n_[b]++;
    e = settle(e, n, n >= opt_.min_samples ? std::min(x, kOutlier * e) : x);
  }
}

void AdaptiveDepth::drafter_changed(uint64_t) {
  new_drafter_rounds_ = 0;
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
  s.current = shown_;
  for (size_t j = 0; j < num_.size(); ++j)
    s.reach.push_back(den_[j] > 0 ? reach(j) : -1.0);
  s.steps = steps_;
  s.explore_steps = explore_steps_;
  s.stall_steps = stall_steps_;
  s.stall_seconds = stall_seconds_;
  s.observed_seconds = observed_seconds_;
  s.prediction_error = error_;
  s.last_depth = last_depth_;
  s.last_batch = last_batch_;
  s.last_explored = last_explored_;
  return s;
}

}  // namespace updraft
