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
// ops::sampling_probs). At each node the children are tried in draft-rank order, each with its
// own draft distribution q (SpecInfer's multi-candidate rule): child c with token x is accepted
// iff u < P(x) / q(x) for a fresh uniform u, where P starts as p(.|node); a rejected child leaves
// P = norm(max(0, P - q)). A deterministic proposal is a point mass (q(x) = 1: accepted with P(x),
// its token removed from P: sampling without replacement); a sampled draft (DraftTree::q_row: a
// chain's drafter at temperature > 0) carries its q, and is its parent's first child. If a child
// is accepted, verification moves on to it with a fresh P = p(.|child); otherwise the bonus is
// drawn from the residual P. Each emitted token is then distributed exactly as p(.|node).
// Logprobs are log p(token|node), the same quantity plain decoding reports.
//
// Randomness is counter-based per request seed and output index i (0-based count of tokens the
// request has emitted): the bonus draw uses uniform01(seed, i), the very number plain decoding
// uses for token i, so a round with no drafts tried samples what plain decoding would; the
// acceptance coins use a separate stream.
//
// AcceptRule::NoResidual is deliberately wrong (the bonus is drawn from the full p, not the
// residual), and so is AcceptRule::PointResidual (a sampled draft accepted with min(1, P(x) / q(x))
// but rejected as a point mass is, x alone removed from P): they exist only as the negative
// controls that show the losslessness tests can fail. (Verifying a sampled draft entirely as a
// point mass would be lossless, as for any proposal, only less often accepted.)
#pragma once

#include <cstdint>
#include <vector>

#include "drafter/draft_tree.h"

namespace updraft {

enum class AcceptRule { Exact, NoResidual, PointResidual };

struct Verdict {
  std::vector<int32_t> nodes;   // accepted tree nodes after the root, root to leaf
  std::vector<int32_t> tokens;  // emitted: the accepted drafts, then the bonus
  std::vector<float> logprobs;  // one per emitted token
  // Sampled verification, at every node visited whose first child carries the drafter's q
  // (DraftTree::has_q): the sums of sum_x min(p(x), q(x)) (a draw's chance of acceptance) and of
  // p(argmax q) (the top token's), and how many such nodes (rollout/spec/draft_sampling.h).
  double q_overlap = 0, q_top = 0;
  int32_t q_nodes = 0;
};

// logits and logp (= log_softmax(logits)) are host f32 [tree.size(), V], row i at node i.
Verdict verify_greedy(const DraftTree& tree, const float* logits, const float* logp, int64_t V);

// probs: host f32 [tree.size(), V], row i = p(.|node i), each row summing to 1.
Verdict verify_sampled(const DraftTree& tree, const float* probs, int64_t V, uint64_t seed, uint64_t first_index,
                       AcceptRule rule = AcceptRule::Exact);

// The acceptance coin for the j-th child tried before output token i.
float accept_coin(uint64_t seed, uint64_t i, uint64_t j);

}  // namespace updraft
