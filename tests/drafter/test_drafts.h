// Small random drafters for the drafter and speculation tests.
#pragma once

#include "drafter/random_draft.h"
#include "rollout/policy_model.h"

namespace updraft::testing_models {

// A draft config fitting `p` (same hidden size and vocabulary; draft vocabulary `vd`).
inline DraftConfig tiny_draft_config(const PolicyConfig& p, int64_t vd) {
  DraftConfig c;
  c.hidden_size = p.hidden_size;
  c.target_hidden_size = p.hidden_size;
  c.intermediate_size = 40;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.vocab_size = p.vocab_size;
  c.draft_vocab_size = vd;
  c.max_position_embeddings = 2048;
  c.rms_norm_eps = 1e-5f;
  c.rope.theta = 10000;
  c.dtype = DType::F32;
  return c;
}

// Drafters built while it lives use `w` (the process-wide setting, restored on exit, also when a
// build throws).
class DraftWeightsScope {
 public:
  explicit DraftWeightsScope(DraftWeights w) : saved_(draft_weights()) { set_draft_weights(w); }
  ~DraftWeightsScope() { set_draft_weights(saved_); }
  DraftWeightsScope(const DraftWeightsScope&) = delete;
  DraftWeightsScope& operator=(const DraftWeightsScope&) = delete;

 private:
  DraftWeights saved_;
};

}  // namespace updraft::testing_models
