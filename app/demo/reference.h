// The reference drafters of the demo's final comparison (app/demo/demo.h), both trained offline
// on the final policy's own rollouts of the last curriculum stage and measured beside the online
// drafter on the same held-out requests:
//  - quick: the initial drafter trained with the online trainer's recipe for as many optimiser
//    steps as it took over the whole run (at least offline_steps) on offline_prompts rollouts:
//    the same start and budget in draws as the online drafter, data from exactly the
//    distribution measured.
//  - strong: what a well-trained drafter reaches on the final policy. It starts from the shipped
//    drafter trained to convergence on the domain mix (models/small-eagle3, 2,400 steps on 4,096
//    rollouts: the recipe in models/README.md) where the policy is the built-in one, else from the
//    initial drafter, and continues with that recipe's optimiser (lr 1e-3 peak, cosine to 0.1,
//    K = 7 TTT steps) for strong_steps steps on strong_prompts rollouts of the final policy. The
//    better of its start and its end on held-out rollouts (τ̂ of a greedy chain) is kept.
//    Cached under cache_dir by the final policy's sha256 and the recipe, so a rerun that ends on
//    the same policy (the policy trajectory is reproducible: demo.h) reuses it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drafter/draft_model.h"
#include "rollout/engine/engine.h"
#include "rollout/policy_model.h"
#include "rollout/tokenizer.h"
#include "trainer/corpus.h"
#include "trainer/draft_train.h"
#include "trainer/ttt_data.h"

namespace updraft::demo {

struct ReferenceInputs {
  const PolicyModel* policy = nullptr;  // the final policy
  std::string policy_dir;               // its directory (model.safetensors is hashed for the cache)
  const Tokenizer* tok = nullptr;
  corpus::Mix mix;       // the last stage's prompts (the corpus's training split)
  EngineOptions engine;  // for the rollouts (plain, batched)
  int64_t max_new_tokens = 64;
  uint64_t seed = 1;
};

struct ReferenceDrafter {
  std::shared_ptr<const DraftModel> drafter;
  std::string start;  // what it started from
  int64_t rollouts = 0, steps = 0;
  double heldout_tau_hat = 0, heldout_tau_hat_before = 0;  // estimated greedy-chain τ on held-out rollouts
  double seconds = 0;
  bool cached = false;
};

// The final policy's rollouts of `prompts` training prompts of the last stage (seed offset
// `offset`), captured as TTT samples for a drafter reading `aux_layers`; a tenth held out.
struct ReferenceData {
  std::vector<TttSample> train, held;
  int64_t rollouts = 0;
};
ReferenceData reference_rollouts(const ReferenceInputs& in, const std::vector<int64_t>& aux_layers, int64_t prompts,
                                 uint64_t offset);

// `recipe`: the online trainer's (TTT depth, records per step, learning rate), for `steps`
// optimiser steps: as many draws as the online trainer made.
ReferenceDrafter train_quick_reference(const ReferenceInputs& in, const ReferenceData& data, const DraftModel& initial,
                                       int64_t steps, const train::DraftTrainOptions& recipe);

struct StrongRecipe {
  int64_t prompts = 1024, steps = 200;
  double lr = 1e-3;
  int64_t ttt_steps = 7;
  std::string cache_dir;  // empty: no cache
};

// `start_dir`: the drafter it continues (the converged shipped one, or the initial drafter).
ReferenceDrafter train_strong_reference(const ReferenceInputs& in, const std::string& start_dir,
                                        const StrongRecipe& recipe);

}  // namespace updraft::demo
