// A TttSample: one rollout as the EAGLE-3 drafter trains on it. Workers capture it while
// generating (rollout/capture/step_capture.h) or from finished rollouts (capture.h), turn it into
// buffer records (record_convert.h); the trainer reads it back (trainer/ttt_data.h).
//
// Tokens x_0 .. x_{n-1} (prompt then response), the policy's aux hidden states at every position
// ([n, 3*Ht]: the residual stream entering the draft's aux layers, [low | mid | high]), and the
// teacher: for each response token x_j (j >= prompt_length) the policy's top-k next-token
// log-probabilities at position j-1, the distribution x_j was drawn from (row j - prompt_length of
// teacher_ids / teacher_logprobs, k entries each, any order). teacher_k == 0 means no captured
// distribution: the sampled token itself is the (hard) teacher.
//
// Why top-k log-probabilities are the default teacher (design.md §9 allows either): they are
// what the worker already computes when it samples, they are self-contained (the alternative,
// the final hidden state, must be pushed through the lm_head of exactly the policy version that
// produced it, and RL replaces that lm_head every step), and at k = 16 they carry nearly all of
// the mass of a low-entropy policy while costing 8·k bytes per token instead of 2·Ht.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/core/tensor.h"

namespace updraft {

struct TttSample {
  std::vector<int32_t> tokens;
  int64_t prompt_length = 0;
  Tensor aux;  // [n, 3*Ht] f32 / bf16 / f16, CPU
  int64_t teacher_k = 0;
  std::vector<int32_t> teacher_ids;     // [n - prompt_length, teacher_k]
  std::vector<float> teacher_logprobs;  // same shape
  uint64_t policy_version = 0;
  // Response indices (ascending) where the serving speculation was rejected: the policy chose the
  // token after turning down every draft offered there (SpecRound::rejected_at). Empty when the
  // sample was generated without speculation or by a writer that did not mark them.
  std::vector<int32_t> rejected;

  int64_t length() const { return static_cast<int64_t>(tokens.size()); }
  int64_t response_length() const { return length() - prompt_length; }
  // Checks the shapes against each other and the policy's sizes, ids in the vocabulary, aux
  // and teacher logprobs finite, rejected ascending response indices (Error naming `where`).
  void validate(int64_t aux_width, int64_t vocab, const char* where) const;
};

}  // namespace updraft
