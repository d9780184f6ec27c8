// Capture of drafter training data from finished rollouts: one policy forward over each whole
// sequence (prompt + response, batched like a prefill) yields the aux hidden states at every
// position and, at every response token, the top-k of the policy's next-token distribution
// (temperature 1, log-probabilities) it was drawn from. This is the offline route (SpecForge's
// prepare-hidden-states step); its cost is one prefill per rollout, a fraction of generating it.
#pragma once

#include <cstdint>
#include <vector>

#include "rollout/engine/request.h"
#include "rollout/policy_model.h"
#include "rollout/capture/sample.h"

namespace updraft {

struct Rollout {
  std::vector<int32_t> prompt, response;
};

struct CaptureOptions {
  int64_t teacher_k = 16;
  std::vector<int64_t> aux_layers;  // HF hidden_states indices; empty: the policy's default
  int64_t batch_tokens = 4096;      // tokens per forward
  DType aux_dtype = DType::BF16;    // how the aux states are kept (bf16: half the memory)
};

std::vector<TttSample> capture_samples(const PolicyModel& policy, const std::vector<Rollout>& rollouts,
                                       const CaptureOptions& opts, uint64_t policy_version = 0);

// The sample of a result the engine captured while generating (GenRequest::capture: aux states
// of every position, teacher top-k of every output token), labelled with its policy version, and
// the positions its speculation rounds were rejected at. REQUIRES: g.aux defined.
TttSample sample_of(const GenResult& g, uint64_t policy_version);

// A sample cut into records of at most max_tokens positions (>= 2; a sample that fits comes back
// whole). The first chunk keeps up to max_tokens / 2 positions of prompt context (all of it when
// shorter; older prompt positions are dropped) and the first response tokens; each later chunk
// starts at the position that produced its first token (its one-position "prompt", whose aux
// state the first pair needs). Every response token, its teacher row and the aux state of the
// position that produced it land in exactly one chunk, with its rejected mark; aux rows are copied.
std::vector<TttSample> split_sample(const TttSample& s, int64_t max_tokens);

}  // namespace updraft
