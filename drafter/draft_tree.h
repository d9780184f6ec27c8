// Draft trees (eagle3.md D.2): the EAGLE-2 dynamic tree and, as its top_k = 1 case, the chain.
//
// Settings follow SGLang's names: `steps` levels of drafts (the first comes from the draft pass
// over the committed pairs, each later one from one more draft forward), `top_k` children per
// expanded node, and `draft_tokens` = tree size including the root (N + 1). A chain of K drafts
// is {steps K, top_k 1, draft_tokens K + 1}.
//
// TreeBuilder grows one sequence's tree. Level 1: the top_k draft tokens of the root's
// log-probabilities; they form the frontier. Each further level: every frontier node proposes
// its top_k children, scored by cumulative log-probability (parent score + child log-prob); all
// of these candidates enter the pool, and the best top_k of them become the next frontier.
// finish() keeps the N = draft_tokens - 1 best pool entries by score (ties: earlier pool entry
// first), in pool order (level-major, then parent, then child rank), so every parent precedes
// its children and the kept set is closed under ancestors (a child never outscores its parent).
//
// DraftTree: node 0 is the root (the sequence's pending token); node i > 0 holds a target token,
// its parent (< i), depth (root 0) and score. mask() is the ancestor-or-self matrix the target's
// verification forward uses; children(i) lists i's children in rank order (the order sampling
// verification tries them in). source[i] says where node i's draft came from (the EAGLE drafter,
// or a suffix index: rollout/spec/suffix_drafts.h); empty means all from the drafter.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/core/tensor.h"

namespace updraft {

struct SpecSettings {
  int64_t steps = 4, top_k = 1, draft_tokens = 5;
  // A chain stops drafting once its drafts' joint probability under the drafter falls below
  // this (0: never; chains only): steps is then the deepest it drafts, and confident rounds draft
  // deep while doubtful ones stop early, which spares the draft steps and verification rows that
  // would most likely be rejected. Verification is unchanged, so output is too.
  double stop_below = 0;
  // A chain of a sequence that samples (temperature > 0) draws each draft from the drafter's
  // distribution at its temperature, verified against that distribution (drafter/proposer.h);
  // false: the drafter's top token, verified as a point mass. Greedy sequences and trees always
  // take the top tokens.
  bool sample_drafts = true;
  // With sample_drafts false, whether such a chain still records q at its nodes for verification
  // to measure both ways (DrawChooser, under auto): true; false (drafts never drawn) records none
  // and stops on its drafts' joint probability as a greedy chain does, without fetching q's
  // support (the drafter's top kSampledSupport tokens) or building q at every draft step.
  bool measure_drafts = true;
  bool chain() const { return top_k == 1; }
  // Throws Error unless 1 <= top_k, 1 <= steps, 2 <= draft_tokens <= 1 + the pool size, and a
  // chain keeps every draft (draft_tokens = steps + 1).
  void validate() const;
  int64_t pool_size() const { return top_k + (steps - 1) * top_k * top_k; }
  // Draft KV entries a round appends temporarily (the frontier of every level but the last).
  int64_t scratch_entries() const { return (steps - 1) * top_k; }
};

// Where a draft came from. A node proposed by several sources carries the one that proposed it
// first (the drafter's nodes exist before any graft; among suffix candidates, the likelier path).
enum class DraftSource : uint8_t { kEagle = 0, kGroup = 1, kHistory = 2 };
inline constexpr int kDraftSources = 3;
const char* draft_source_name(DraftSource s);  // "eagle", "group", "history"

struct DraftTree {
  std::vector<int32_t> tokens, parent, depth;
  std::vector<float> score;
  std::vector<DraftSource> source;  // per node, or empty: every node from the drafter
  // Per node, bit k set when source k proposed it (a node several sources proposed keeps the
  // first in `source`), or empty: each node proposed by its `source` alone.
  std::vector<uint8_t> proposers;
  // The drafter's distribution q at a sampling chain's nodes (drafter/proposer.h): over
  // kSampledSupport target ids, best first, row q_row[i] of q_tokens/q_probs for node i (-1, or
  // q_row empty: none). With `drawn` the chain's tokens were drawn from their q (sampled(i)):
  // the verifier (rollout/spec/verifier.h) accepts such a node with probability min(1, P(x) / q(x))
  // and leaves max(0, P - q) when it rejects it, which is lossless only if the node was drawn
  // independently of everything verification draws and is its parent's first child. Otherwise
  // every node is a deterministic proposal (a point mass on its token), q only measured.
  static constexpr int64_t kSampledSupport = 64;
  bool drawn = false;
  std::vector<int32_t> q_row;
  std::vector<int32_t> q_tokens;  // [rows * kSampledSupport] target ids (-1: no token)
  std::vector<float> q_probs;     // [rows * kSampledSupport], each row summing to 1
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  bool has_q(int64_t i) const { return !q_row.empty() && q_row[static_cast<size_t>(i)] >= 0; }
  bool sampled(int64_t i) const { return drawn && has_q(i); }
  DraftSource source_of(int64_t i) const {
    return source.empty() ? DraftSource::kEagle : source[static_cast<size_t>(i)];
  }
  // Whether a suffix index (group or history) proposed node i, alone or beside the drafter.
  bool from_suffix(int64_t i) const {
    return proposers.empty()
               ? source_of(i) != DraftSource::kEagle
               : (proposers[static_cast<size_t>(i)] & ~(1u << static_cast<int>(DraftSource::kEagle))) != 0;
  }
  Tensor mask() const;  // bool [n, n]
  std::vector<int32_t> children(int32_t node) const;
  static DraftTree single(int32_t root);  // a root alone (no speculation)
};

class TreeBuilder {
 public:
  TreeBuilder(int32_t root, const SpecSettings& s) : root_(root), s_(s) {}
  // Expands the current frontier (for level 1: the root). `top_tokens`/`top_logprobs` hold, per
  // frontier node in frontier order, its top_k children (target ids) and their log-probs.
  void expand(const std::vector<int32_t>& top_tokens, const std::vector<float>& top_logprobs);
  // Pool indices of the frontier, in order; the next draft forward runs these nodes.
  const std::vector<int32_t>& frontier() const { return frontier_; }
  int32_t pool_token(int32_t i) const { return pool_[static_cast<size_t>(i)].token; }
  int32_t pool_parent(int32_t i) const { return pool_[static_cast<size_t>(i)].parent; }
  float pool_score(int32_t i) const { return pool_[static_cast<size_t>(i)].score; }  // log path probability
  int64_t levels() const { return levels_; }
  DraftTree finish() const;

 private:
  struct Entry {
    int32_t token, parent;  // parent: pool index, -1 for the root
    int32_t depth;
    float score;
  };
  int32_t root_;
  SpecSettings s_;
  std::vector<Entry> pool_;
  std::vector<int32_t> frontier_;
  int64_t levels_ = 0;
};

}  // namespace updraft
