// The online drafter trainer (`updraft train` without --once; the demo runs it in process):
// refreshes the serving drafter with TTT on the newest records of the buffer and publishes
// better versions for the workers to hot-swap (design.md §7, eagle3.md C).
//
// A round:
//  1. Window: the newest `window_records` records whose policy version is within the newest
//     `window_versions` versions in the store (RecordStore::latest). Records are split by a hash
//     of their prompt into training (1 − heldout_fraction) and held-out records, so a record's
//     role never changes between rounds and the responses to one prompt (a GRPO group, which
//     resemble each other) are never on both sides.
//  2. Training: `steps_per_round` AdamW steps (lr warmed up over the optimiser's first
//     warmup_steps; within each round constant, or falling from lr towards round_min_lr_ratio x
//     lr by round_decay over the round's steps; clipping) of `samples_per_step`
//     training records drawn with a seeded generator; the model and optimiser persist across
//     rounds (continuous training, no restarts; fresh_optimizer_each_round resets the moments).
//     The mix: each record is drawn from the newest policy version's training records with
//     probability newest_share (when there are any), else uniformly from the whole window
//     (newest_share 0, the default: uniform).
//  3. Evaluation: candidate and serving drafter on the held-out records, both bound to the
//     newest policy. The score is the chain acceptance length estimated from the per-step TTT
//     accuracies a_k: τ̂ = 1 + Σ_k Π_{j<=k} a_j (what a greedy chain of K drafts accepts when
//     step k is right with probability a_k given the earlier ones were).
//  4. Promotion: when τ̂(candidate) > (1 + promote_margin) τ̂(serving), the candidate is
//     published as the next drafter version (kernels/io/weight_version.h: temp directory,
//     fsync, rename, sha256 manifest) and announced through on_promote.
//  5. Checkpoint: model + optimiser + counters into <dir>/trainer (trainer/train_checkpoint.h),
//     from which a restarted trainer continues; the serving version is the newest published.
//
// The store may be the buffer's own (one process) or a secondary view of a buffer another
// process writes (`updraft train` beside `updraft buffer`): the loop then catches up with the
// primary every catch_up_ms.
//
// Triggers (checked every poll_ms while running, never while paused): a new policy version
// (notify_policy), at least min_new_records records or min_new_tokens response tokens stored
// since the last round (the store's consumer lag), or live acceptance (report_tau) below
// tau_floor. The trainer reads the store
// and publishes files; it never calls into the workers, so it cannot block rollouts. Pausing
// (set_paused) takes effect between two training steps: on a machine where the trainer shares
// cores with the workers, the caller pauses it while latency-critical generation runs.
// Thread safety: all public methods may be called from any thread; rounds run one at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/io/weight_version.h"
#include "messaging/quarantine.h"
#include "messaging/record_store.h"
#include "rollout/policy_model.h"
#include "trainer/adamw.h"
#include "trainer/draft_train.h"
#include "trainer/ttt_model.h"

namespace updraft::train {

struct OnlineTrainerOptions {
  std::string dir;  // published drafter versions; trainer checkpoint in <dir>/trainer
  uint64_t window_versions = 3;
  size_t window_records = 256;
  double heldout_fraction = 0.25;
  // Held-out records a round evaluates candidate and serving drafter on, the newest policy
  // version's first (0: all): evaluation is forward passes of both drafters, a cost that
  // short rounds pay as often as they train.
  size_t eval_records = 0;
  double newest_share = 0;  // share of training draws from the newest policy version (0: uniform)
  int64_t steps_per_round = 30;
  int64_t samples_per_step = 4;
  double lr = 3e-4;
  int64_t warmup_steps = 20;  // linear warmup over the optimiser's first steps (fresh Adam moments)
  // The lr within a round: constant, or from lr at its first step down towards round_min_lr_ratio
  // x lr at its last (linear, cosine; trainer/adamw.h's LrSchedule over steps_per_round steps), so
  // the candidate a round evaluates comes from small steps on its window.
  LrDecay round_decay = LrDecay::Constant;
  double round_min_lr_ratio = 0.1;  // in [0, 1]
  // Each round starts a fresh AdamW (zero moments, bias correction from t = 0) instead of carrying
  // the moments across rounds (the default); the lr warmup is not repeated: it runs over the
  // trainer's first optimiser steps either way.
  bool fresh_optimizer_each_round = false;
  double clip = 0.5;
  TttOptions ttt;
  bool train_on_new_policy = true;
  uint64_t min_new_records = 16;
  uint64_t min_new_tokens = 0;  // 0: off
  double tau_floor = 0;         // 0: off
  // Rounds on the window as it is when nothing new is due, after each round that new records or
  // a new policy started (0: wait for new records). For a trainer whose compute would idle
  // otherwise (its own device, or a CPU share lent to it); promotion still needs a better τ̂.
  int64_t idle_rounds = 0;
  double promote_margin = 0.01;
  int64_t poll_ms = 50;
  int64_t catch_up_ms = 1000;  // a secondary (read-only) store follows its primary this often
  uint64_t seed = 1;
  std::function<void(const WeightVersion&)> on_promote;
  std::function<void(const std::string&)> progress;
};

// The lr over a round's steps (step 0 = the round's first), before the optimiser's warmup factor.
LrScheduleOptions round_schedule(const OnlineTrainerOptions& o);

struct RoundReport {
  int64_t round = 0;
  std::string trigger;
  size_t train_records = 0, heldout_records = 0, evaluated_records = 0;
  uint64_t min_policy_version = 0, max_policy_version = 0, trained_on_policy = 0;
  double loss = 0;                          // mean training loss over the round's steps
  int64_t samples = 0, samples_newest = 0;  // training draws, and those of the newest policy version
  double candidate_tau = 0, serving_tau = 0;
  std::vector<double> candidate_acc, serving_acc;
  bool promoted = false;
  // The serving drafter's evaluation was the previous round's: the same drafter, policy and
  // evaluation records (idle rounds on an unchanged window pay for the candidate's alone).
  bool serving_eval_reused = false;
  // Records of the window the trainer could not use (inconsistent with the policy, non-finite):
  // skipped and quarantined this round, and quarantined earlier (skipped without a look).
  int64_t quarantined = 0, skipped_quarantined = 0;
  // Non-empty: the candidate held a NaN or infinity (named here); it was not published and
  // training restarted from the serving drafter.
  std::string refused;
  uint64_t serving_version = 0;  // after the round
  double seconds = 0;
};

class OnlineTrainer {
 public:
  // Starts from `initial` (published or trusted, version initial_version) unless <dir>/trainer
  // holds a checkpoint, which is resumed (with the newest published version as serving).
  OnlineTrainer(OnlineTrainerOptions options, std::shared_ptr<messaging::RecordStore> store,
                std::shared_ptr<const PolicyModel> policy, uint64_t policy_version, const DraftModel& initial,
                uint64_t initial_version);
  ~OnlineTrainer();
  OnlineTrainer(const OnlineTrainer&) = delete;
  OnlineTrainer& operator=(const OnlineTrainer&) = delete;

  void start();  // the trigger loop on its own thread
  void stop();   // finishes the running round, joins

  // One round now, on the caller's thread (tests, and the loop itself).
  RoundReport run_round(const std::string& trigger);

  void notify_policy(std::shared_ptr<const PolicyModel> policy, uint64_t version);
  void report_tau(double tau);
  // Pausing returns once the trainer has yielded: at once when no round runs, else at the
  // round's next step boundary (or before its evaluation). Never call it from a round's thread.
  void set_paused(bool paused);
  // Waits until no round is running (returns at once when idle).
  void wait_idle();
  // No round running and none due: what a caller lending the trainer CPU time waits for.
  bool idle() const;

  std::vector<RoundReport> reports() const;
  uint64_t serving_version() const;
  bool resumed() const { return resumed_; }
  // Records quarantined so far (kept across restarts in <dir>/quarantine.tsv,
  // messaging/quarantine.h).
  size_t quarantined() const { return quarantine_->size(); }
  const std::string& quarantine_path() const { return quarantine_->path(); }

 private:
  static AdamWOptions adamw_options();  // the trainer's optimiser: beta2 0.95, no weight decay
  void loop();
  std::string due_trigger() const;  // REQUIRES: mu_ held; "" when nothing is due
  bool yield_while_paused();        // a round's pause point; false when stopping
  // A round's parts (online_round.cc).
  // Returns the newest policy version in the window; eval_id: a fingerprint of the records kept
  // for evaluation (their keys, in order).
  uint64_t load_window(const PolicyModel& policy, uint64_t policy_version, RoundReport& rep,
                       std::vector<TttSample>& train, std::vector<TttSample>& heldout, uint64_t& eval_id);
  void train_steps(const std::vector<TttSample>& train, uint64_t max_v, RoundReport& rep);
  void evaluate_round(const std::vector<TttSample>& samples, uint64_t policy_version, uint64_t eval_id,
                      RoundReport& rep);
  void promote_if_better(const PolicyModel& policy, uint64_t policy_version, RoundReport& rep);

  OnlineTrainerOptions options_;
  std::shared_ptr<messaging::RecordStore> store_;
  std::unique_ptr<TrainableDraft> draft_, serving_;
  std::unique_ptr<AdamW> opt_;
  std::unique_ptr<messaging::QuarantineLog> quarantine_;
  std::mt19937_64 rng_;
  bool resumed_ = false;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<const PolicyModel> policy_;
  uint64_t policy_version_ = 0, bound_policy_version_ = 0, trained_policy_version_ = 0;
  double live_tau_ = 0;
  bool paused_ = false, parked_ = false, running_round_ = false, stop_ = false;
  int64_t rounds_ = 0;
  int64_t idle_rounds_done_ = 0;  // idle rounds since the last round with something new
  int64_t optimizer_steps_ = 0;   // this process's optimiser steps (the warmup's clock with fresh optimisers)
  uint64_t serving_version_ = 0;
  // The last evaluation of the serving drafter (round thread only) and what it depended on.
  struct ServingEval {
    uint64_t serving_version = 0, policy_version = 0, eval_id = 0;
    TttStats stats;
    bool valid = false;
  } serving_eval_;
  std::vector<RoundReport> reports_;
  std::mutex round_mu_;  // one round at a time
  std::thread thread_;
};

}  // namespace updraft::train
