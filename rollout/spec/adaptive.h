// Adaptive speculation: the depth each engine step runs at (0 = plain decoding), chosen for the
// live batch from what the engine has measured on itself. A drafter that accepts little makes
// speculation slower than plain decoding, and verification stops being nearly free as the batch
// grows, while the long tail of an RL batch (a few sequences left) is where it pays most; so the
// choice is made per step, for the number of sequences decoding in it.
//
// Model. Steps are grouped by live batch into buckets 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64+
// (bucket(B) = min(6, floor(log2 B))). For each bucket and depth d the chooser keeps cost(b, d),
// an EMA of the step's seconds per decoding sequence (prefill rows' share of the forward left
// out), and for the serving drafter the acceptance reach_j (rounds whose accepted length reached
// j + 1 among those that tried position j, an exponentially decayed count). Predicted throughput
// per sequence: (1 + sum_{j<d} reach_j) / cost(b, d). Only ratios matter within a bucket, so a
// depth unmeasured in b borrows cost(b', d) / cost(b', 0) from the nearest bucket b' that measured
// both, and failing that a prior of 1 + 0.1 d (drafting looks cheap until measured, so it gets
// measured). A drafter not measured yet is assumed to accept everything: it runs at full depth
// first, which measures it; a new drafter version starts from its predecessor's acceptance with a
// weight of a couple of rounds.
//
// Choice. The depth with the highest prediction, with hysteresis: the bucket's current depth is
// kept unless another predicts more than (1 + hysteresis) times its throughput. Exploration: a
// step runs the depth of its bucket measured least when that depth has fewer than min_samples
// measurements or none for stale_steps steps, and at most one step in 1 / explore_share (5%)
// explores; so every cell gets measured, and in a steady state almost no step pays for it (an
// explored depth can cost twice a plain step at a large batch). Explored steps are interleaved
// with the others in time, so they see the same machine and requests.
//
// Thread safety: none; the engine's thread calls choose() before and observe() after each step.
// snapshot() copies the state for metrics (the caller serialises access).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "drafter/draft_tree.h"
#include "rollout/spec/spec_stats.h"

namespace updraft {

// What one step tells the chooser.
struct StepSample {
  int64_t batch = 0;    // decoding sequences in the step
  int64_t depth = 0;    // the depth the speculating ones ran at (0: plain)
  double seconds = 0;   // wall time less the prefill rows' share of the forward
  SpecStats spec;       // the step's rounds
};

class DepthChooser {
 public:
  virtual ~DepthChooser() = default;
  virtual int64_t choose(int64_t batch) = 0;  // for a step with `batch` decoding sequences
  virtual void observe(const StepSample& s) = 0;
  virtual void drafter_changed(uint64_t version) = 0;
};

struct AdaptiveOptions {
  double explore_share = 0.05;
  double cost_ema = 0.2;        // weight of the newest step in a cell's cost
  double reach_decay = 0.98;    // per step: the weight of older rounds in the acceptance estimate
  double hysteresis = 0.03;
  int64_t min_samples = 3;
  int64_t stale_steps = 2000;  // a cell measured longer ago is measured again (exploration)
  int64_t fixed_depth = -1;     // >= 0: always this depth (measurements, tests)
};

class AdaptiveDepth final : public DepthChooser {
 public:
  static constexpr int kBuckets = 7;
  AdaptiveDepth(const SpecSettings& full, const AdaptiveOptions& options = {});

  static int bucket(int64_t batch);
  int64_t choose(int64_t batch) override;
  void observe(const StepSample& s) override;
  void drafter_changed(uint64_t version) override;

  struct Cell {
    double cost = 0;  // seconds per decoding sequence per step; 0: never measured
    int64_t samples = 0, last_step = -1;
  };
  struct Snapshot {
    std::vector<int64_t> depths;  // allowed depths
    std::array<std::vector<Cell>, kBuckets> cells;  // [bucket][index of depth]
    std::array<int64_t, kBuckets> current{};        // depth each bucket runs at
    std::vector<double> reach;                      // [j]: estimated, -1 unknown
    int64_t steps = 0, explore_steps = 0;
    double prediction_error = 0;  // EMA of |predicted - measured| / measured tokens/s per sequence
    int64_t last_depth = 0, last_batch = 0;
    bool last_explored = false;
  };
  Snapshot snapshot() const;
  // Predicted tokens/s per decoding sequence at `depth` in `bucket` (0: not predictable).
  double predicted(int bucket, int64_t depth) const;

 private:
  size_t index_of(int64_t depth) const;
  double ratio(int b, size_t d) const;
  double reach(size_t j) const;
  int64_t explore_candidate(int b) const;

  SpecSettings full_;
  AdaptiveOptions opt_;
  std::vector<int64_t> depths_;
  std::array<std::vector<Cell>, kBuckets> cells_;
  std::array<int64_t, kBuckets> current_{};
  std::vector<double> num_, den_;  // decayed accepted_at / tried_at counts per position
  int64_t steps_ = 0, explore_steps_ = 0, since_explore_ = 0;
  double error_ = 0, last_pred_ = 0;
  int64_t last_depth_ = 0, last_batch_ = 0;
  bool last_explored_ = false;
};

}  // namespace updraft
