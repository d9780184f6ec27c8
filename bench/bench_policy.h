// The random Llama-style policy the decode and speculation benchmarks share: larger than the
// last-level cache (383 MiB bf16) so decode is memory-bound; --quick gives a 108 MiB one.
#pragma once

#include "rollout/policy_config.h"

namespace updraft::bench {

inline PolicyConfig bench_policy_config(bool quick) {
  PolicyConfig cfg;
  cfg.arch = PolicyArch::Llama;
  cfg.vocab_size = 32000;
  cfg.hidden_size = quick ? 512 : 1024;
  cfg.intermediate_size = quick ? 1408 : 2816;
  cfg.num_layers = quick ? 8 : 12;
  cfg.num_heads = quick ? 8 : 16;
  cfg.num_kv_heads = 4;
  cfg.head_dim = 64;
  cfg.max_position_embeddings = 4096;
  cfg.rope.theta = 500000;
  return cfg;
}

}  // namespace updraft::bench
