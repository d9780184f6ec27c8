// Training an EAGLE-3 drafter with TTT over a dataset (trainer/ttt_data.h), and the choices
// that come before it: the draft vocabulary and the draft's architecture.
//
// train_drafter(): AdamW (betas 0.9/0.95, no weight decay, as EAGLE), warmup + cosine schedule,
// global-norm clipping at 0.5, `samples_per_step` samples accumulated per step, samples drawn
// in a seeded shuffled order (epochs). Evaluates on the held-out set before training, every
// eval_every steps and at the end; progress lines go to `progress`. A step with a non-finite
// gradient is skipped and counted.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "rollout/policy_config.h"
#include "trainer/ttt_model.h"

namespace updraft::train {

// The draft vocabulary: the `draft_vocab` most frequent response tokens of the dataset (ties by
// lower id; ids never seen pad the list in id order). Returns the map and, in *coverage, the
// fraction of response tokens it covers.
VocabMap choose_draft_vocab(const TttDataset& data, int64_t draft_vocab, int64_t target_vocab, double* coverage);

// A one-layer draft shaped like one layer of the policy (hidden size, heads, MLP width, RoPE).
DraftConfig draft_config_for(const PolicyConfig& policy, int64_t draft_vocab);

struct DraftTrainOptions {
  TttOptions ttt;
  int64_t steps = 300;
  int64_t samples_per_step = 4;
  double lr = 1e-3;
  int64_t warmup_steps = 20;
  double clip = 0.5;
  int64_t eval_every = 100;  // 0: only before and after
  uint64_t seed = 1;
  std::function<void(const std::string& line)> progress;
};

struct DraftTrainResult {
  TttStats heldout_before, heldout_after;
  int64_t steps = 0, skipped = 0;
  double seconds = 0;
};

TttStats evaluate_drafter(const TrainableDraft& draft, const TttDataset& data, const TttOptions& o);
// The greedy chain acceptance length these accuracies imply, τ̂ = 1 + Σ_k Π_{j<=k} a_j (step k
// right with probability a_k given the earlier steps were): how the online trainer scores
// candidates and the worker compares drafters.
double estimated_chain_tau(const TttStats& s);

DraftTrainResult train_drafter(TrainableDraft& draft, const TttDataset& train, const TttDataset& heldout,
                               const DraftTrainOptions& o);

// "acc k0/k1/..": per-step accuracies in percent, for progress lines.
std::string accuracy_line(const TttStats& s);

}  // namespace updraft::train
