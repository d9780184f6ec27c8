// Whether a step grafts suffix drafts (rollout/spec/suffix_drafts.h), chosen per live batch from
// the engine's own measurements. Suffix drafts cost nothing to propose but every grafted node is
// one more row to verify: at batch 1 on a memory-bound machine that is nearly free, at a large
// batch it costs about what a token costs, so they pay only where they are accepted often enough.
//
// Asked only for steps whose lookups found candidates (the engine looks them up first: under 1%
// of a plain step): a step with nothing to graft is any other step, and counting it in the "on"
// arm priced grafting by the text that had no match (the first sibling of a group) and turned it
// off for the siblings after it, which match far ahead.
//
// Model. Per batch bucket (AdaptiveDepth::bucket: 1, 2-3, 4-7, ..., 64+) and arm (off, on), an
// EMA of the step's throughput per decoding sequence: tokens the decoding sequences emitted over
// the step's seconds (less the prefill rows' share), over the batch. Cold steps (StepSample::cold)
// are not counted.
//
// Choice. A bucket starts with suffix drafts on; each arm is measured min_samples times first (the
// steps alternate); then the arm with the higher throughput runs, the current one kept unless the
// other's is more than (1 + hysteresis) times higher. Every 1 / explore_share-th step of a bucket
// (5%) runs the other arm, interleaved with the rest in time, so both estimates stay current.
//
// Thread safety: none; the engine's thread calls choose() before and observe() after each step.
#pragma once

#include <array>
#include <cstdint>

namespace updraft {

struct SuffixGateOptions {
  // The least live batch the gate decides for. Below it every step with candidates grafts them,
  // each node priced by the depth chooser's bar (DepthChooser::row_worth): a verification row
  // costs a few percent of a batch-1 step, and the gate's own measurements there are of a depth
  // chooser still learning which depth suits grafting steps (a step of the "on" arm measured
  // early ran deep trees plus grafts), so it turned grafting off where it paid and, exploring one
  // step in 20, left the chooser too few grafting steps to learn from. Session 32's group
  // benchmark, one sibling at a time, merged / EAGLE-only with the gate at batch 1 and without:
  // groups of 4 1.00 and 1.12-1.14 (int8 drafter), 1.06-1.13 and 1.12-1.26 (bf16); groups of 8
  // 1.17-1.29 and 1.20-1.24 (int8), 1.22-1.29 and 1.30 (bf16). At batches of 4 and 8 the gate
  // keeps merged at parity with the drafter alone, where grafting on every step costs 10-20%.
  int64_t min_batch = 2;
  double explore_share = 0.05;
  double ema = 0.05;  // weight of the newest step in an arm's estimate
  double hysteresis = 0.03;
  int64_t min_samples = 8;
};

class SuffixGate {
 public:
  static constexpr int kBuckets = 7;
  explicit SuffixGate(const SuffixGateOptions& o = {});

  bool choose(int64_t batch);  // true below min_batch (such steps are not counted)
  // A step with `batch` decoding sequences that ran with suffix drafts `on` and emitted `tokens`
  // from them in `seconds`.
  void observe(int64_t batch, bool on, int64_t tokens, double seconds, bool cold);

  struct Arm {
    double rate = 0;  // tokens per second per decoding sequence (EMA); 0: not measured
    int64_t samples = 0;
  };
  struct Snapshot {
    std::array<std::array<Arm, 2>, kBuckets> arms{};  // [bucket][off, on]
    std::array<bool, kBuckets> on{};                  // the arm each bucket runs
    int64_t steps = 0, explore_steps = 0;
  };
  const Snapshot& snapshot() const { return s_; }

 private:
  SuffixGateOptions o_;
  Snapshot s_;
  std::array<int64_t, kBuckets> since_explore_{};
};

// How far grafted suffix nodes' path probabilities (from the indexes' counts) are borne out: an EMA
// of the suffix nodes accepted per grafting step over an EMA of what their path probabilities
// predicted, at most 1 (never above what the counts claim). The engine divides the depth
// chooser's bar (DepthChooser::row_worth) by it, so that candidates accepted less often than their
// counts claim must claim more to earn a row. On a 2-core Zen 1 host at temperature 1, history
// nodes that cleared a mean bar of 0.52 were accepted at about 0.3 per node, and merged drafts ran
// 0.85-0.88x EAGLE-only (docs/benchmarks.md, "Session 46"). 1 until min_claimed nodes were
// predicted; never below `floor`.
class SuffixCalibration {
 public:
  explicit SuffixCalibration(double ema = 0.05, double min_claimed = 8.0, double floor = 0.1);
  // A step that grafted: the sum of its suffix nodes' path probabilities, and how many of them the
  // verification accepted.
  void observe(double claimed, int64_t accepted);
  double factor() const;

 private:
  double ema_, min_claimed_, floor_;
  double claimed_ = 0, accepted_ = 0, total_ = 0;
};

}  // namespace updraft
