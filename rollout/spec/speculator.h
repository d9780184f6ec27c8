// The drafter's side of a step (rollout/engine/engine.h): the pairs a step commits are set aside
// for the drafter (keep_pairs); at the start of the next step the drafter absorbs them and
// proposes the trees that step verifies (draft_step). A new drafter gets every sequence's pairs
// recomputed from the policy (recompute_pairs). The pair invariant is in sequence.h.
//
// Depths. Adaptive speculation picks a depth per step (rollout/spec/adaptive.h): 0 is plain
// decoding, d in 1..steps runs a chain of d drafts when the full settings are a chain; a tree
// runs at its full settings or not at all.
#pragma once

#include <cstdint>
#include <vector>

#include "drafter/draft_model.h"
#include "rollout/engine/sequence.h"
#include "rollout/policy_model.h"

namespace updraft {

// Settings of `depth` under the full settings (depth in allowed_depths(full), > 0).
SpecSettings settings_at_depth(const SpecSettings& full, int64_t depth);
// 0..steps for a chain, {0, steps} for a tree.
std::vector<int64_t> allowed_depths(const SpecSettings& full);

// Sets aside, for each sequence, the aux rows `rows[i]` of `aux` ([T, A, H] or [T, A*H], the
// step's forward) as pending pairs with tokens `tokens[i]` (one per row).
void keep_pairs(const std::vector<Seq*>& seqs, const std::vector<std::vector<int32_t>>& rows,
                const std::vector<std::vector<int32_t>>& tokens, const Tensor& aux);

// Every sequence of `proposers` and `absorb` absorbs its pending pairs into the draft cache; each
// of `proposers` then gets a tree for `settings` in seq->tree (root: its pending token). Returns the
// number of pairs absorbed. REQUIRES: draft blocks reserved for kv.length + scratch entries; each
// sequence of `proposers` has at least one pending pair.
// s's pending aux rows, its chunks in order, into rows [row, row + s.pending()) of dst.
void copy_pending(const Seq& s, Tensor& dst, int64_t row);

int64_t draft_step(const DraftModel& drafter, KvCache& cache, const std::vector<Seq*>& proposers,
                   const std::vector<Seq*>& absorb, const SpecSettings& settings);

// Replaces s's pending pairs by all of [0, kv.length): the policy's aux states of the committed
// tokens from a forward into `scratch` (chunk tokens at a time; s's own cache is not touched).
void recompute_pairs(const PolicyModel& policy, Seq& s, KvCache& scratch, const std::vector<int64_t>& aux_layers,
                     int64_t chunk);

}  // namespace updraft
