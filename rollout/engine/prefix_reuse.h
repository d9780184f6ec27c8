// Prefix reuse: a sequence admitted with a context that begins like one already in the caches
// takes that prefix over instead of prefilling it. GRPO's n samples of one prompt prefill it once;
// a chat's next turn skips the turns before it.
//
// Donors. A running sequence (siblings admitted together: the scheduler holds a follower back
// while its leader prefills, see scheduler.h), or a finished one the scheduler kept for the
// purpose (keep_as_donor: its blocks stay reserved until a new sequence needs them).
//
// What is taken, for a common prefix of L tokens (the new sequence's prefill context against the
// donor's context): policy KV entries [0, m) with m <= L, m <= the donor's entries and
// m <= prefill target - 1, so
// that the new sequence always computes at least its last context row itself (its own logits,
// its own first token); the same rows of captured aux states when it captures (the donor must
// have captured them); for a speculating sequence, the drafter's pairs: draft cache entries
// [0, d) (pair p holds token p + 1, so d <= L - 1) and the pairs [d, m) still pending in the donor
// (their aux rows, with the new sequence's own next tokens). A request that asks for input
// logprobs takes nothing past the first position it wants one for.
//
// Memory. The taken entries' whole blocks are shared with the donor (KvCache::share_prefix: a
// block is free once no sequence holds it), the entries of a last partial block copied into a
// block of the sequence's own; no sequence ever writes below its length, so a shared block is
// never written and nothing needs copy-on-write. n siblings of a P-token prompt hold its whole
// blocks once.
//
// Exactness. The CPU kernels compute every row with the same instructions whatever the rows
// beside it (kernels/README.md), so a taken entry is bitwise the entry the sequence would have
// computed: outputs, logprobs and records are identical with reuse on or off (tests/rollout/
// prefix_reuse_test.cc). Donors are dropped whenever the policy or the drafter changes.
#pragma once

#include <cstdint>
#include <memory>

#include "rollout/engine/sequence.h"

namespace updraft {

struct PrefixTake {
  int64_t rows = 0;        // policy KV entries [0, rows), and capture aux rows when capturing
  int64_t draft_rows = 0;  // draft cache pairs [0, draft_rows); pairs [draft_rows, rows) come pending
};

// Length of the common prefix of s's prefill context [0, s.prefill_target()) and the donor's
// context positions [0, donor_len).
int64_t common_prefix(const Seq& s, const Seq& donor, int64_t donor_len);
// Of a common prefix of `common` tokens, what s's own limits let it take: all but its last
// context row, nothing from the first position it wants an input logprob for.
int64_t own_limit(const Seq& s, int64_t common);
// Whether s (speculating or not: s_spec) can take anything from the donor: captured rows only
// from one that captured, pairs only from one that speculates.
bool can_take_from(const Seq& s, bool s_spec, const Seq& donor);
// What s may take from the donor (both between steps; s not yet holding any entry).
PrefixTake plan_take(const Seq& s, const Seq& donor);
// Takes it: whole blocks shared, a partial one copied. REQUIRES: s holds no block in either cache
// and has nothing pending, and each cache has a free block for the partial block's copy (the
// caller reserves the rest of s's blocks after this).
void take_prefix(Seq& s, const Seq& donor, const PrefixTake& t, KvCache& cache, KvCache* draft_cache);
// A finished sequence's cached state as a donor: context tokens, KV blocks (trailing unused ones
// given back), its pending pairs (copied out of the steps' tensors, which they would keep alive)
// and its captured aux rows (as bf16, what the records hold: a taker's records are the same).
// `finished` keeps its result and loses its blocks.
std::unique_ptr<Seq> keep_as_donor(Seq& finished, KvCache& cache, KvCache* draft_cache);

}  // namespace updraft
