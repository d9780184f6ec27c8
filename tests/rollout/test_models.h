// Small random policies shared by the rollout tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/nn/kv_cache.h"
#include "rollout/engine/request.h"
#include "rollout/policy_model.h"
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

// While it lives, new host KV caches start as NaN (UPDRAFT_KV_POISON, kv_cache.cc): host caches
// are not cleared, so a kernel that read an entry no forward, keep() or share_prefix() had
// written would give NaN logits.
class ScopedKvPoison {
 public:
  ScopedKvPoison() {
    const char* was = std::getenv("UPDRAFT_KV_POISON");
    had_ = was != nullptr;
    if (had_)
      was_ = was;
    setenv("UPDRAFT_KV_POISON", "1", 1);
  }
  ~ScopedKvPoison() {  // the environment as it was
    if (had_)
      setenv("UPDRAFT_KV_POISON", was_.c_str(), 1);
    else
      unsetenv("UPDRAFT_KV_POISON");
  }
  ScopedKvPoison(const ScopedKvPoison&) = delete;
  ScopedKvPoison& operator=(const ScopedKvPoison&) = delete;

 private:
  bool had_ = false;
  std::string was_;
};

// The policy's logits after feeding `tokens` to a fresh sequence (its last position).
inline std::vector<float> last_logits(const PolicyModel& m, const std::vector<int32_t>& tokens) {
  KvCache cache(m.kv_shape(), 16, (static_cast<int64_t>(tokens.size()) + 15) / 16 + 1);
  SeqKv kv;
  EXPECT_TRUE(cache.reserve(kv, static_cast<int64_t>(tokens.size())));
  std::vector<SeqStep> b(1);
  b[0].kv = &kv;
  b[0].tokens = tokens;
  b[0].logit_rows = {static_cast<int32_t>(tokens.size() - 1)};
  return m.forward(cache, b).logits.to_f32_vector();
}

// A request with its own seed.
inline GenRequest seeded_request(std::vector<int32_t> prompt, float temp, int64_t max_new, uint64_t seed) {
  GenRequest r;
  r.prompt = std::move(prompt);
  r.params.temperature = temp;
  r.params.max_new_tokens = max_new;
  r.params.has_seed = true;
  r.params.seed = seed;
  return r;
}

// Speculative results equal plain decoding's: tokens, finish reasons and logprobs.
inline void expect_same_outputs(const std::vector<GenResult>& spec, const std::vector<GenResult>& plain,
                                const std::string& where) {
  ASSERT_EQ(spec.size(), plain.size()) << where;
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_EQ(spec[i].tokens, plain[i].tokens) << "request " << i << ", " << where;
    ASSERT_EQ(spec[i].finish_reason, plain[i].finish_reason) << "request " << i << ", " << where;
    for (size_t j = 0; j < plain[i].logprobs.size(); ++j)
      ASSERT_NEAR(spec[i].logprobs[j], plain[i].logprobs[j], 1e-5) << "request " << i << " token " << j << ", " << where;
  }
}

// The same tokens and finish reasons, logprobs within `tol` (CUDA past 16 rows: cuBLAS's results
// depend on the product's shape, so a row's last bits differ between decoding and verification).
inline void expect_same_tokens(const std::vector<GenResult>& spec, const std::vector<GenResult>& plain, double tol,
                               const std::string& where) {
  ASSERT_EQ(spec.size(), plain.size()) << where;
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_EQ(spec[i].tokens, plain[i].tokens) << "request " << i << ", " << where;
    ASSERT_EQ(spec[i].finish_reason, plain[i].finish_reason) << "request " << i << ", " << where;
    ASSERT_EQ(spec[i].logprobs.size(), plain[i].logprobs.size()) << "request " << i << ", " << where;
    for (size_t j = 0; j < plain[i].logprobs.size(); ++j)
      ASSERT_NEAR(spec[i].logprobs[j], plain[i].logprobs[j], tol) << "request " << i << " token " << j << ", " << where;
  }
}

}  // namespace updraft::testing_models
