// Adaptive speculation's estimator: which chain depth a worker's next serving batch should use
// (rollout/worker/worker.h, "Adaptive speculation"). Pure bookkeeping, no clock: the worker
// times its engine runs and reports them here.
//
// Depth d: 0 is plain decoding, full_depth the engine's speculation settings; 1..full_depth-1
// (shorter chains) only when `shorter` (a chain, and the option on). For each depth it keeps
// cost(d), the seconds per round of its runs (per token for plain), and for each draft position
// j the share reach_j of rounds whose accepted length reached j + 1, both as EMAs over the runs
// that measured them (a run at depth d measures positions j < d). Predicted throughput:
//     tokens/s(d) = (1 + sum_{j<d} reach_j) / cost(d).
// A depth not run yet is costed between plain and the full depth, by its share of the full
// depth's draft positions: an optimistic guess for the shorter chains (verification does not get
// proportionally cheaper with fewer rows), so one is tried when it looks best and measured then.
// choose(): the full depth until it has been measured, then the depth with the highest
// prediction (ties keep the deeper one); plain and the shorter chains have none until plain has
// been measured, which the worker does on its probe requests (plain_measured()).
#pragma once

#include <cstdint>
#include <vector>

#include "rollout/engine.h"

namespace updraft {

class AdaptiveSpec {
 public:
  AdaptiveSpec(int64_t full_depth, bool shorter, double ema);

  int64_t full_depth() const { return full_depth_; }
  int64_t choose() const;
  bool plain_measured() const { return cost_[0] > 0; }
  double predicted_tps(int64_t depth) const;  // 0 when it cannot be predicted yet
  // A run of `tokens` tokens in `seconds` at `depth` (spec: its counters; unused for plain).
  // Runs with no tokens, no time, or no speculative round are ignored.
  void observe(int64_t depth, double seconds, int64_t tokens, const SpecStats& spec);

 private:
  int64_t full_depth_;
  bool shorter_;
  double ema_;
  std::vector<double> cost_;   // [d]; 0: not measured
  std::vector<double> reach_;  // [j]; -1: not measured
};

}  // namespace updraft
