// Logit processors: the per-request changes to the policy's logits that come before sampling
// (SGLang's and OpenAI's sampling parameters), applied on the host to every logit row of a step.
//
// A row's context is the prompt, the output so far and, for a row of a draft tree, the tokens on
// the tree path from the root to that row's node. Plain decoding's single row and a verified
// tree's row at the same context therefore get the same processed logits, which is what keeps
// speculation lossless with processors on: greedy output stays token-identical, and sampled
// output follows the same (processed) distribution.
//
// In order, for a row of request r with context c (output part o):
//  1. repetition_penalty rho != 1: every token in c (prompt and output): logit / rho when the
//     logit is > 0, logit * rho otherwise (CTRL; as SGLang and vLLM).
//  2. frequency_penalty f, presence_penalty q: logit -= f * count_o(t) + q * [count_o(t) > 0]
//     (output tokens only, as OpenAI).
//  3. min_new_tokens m: while fewer than m tokens are out, the stop tokens (stop_token_ids, and
//     the model's eos ids unless ignore_eos) are masked (-inf).
//  4. min_p p > 0 (sampled requests): tokens whose probability under softmax(logits / T) is
//     below p times the largest are masked (logit < max + T ln p). top_k and top_p then act on
//     what remains (ops::sampling_probs).
// Masked logits are -infinity. A request with every processor off is left untouched (bitwise).
#pragma once

#include <cstdint>
#include <vector>

#include "drafter/draft_tree.h"
#include "rollout/engine/request.h"

namespace updraft {

struct Seq;

bool needs_logit_processing(const SamplingParams& p);

// logits: host f32 [tree.size(), V], row i for tree node i (a single root for plain decoding).
void process_logits(const Seq& s, const DraftTree& tree, float* logits, int64_t V, const std::vector<int32_t>& eos);

}  // namespace updraft
