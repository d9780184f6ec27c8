// Small random policies shared by the rollout tests.
#pragma once

#include "rollout/random_policy.h"

namespace updraft::testing_models {

// A Qwen3-flavoured config: GQA, q/k norm, biases, non-default head_dim; 8 layers.
inline PolicyConfig tiny_config(PolicyArch arch = PolicyArch::Qwen3) {
  PolicyConfig c;
  c.arch = arch;
  c.vocab_size = 97;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 8;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 12;
  c.max_position_embeddings = 128;
  c.rms_norm_eps = 1e-5f;
  c.rope.theta = 10000;
  c.qk_norm = arch == PolicyArch::Qwen3;
  c.attention_bias = arch != PolicyArch::Llama;
  c.tie_word_embeddings = arch != PolicyArch::Llama;
  return c;
}

// The speculation tests' policy config: a 16-token vocabulary (acceptances frequent enough to
// exercise every commit path) and no end-of-text token.
inline PolicyConfig spec_config() {
  PolicyConfig c = tiny_config(PolicyArch::Llama);
  c.vocab_size = 16;
  c.eos_token_ids = {};
  return c;
}

}  // namespace updraft::testing_models
