// Verification of a draft tree against the policy (eagle3.md D.4, D.5): which drafts to accept
// and which token the policy adds after them (the bonus), so that the emitted tokens follow the
// policy's sampling distribution exactly.
//
// Greedy (temperature 0): from the root, repeatedly take the policy's argmax at the current node
// (lowest id on ties, as plain decoding) and move to the child holding that token; when no child
// does, the argmax is the bonus. Emitted tokens = accepted drafts + bonus, each with the logprob
// log_softmax(logits) of the node before it.
//
// Sampled: p(.|node) is the policy's sampling distribution (temperature, top-k, top-p;
// ops::sampling_probs). At each node the children are tried in draft-rank order: child c is
// accepted iff u < P[c] for a fresh uniform u, where P starts as p(.|node); a rejected child's
// token is removed from P and P renormalised (sampling without replacement). If a child is
// accepted, verification moves on to it with a fresh P = p(.|child); otherwise the bonus is drawn
// from the residual P. Each emitted token is then distributed exactly as p(.|node), because the
// drafts are deterministic proposals. Logprobs are log p(token|node), the same quantity plain
// decoding reports.
//
// Randomness is counter-based per request seed and output index i (0-based count of tokens the
// request has emitted): the bonus draw uses uniform01(seed, i), the very number plain decoding
// uses for token i, so a round with no drafts tried samples what plain decoding would; the
// acceptance coins use a separate stream.
//
// AcceptRule::NoResidual is deliberately wrong (the bonus is drawn from the full p, not the
// residual): it exists only as the negative control that shows the losslessness test can fail.
#pragma once

#include <cstdint>
#include <vector>

#include "drafter/draft_tree.h"

namespace updraft {

enum class AcceptRule { Exact, NoResidual };

struct Verdict {
  std::vector<int32_t> nodes;   // accepted tree nodes after the root, root to leaf
  std::vector<int32_t> tokens;  // emitted: the accepted drafts, then the bonus
  std::vector<float> logprobs;  // one per emitted token
};

// logits and logp (= log_softmax(logits)) are host f32 [tree.size(), V], row i at node i.
Verdict verify_greedy(const DraftTree& tree, const float* logits, const float* logp, int64_t V);

// probs: host f32 [tree.size(), V], row i = p(.|node i), each row summing to 1.
Verdict verify_sampled(const DraftTree& tree, const float* probs, int64_t V, uint64_t seed, uint64_t first_index,
                       AcceptRule rule = AcceptRule::Exact);

// The acceptance coin for the j-th child tried before output token i.
float accept_coin(uint64_t seed, uint64_t i, uint64_t j);

}  // namespace updraft
