// Adaptive speculation: the depth each engine step runs at (0 = plain decoding), chosen for the
// live batch from what the engine has measured on itself. A drafter that accepts little makes
// speculation slower than plain decoding, and verification stops being nearly free as the batch
// grows, while the long tail of an RL batch (a few sequences left) is where it pays most; so the
// choice is made per step, for the number of sequences decoding in it.
//
// Model. Steps are grouped by live batch into buckets 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64+
// (bucket(B) = min(6, floor(log2 B))). Throughput per sequence at depth d in bucket b is
//     (1 + sum_{j<d} reach_j + extra(b, d, c)) / cost(b, d)   (extra only in steps that graft),
// with reach_j the share of rounds whose accepted length reached j + 1 among those that tried
// position j (counts decayed by the rounds that try the position, any depth: about its last 200
// tries), with kPriorRounds pseudo-rounds at reach_{j-1} (1 for j = 0) among them, so that a few
// unlucky first rounds cannot rule the deeper depths out: a depth not chosen measures nothing
// past its own positions; extra(b, d, c) the tokens per sequence per step that suffix drafts add
// beyond the drafter's run at depth d, counted only for steps that graft them, per suffix class c
// (DepthChooser: the indexes are looked up before the depth is chosen, so a step whose history
// matches far ahead can leave the drafter out and one with no match can draft deep; a mean over
// about the last 50 grafting steps of the class, as they come in bursts; the drafter and the suffix drafts overlap,
// so a drafter that adds little over them is not paid for), and cost(b, d) the step's seconds per
// decoding sequence, a step that also prefilled less its prefill rows' share (below). Every grafting step teaches
// extra at every depth, not only at its own (a depth not chosen would otherwise keep what it
// measured long ago, say before a domain switch made the history useful, and never be chosen
// again): a round's accepted path is the longer of the drafter's run a and the run s of nodes a
// suffix index proposed (a suffix candidate's ancestors are suffix nodes too), and at depth d the
// drafter's chain is this round's cut at d, so the round would have added max(0, s - min(a, d))
// beyond the drafter there; exact under greedy verification for d up to the round's depth D, and
// for deeper d when the drafter stopped short of D, as long as the graft budget (new nodes only)
// does not bind (a round whose drafts were drawn, DraftTree::drawn, adds max(0, s - a) there
// instead: where a candidate was also the draw, the draw was accepted as a draw, which tells
// little of the candidate as a point mass); when it ran to D, the expectation over the estimated reach of the positions
// beyond, as if the two runs were independent (repetitive text lengthens both, so this
// overestimates deep depths a little until they run). Costs are per depth, and a step's grafted
// suffix nodes are priced apart (a step at depth 0 that verifies a dozen suffix rows must not
// make plain decoding look dear to the steps that graft none): a cell measures a step less its
// grafted rows' share of the forward, F(rows) - F(rows - grafted) on the cost curve below, and a
// prediction for class c adds back F(B r_d + B g) - F(B r_d) per step, with r_d the drafter's
// rows per sequence at depth d (d + 1; the tree's tokens at the full settings) and g the suffix
// nodes grafted per sequence at that depth and class (an EMA of its grafting steps; a depth not
// run at that class yet borrows the most the class grafted at another). Only ratios matter within a
// bucket: cost(b, d) = cost(b, 0) x r(b, d), where r is measured when both cells have been
// (the least of a cell's first min_samples steps, then EMAs of their step times, a step that
// absorbed a cheap backlog less its drafter time beyond d E(B) once E is settled: a batch-1 run's
// first step of each sequence absorbs its prompt, and counted whole (14 of the full depth's 58
// steps in a scratch run) the full depth's cell held 3.25 ms against 2.15 ms a step at fixed
// depth 8, so the chooser drafted shallower; a step over 2x
// a settled estimate is a stall of the OS or the host and does not count unless three come in a
// row, when they count as at most 3x: one stall must not price a depth out, as a depth no longer
// chosen is no longer measured; a step whose drafter absorbed a backlog, a new sequence's prompt
// or pairs kept through plain steps, is not a typical step of its depth and does not count
// either), and the lesser of that and the cost curves' ratio while either cell has fewer than
// min_samples steps (the host's stalls only ever add time, and a fresh engine's first drafter
// pass, its cache's new pages faulted in, took 10x a typical one); otherwise it comes from a cost
// curve learned from every step: F(rows), the policy forward's time for a number of rows
// (decode, verification and prefill steps all measure it, 1 to thousands of rows; a step that
// also prefilled is priced as its forward times F(rows - prefill rows) / F(rows): the weights are
// read once for both, so the decoding rows cost far more than their share of the rows, and
// priced by rows, plain decoding at batch 2-3, seen only beside an admission's prefill in a
// serving stream at batch 4, measured 0.2 ms a sequence against 0.58 at batch 4), and E(B), a
// draft level's time for B sequences (as a cell: the least of its first min_samples, then an
// EMA); r(b, d) = (F(B r_d) + d E(B)) / F(B) at the bucket's typical batch B. With
// nothing measured yet, r = 1 + 0.1 d: drafting looks cheap until measured, so it gets
// measured. A drafter not measured yet is assumed to accept everything (it runs at full depth
// first, which measures it); a new drafter version starts from its predecessor's acceptance
// with a weight of a couple of rounds (beside the prior's pseudo-rounds, which pull it up
// toward the shallower positions' estimates), and until kMeasureNewDrafter of its rounds are in,
// a step that does not run the full depth asks for a canary (DepthChooser::canary): a batch
// settled on plain decoding would otherwise measure it only in explored steps, at most one in 20
// and none with a backlog (a large batch's plain steps build one within a few steps), so a
// worker could serve a better refreshed drafter plainly for hundreds of steps.
//
// Graft budget (row_worth): one more verification row in a step of B sequences at depth d costs
// F'(R) = (F(R + B) - F(R)) / B seconds at the step's expected rows R = B (r_d + g), in which the
// step would emit F'(R) x predicted(b, d) tokens without suffix drafts (predicted is the batch's
// tokens/s: per sequence per step over seconds per sequence); a suffix node whose path probability
// is below that costs more than it can add, so it is not grafted (a lenient bar: the suffix drafts
// already grafted raise the step's rate further). At batch 1 on this CPU a row costs a few
// percent of a step and the bar is about 0.1; at batch 8, where a row costs most of a token's
// time, only near-certain nodes pass. 0 until plain decoding and the curve are measured.
//
// Choice. The depth with the highest prediction (extra counted when the step grafts suffix drafts,
// which the suffix gate decides first), with hysteresis: the current depth of the bucket and suffix class is
// kept unless another predicts more than (1 + hysteresis) times its throughput. When the drafter
// would first have to absorb a backlog (sequences that decoded plainly until now; their pairs
// cost one drafter pass over every position), the step speculates only if that predicts at least
// (1 + backlog_margin) times plain's throughput: a marginal gain does not pay the pass back. Exploration: a
// step runs another depth of its bucket when that depth has fewer than min_samples measurements
// or none for stale_steps steps, and, once the cost curves can predict it (E resting on
// min_samples steps), is predicted within explore_floor of the current depth's throughput (a
// depth the curves show far behind is not worth a measurement: an explored depth can cost several plain steps at a
// large batch); at most one step in 1 / explore_share (5%) explores, and none whose drafter would first absorb a
// backlog (the pairs sequences kept through plain steps: for a large batch a drafter pass over
// thousands of rows, which only pays if those sequences go on to speculate). Explored steps are
// interleaved with the others in time, so they see the same machine and requests.
//
// Thread safety: none; the engine's thread calls choose() before and observe() after each step.
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
  double seconds = 0;   // wall time
  double forward_seconds = 0;  // the policy's forward
  int64_t forward_rows = 0;    // its rows (prefill included)
  int64_t prefill_rows = 0;    // of them, prompt rows (their share priced on the cost curve)
  double draft_seconds = 0;    // the drafter's passes (absorbing pairs and proposing)
  int64_t draft_rows = 0;      // committed pairs the drafter absorbed in the step
  // The step's rounds (the drafter's part of them), each tried to the depth it ran at (a chain
  // that stopped early too: its undrafted positions were not reached).
  SpecStats spec;
  // Tokens the decoding sequences emitted beyond one each and the drafter's accepted run: what
  // suffix drafts (rollout/spec/suffix_drafts.h) added, summed over the step's sequences (only
  // the prediction error reads it; extra is learned from `runs`).
  double extra_tokens = 0;
  // The suffix class the step grafted at (kNoSuffix: none) and, if it did, per decoding sequence
  // that looked them up, the depth the drafter ran at for it (0: it did not draft; the full depth
  // for a sequence without the drafter), and its accepted path's prefix of drafter nodes and of
  // nodes a suffix index proposed (SpecRound::eagle_run, suffix_run; 0 without a round), and
  // whether the drafter's drafts were drawn (SpecRound::drawn).
  int suffix = -1;  // DepthChooser::kNoSuffix
  struct Runs {
    int32_t depth = 0, eagle = 0, suffix = 0;
    bool drawn = false;
  };
  std::vector<Runs> runs;
  int64_t grafted_rows = 0;  // suffix nodes grafted beyond the drafter's trees (verification rows)
  // Some sequences (probes) ran at another depth than `depth`: the step's cost is not that
  // depth's, only its rounds teach acceptance.
  bool mixed = false;
  // The step ran soon after a long prefill, when the weights have partly left the caches (on a
  // shared CPU host the next two or three steps measured up to 2.2x slower): its cost is not
  // typical of its depth either, only its rounds teach acceptance.
  bool cold = false;
};

class DepthChooser {
 public:
  virtual ~DepthChooser() = default;
  // Suffix classes: how deep the step's suffix drafts reach, found before the depth is chosen (the
  // mean over its sequences of the deepest candidate's depth): none, shallower than the drafter's
  // full depth, or at least as deep. kNoSuffix: the step grafts none (the engine passes it, not
  // class 0, for a step whose lookups found nothing: such a step is like any other).
  static constexpr int kNoSuffix = -1, kSuffixClasses = 3;
  // For a step with `batch` decoding sequences, `backlog` committed pairs of which the drafter
  // would absorb first if the step speculated (beyond the previous step's), grafting suffix drafts
  // of class `suffix` (or kNoSuffix).
  virtual int64_t choose(int64_t batch, int64_t backlog, int suffix) = 0;
  // The least path probability a new suffix node needs to be grafted in a step of `batch`
  // decoding sequences at `depth`, class `suffix`: its verification row delays every sequence of
  // the step, so it pays only if it adds more tokens than the batch emits in that time (0: every
  // candidate within SuffixOptions::max_nodes).
  virtual double row_worth(int64_t batch, int64_t depth, int suffix) const { return 0.0; }
  virtual void observe(const StepSample& s) = 0;
  virtual void drafter_changed(uint64_t version) = 0;
  // After choose(): the engine also runs one decoding sequence at the full settings in this step
  // (a canary; the step is then mixed, StepSample::mixed). A new drafter is measured that way
  // while the batch decodes plainly or shallower, at the cost of one sequence's rows and backlog.
  virtual bool canary() const { return false; }
};

struct AdaptiveOptions {
  double explore_share = 0.05;
  double explore_floor = 0.8;   // explore only depths predicted at least this share of the current
  double cost_ema = 0.2;        // weight of the newest step in a cost estimate
  double reach_decay = 0.995;   // per round trying a position: the weight of older ones in its estimate
  double hysteresis = 0.03;
  double backlog_margin = 0.5;   // with a backlog to absorb first, speculate only for this much gain
  int64_t min_samples = 3;
  int64_t stale_steps = 2000;   // a cell measured longer ago is measured again (exploration)
  int64_t fixed_depth = -1;     // >= 0: always this depth (measurements, tests)
};

class AdaptiveDepth final : public DepthChooser {
 public:
  static constexpr int kBuckets = 7;
  static constexpr int kRowBuckets = 14;  // forward rows 1, 2, 4, ..., 8192+
  AdaptiveDepth(const SpecSettings& full, const AdaptiveOptions& options = {});

  static int bucket(int64_t batch);
  int64_t choose(int64_t batch, int64_t backlog = 0, int suffix = kNoSuffix) override;
  double row_worth(int64_t batch, int64_t depth, int suffix) const override;
  void observe(const StepSample& s) override;
  void drafter_changed(uint64_t version) override;
  bool canary() const override {
    return opt_.fixed_depth < 0 && new_drafter_rounds_ < kMeasureNewDrafter && last_depth_ != full_.steps;
  }

  struct Cell {
    double cost = 0;     // seconds per decoding sequence per step, grafted rows' share out; 0: never measured
    int64_t stalls = 0;  // steps in a row over kStall x cost
    int64_t samples = 0, last_step = -1;
    // Per suffix class: suffix drafts' tokens per sequence per grafting step (EMA).
    std::array<double, kSuffixClasses> extra{};
    std::array<int64_t, kSuffixClasses> extra_samples{};
    // Per suffix class: suffix nodes grafted per sequence in this depth's grafting steps (EMA).
    std::array<double, kSuffixClasses> graft{};
    std::array<int64_t, kSuffixClasses> graft_samples{};
  };
  struct Snapshot {
    std::vector<int64_t> depths;  // allowed depths
    std::array<std::vector<Cell>, kBuckets> cells;  // [bucket][index of depth]
    // Depth each bucket's last step chose before exploration (its suffix class's, which can
    // differ from step to step).
    std::array<int64_t, kBuckets> current{};
    std::vector<double> reach;                      // [j]: estimated (with the prior), -1 unmeasured
    int64_t steps = 0, explore_steps = 0;
    // Stalls: observed steps over kStall times their cell's settled cost (a backlog's excepted),
    // and the seconds those steps took beyond that cost, against the seconds of every observed
    // step: how much of a run the host's or the OS's stalls took.
    int64_t stall_steps = 0;
    double stall_seconds = 0, observed_seconds = 0;
    double prediction_error = 0;  // EMA of |predicted - measured| / measured tokens/s per sequence
    int64_t last_depth = 0, last_batch = 0;
    bool last_explored = false;
  };
  Snapshot snapshot() const;
  // Predicted tokens/s at `depth` in `bucket`, with suffix drafts or not: tokens per sequence per
  // step over the step's seconds per sequence, i.e. the batch's tokens/s; relative within the
  // bucket until its plain cost is measured.
  double predicted(int bucket, int64_t depth, int suffix = kNoSuffix) const;

 private:
  size_t index_of(int64_t depth) const;
  double ratio(int b, size_t d) const;
  double curve_ratio(int b, int64_t depth) const;  // 0: the curves cannot tell yet
  double forward_at(double rows) const;            // F; 0 when nothing is measured
  double draft_level_at(int b, bool* settled = nullptr) const;  // E; 0 when nothing is measured
  double reach(size_t j) const;
  double extra_at(const StepSample::Runs& r, int64_t depth) const;  // one round's, at another depth
  double rows_at(int64_t depth) const;                   // the drafter's verification rows per sequence at `depth`
  double graft_rows(int b, size_t d, int suffix) const;  // suffix nodes grafted per sequence
  double graft_cost(int b, size_t d, int suffix) const;  // predicted grafted rows' seconds per sequence
  double grafted_seconds(const StepSample& s) const;     // a measured step's grafted rows' share
  double prefill_seconds(const StepSample& s) const;     // ...and its prefill rows'
  double backlog_seconds(const StepSample& s, int b) const;  // ...and a cheap backlog's absorption
  int64_t explore_candidate(int b, int suffix) const;
  int64_t cheap_backlog(int64_t batch) const;  // pairs absorbed at about one drafter pass's cost
  double settle(double est, int64_t samples, double x) const;  // a cell's or E's estimate with x
  void learn_extra(const StepSample& s, int b);
  void learn_curves(const StepSample& s, bool backlog);

  SpecSettings full_;
  AdaptiveOptions opt_;
  std::vector<int64_t> depths_;
  std::array<std::vector<Cell>, kBuckets> cells_;
  // The depth each bucket runs at, per suffix class (index 0: no suffix drafts, 1 + class), and
  // the one its last step chose (Snapshot::current).
  std::array<std::array<int64_t, kSuffixClasses + 1>, kBuckets> current_{};
  std::array<int64_t, kBuckets> shown_{};
  std::array<double, kBuckets> typical_batch_{};    // EMA of the batch seen in each bucket
  std::array<double, kRowBuckets> fwd_rows_{}, fwd_secs_{};  // EMAs per row bucket (0: none)
  std::array<double, kBuckets> draft_level_{};      // E per batch bucket (0: none)
  std::array<int64_t, kBuckets> draft_level_n_{};   // the steps it rests on
  std::vector<double> num_, den_;  // decayed accepted_at / tried_at counts per position
  static constexpr int64_t kMeasureNewDrafter = 16;  // rounds measured before a new drafter is judged
  static constexpr double kPriorRounds = 2.0;        // pseudo-rounds of a position's acceptance prior
  static constexpr int64_t kCheapBacklog = 64;       // pairs a drafter pass absorbs at the cost of one
  static constexpr double kExtraWeight = 0.02;       // the newest grafting step's weight in extra(b, d, c)
  static constexpr double kStall = 2.0;              // a step over this x its cell's settled cost is a stall...
  static constexpr int64_t kStallRun = 3;            // ...unless this many come in a row (the cost changed)
  static constexpr double kOutlier = 3.0;            // such a step counts as at most this x the cell's cost
  int64_t new_drafter_rounds_ = kMeasureNewDrafter;  // rounds since the last drafter change
  int64_t steps_ = 0, explore_steps_ = 0, since_explore_ = 0, stall_steps_ = 0;
  double stall_seconds_ = 0, observed_seconds_ = 0;
  double error_ = 0, last_pred_ = 0;
  int64_t last_depth_ = 0, last_batch_ = 0;
  bool last_explored_ = false;
};

}  // namespace updraft
