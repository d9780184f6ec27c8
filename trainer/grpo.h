// GRPO (Shao et al., DeepSeekMath 2024): the policy-gradient update of the demo's RL loop.
//
// A batch is G sampled responses for each of several prompts, each with a scalar reward. The
// advantage of a response is its reward minus its group's mean, divided by the group's standard
// deviation (population; + 1e-6) when normalize_std (Dr. GRPO drops that division). Groups whose
// rewards are all equal carry no signal and are skipped. One on-policy update per batch:
// the responses were sampled from the current weights at temperature 1, so the importance ratio
// is 1 and the clipped surrogate's gradient is A · ∇log π(token); no KL term (DAPO drops it
// too). The loss is token-level (DAPO): Σ_i Σ_t A_i · CE_it / (response tokens in the batch), so
// long responses are not down-weighted per token.
//
// Micro-batches: sequences of similar length are packed (sorted by length) so that
// batch × padded length stays under micro_batch_tokens; gradients accumulate over them, then
// one clipped AdamW step. Thread safety: none (one training thread).
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/adamw.h"
#include "trainer/llama_train.h"

namespace updraft::train {

struct GrpoSample {
  std::vector<int32_t> prompt, response;
  double reward = 0;
  int64_t group = 0;  // samples with equal group share a prompt
};

struct GrpoOptions {
  bool normalize_std = true;
  double max_grad_norm = 1.0;
  int64_t micro_batch_tokens = 4096;
};

struct GrpoStats {
  double mean_reward = 0;
  double mean_nll = 0;   // mean −log π of the sampled response tokens (before the update)
  double grad_norm = 0;  // before clipping
  int64_t tokens = 0;    // response tokens in the batch
  int64_t active_groups = 0, groups = 0;
  bool skipped = false;  // non-finite gradient: no update
};

// Per-sample advantages (same order as samples).
std::vector<double> grpo_advantages(const std::vector<GrpoSample>& samples, bool normalize_std);

// One GRPO update of `policy` with `opt` at learning rate lr.
GrpoStats grpo_step(TrainableLlama& policy, AdamW& opt, const std::vector<GrpoSample>& samples, double lr,
                    const GrpoOptions& options = {});

}  // namespace updraft::train
