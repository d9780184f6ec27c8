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
// Draft logits are used raw (no temperature): they only rank candidates.
#pragma once

#include <vector>

#include "drafter/draft_model.h"
#include "drafter/draft_tree.h"

namespace updraft {

struct ProposeSeq {
  SeqKv* kv = nullptr;
  int32_t root = 0;
};

std::vector<DraftTree> propose(const DraftModel& model, KvCache& cache, const std::vector<ProposeSeq>& seqs,
                               const Tensor& h_last, const Tensor& logits, const SpecSettings& settings);

// Top-k of log_softmax(logits) per row, ids mapped to target ids: tokens/logprobs [R * k].
void top_draft_tokens(const DraftModel& model, const Tensor& logits, int64_t k, std::vector<int32_t>& tokens,
                      std::vector<float>& logprobs);

}  // namespace updraft
