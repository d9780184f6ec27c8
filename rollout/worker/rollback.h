// Rollback watch: after a drafter swap, does the new drafter accept at least about as well as the
// one it replaced? (design.md §9: "watch live acceptance after the swap and roll back if it falls")
//
// The serving drafter's most recent rounds (at least 4 x `rounds` of them, when it has served that
// many) form the bar for its successor. After a swap the new drafter's rounds are collected until
// there are `rounds`; its acceptance is then compared with the bar, both as estimated acceptance
// lengths (SpecStats::tau_at: rounds of any depth count, so adaptive speculation's shorter chains
// do not bias it) over the positions both tried in at least a quarter of `rounds` rounds: a new
// drafter kept at depth 1 is compared on its first position, not charged with deeper positions it
// never tried (a bar with fewer rounds than that compares nothing, and the new drafter stays). At
// or above (1 - margin) x the bar's, the new drafter stays; at a depth short of the full one the
// margin applies to the accepted drafts (tau - 1), as 1 + a1 alone would hide a large drop. Below,
// the alarm is confirmed on the same requests when a scorer and recent captured completions are at
// hand: both drafters' acceptance estimated teacher-forced on the same completions (a change of
// prompts moves live acceptance without any fault of the drafter), and that decides. The live bar
// is the previous drafter's recent rounds, so a drafter swapped in right after unusually hard
// requests meets a low bar; the trainer promotes only candidates that beat its serving drafter on
// held-out records, which covers that gap; confirming every swap would cost a decode of the
// completions.
//
// The scorer is injected (the worker does not depend on the trainer): app/ gives one that runs
// the trainer's teacher-forced evaluation.
//
// Thread safety: none; the worker's engine thread owns it. The worker runs a confirmation on a
// thread of its own (rollout/worker/confirmation.h) and hands its estimates back.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "drafter/draft_model.h"
#include "rollout/capture/sample.h"
#include "rollout/policy_model.h"
#include "rollout/spec/spec_stats.h"

namespace updraft {

// Estimated acceptance length of `drafter` at chain depth `depth` on `samples`, teacher-forced.
using DrafterScorer = std::function<double(const DraftModel& drafter, const PolicyModel& policy,
                                           const std::vector<TttSample>& samples, int64_t depth)>;

struct RollbackOptions {
  double margin = 0.2;
  int64_t rounds = 64;
  int64_t depth = 4;           // the full speculation depth (tau_at)
  // Recent captured completions kept for a confirmation: both drafters teacher-forced over them
  // (16 cost 0.8 s on one thread of the 2-core Xeon, 32 1.4 s).
  size_t max_samples = 16;
};

class RollbackWatch {
 public:
  // kConfirm: the live comparison raised an alarm that recent completions can confirm.
  enum class Verdict { kWatching, kKeep, kRollBack, kConfirm };

  RollbackWatch(const RollbackOptions& options, DrafterScorer scorer);

  // A new drafter serves from now: its rounds are watched against the recent ones of its predecessor.
  void swapped();
  // The serving drafter's rounds of one step.
  void add_rounds(const SpecStats& step);
  // Whether alarms are confirmed on recent completions (a scorer was given): add_sample wants them.
  bool confirms() const { return static_cast<bool>(scorer_); }
  const DrafterScorer& scorer() const { return scorer_; }
  int64_t depth() const { return opt_.depth; }
  // A recent captured completion of the serving policy (kept for confirmations).
  void add_sample(TttSample s);
  void policy_changed() { samples_.clear(); }
  bool ready() const { return watching_ && watched_.rounds >= opt_.rounds; }

  // When ready(), in two parts so that a confirmation can run elsewhere: judge_live() ends the
  // watch with kKeep or kRollBack, or kConfirm; then the scorer's estimates for the new and the
  // previous drafter on confirmation_samples() go to judge_confirmed(), which decides.
  Verdict judge_live();
  std::vector<TttSample> confirmation_samples() const;
  Verdict judge_confirmed(double tau_new, double tau_old, size_t samples, double seconds);
  // After kConfirm, when the confirmation could not run: the live comparison decides.
  Verdict judge_unconfirmed() { return conclude(live_new_, live_old_, live_depth_, false); }
  // Ends a watch without a verdict (there is no previous drafter to compare with).
  void end_watch() { watching_ = false; }
  // Both parts on the calling thread: the verdict on `candidate` against `previous` (both serving
  // `policy`), never kConfirm.
  Verdict decide(const DraftModel& candidate, const DraftModel& previous, const PolicyModel& policy);

  int64_t confirmations() const { return confirmations_; }
  double last_new_tau() const { return last_new_; }
  double last_old_tau() const { return last_old_; }

 private:
  double line(double bar, int64_t depth) const;  // the least tau that keeps a new drafter
  Verdict conclude(double tau_new, double tau_old, int64_t depth, bool same);

  RollbackOptions opt_;
  DrafterScorer scorer_;
  std::deque<SpecStats> recent_;  // per step, the serving drafter's latest rounds
  SpecStats recent_sum_, bar_, watched_;
  bool watching_ = false;
  std::deque<TttSample> samples_;
  int64_t confirmations_ = 0, live_depth_ = 0;
  double last_new_ = 0, last_old_ = 0, live_new_ = 0, live_old_ = 0;
};

}  // namespace updraft
