// How far a suffix index's probabilities hold up in verification, learned from the engine's own
// rounds (rollout/spec/suffix_drafts.h).
//
// Why. A suffix node's probability C(P+t) / C(P) says what followed the matched text, not how much
// the match is worth: a continuation seen once has probability 1 at every depth, after a match of
// 3 generic tokens as after 30 tokens of a sibling's answer. Measured (spec_bench --group 8, the
// conditional acceptance of grafted nodes whose parent was accepted): one sibling at a time, where
// the history holds earlier siblings' whole answers, history nodes at depth 1 were accepted at 0.9
// of their probability; in live groups, where it holds other prompts' text only, at 0.2-0.5; and
// deeper nodes (whose context matched longer by the time verification reaches them) at 0.8-1.0.
// So the factor is learned per source (group, history) and per bucket of the node's matched
// context: the lookup's match length L plus its depth - 1 (a node at depth d, once its parent is
// accepted, continues L + d - 1 tokens that match the index's text). Buckets: up to 4, 5-7, 8-15,
// 16 or more tokens.
//
// Model. A trial is a grafted node whose parent was accepted (or is the root): verification could
// accept it. Per cell, decayed sums of its trials' outcomes (1 accepted, 0 not) and of their
// conditional probabilities; kappa = (accepted + prior) / (probabilities + prior), so a cell
// without evidence takes the index at its word (kappa 1). The calibrated conditional probability
// of a node is min(1, prob x kappa), its calibrated path probability the product along its path.
//
// Decay. Every observed round multiplies every cell's sums by kDecay, trials or not, so a cell
// that stopped grafting (its nodes below the bar) drifts back to kappa 1 over a few hundred rounds
// and is measured again: no cell is written off for good.
//
// Thread safety: none; the engine's thread owns it.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "drafter/draft_tree.h"

namespace updraft {

class SuffixCalibration {
 public:
  static constexpr int kMatchBuckets = 4;  // matched context up to 4, 5-7, 8-15, 16+ tokens
  static constexpr double kPrior = 2.0;    // pseudo-trials taken at the index's word
  static constexpr double kDecay = 0.99;   // per observed round

  static int bucket(int64_t match);  // match >= 1
  // The factor for a node of `source` (group or history) continuing `match` tokens. Anything else
  // is a caller's bug (CheckFailure), as are bad inputs to bucket() and observe().
  double kappa(DraftSource source, int64_t match) const;
  // Such a node's conditional probability `prob`, calibrated: min(1, prob x kappa).
  double calibrated(DraftSource source, int64_t match, double prob) const;
  // One verified round: `tree` with its graft_prob / graft_match, `accepted` the accepted nodes
  // after the root, root to leaf (Verdict::nodes), which must fit the tree.
  void observe(const DraftTree& tree, const std::vector<int32_t>& accepted);
  // A cell's decayed trials and accepted trials (for inspection and tests).
  double trials(DraftSource source, int64_t match) const { return cell(source, match).trials; }
  double accepted(DraftSource source, int64_t match) const { return cell(source, match).accepted; }

 private:
  struct Cell {
    double trials = 0, accepted = 0, prob = 0;
  };
  Cell& cell(DraftSource source, int64_t match);
  const Cell& cell(DraftSource source, int64_t match) const;
  std::array<std::array<Cell, kMatchBuckets>, 2> cells_{};
};

}  // namespace updraft
