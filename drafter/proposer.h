// Batched draft proposals: builds one draft tree (drafter/draft_tree.h) per sequence, running
// the draft model level by level for all sequences at once.
//
// Input per sequence: its draft KV state (kv->length = L committed pairs, so the pending root
// token x_L sits at sequence position L) and the root token; plus, for all sequences, the draft
// state of each one's last committed pair (h_last [B, H], the pre-norm output) and its draft
// logits ([B, Vd] f32). Level d >= 2 feeds the level d-1 frontier nodes (token, parent's output
// state) at RoPE position L + d - 2 — the pair (h, x) sits at the position of h's token, as in
// training — and each node attends to the committed entries, its tree ancestors and itself.
//
// The frontier entries go into the draft cache after the committed ones and are dropped before
// propose() returns (kv->length is L again): speculative entries never stay in the draft cache.
// The caller must have reserved L + settings.scratch_entries() draft entries per sequence.
// Draft logits are used raw (no temperature) where they only rank candidates: trees, and chains of
// greedy sequences. A chain of a sequence that samples (temperature > 0) draws each draft from q:
// the drafter's distribution at that temperature over its kSampledSupport likeliest tokens,
// filtered by the sequence's top_k and top_p and renormalised (what the policy's distribution
// goes through), with the coin draft_coin(seed, index + level - 1); q is recorded in the tree
// (DraftTree::q_row), and verification accepts a draft x with min(1, p(x) / q(x)) instead of p(x).
// That accepts more often where q is close to p (the built-in pair at temperature 1, first
// draft: 0.92 against 0.88 for the drafter's top token).
#pragma once

#include <vector>

#include "drafter/draft_model.h"
#include "drafter/draft_tree.h"

namespace updraft {

struct ProposeSeq {
  SeqKv* kv = nullptr;
  int32_t root = 0;
  float temperature = 0;  // > 0: a chain's drafts are drawn (above), filtered by top_k and top_p too
  int32_t top_k = 0;      // 0: off
  float top_p = 1;        // 1: off
  uint64_t seed = 0;      // the request's seed
  uint64_t index = 0;     // output index of the token after the root (the first draft's)
};

// The uniform a sampling chain draws its draft for output index i with: a stream of its own,
// apart from the verifier's acceptance coins and bonus draws.
float draft_coin(uint64_t seed, uint64_t i);

std::vector<DraftTree> propose(const DraftModel& model, KvCache& cache, const std::vector<ProposeSeq>& seqs,
                               const Tensor& h_last, const Tensor& logits, const SpecSettings& settings);

// Top-k of log_softmax(logits) per row, ids mapped to target ids: tokens/logprobs [R * k].
void top_draft_tokens(const DraftModel& model, const Tensor& logits, int64_t k, std::vector<int32_t>& tokens,
                      std::vector<float>& logprobs);

}  // namespace updraft
