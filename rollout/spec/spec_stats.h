// Speculation counters: rounds, drafted and accepted tokens, acceptance per draft position, and
// where the time went. Kept per request (GenResult::spec), per engine (EngineStats::spec) and by
// the worker per drafter version.
//
// A round verifies one draft tree of depth d (a chain of d drafts, or a tree whose deepest node
// is at depth d). accepted_at[j] counts rounds whose accepted length reached j + 1; tried_at[j]
// counts rounds whose tree reached depth j + 1 (d > j), i.e. the rounds that could accept
// position j. When every round runs at the same depth, tried_at[j] == rounds for j < d.
//
// tau() = 1 + accepted / rounds is the realised acceptance length (eagle3.md E.1) at the depths
// that ran. tau_at(D) = 1 + sum_{j<D} accepted_at[j] / tried_at[j] combines rounds of any depth;
// it equals tau() when every round ran at depth D. It is an estimate, not a comparable measure:
// where a round starts depends on how deep the previous rounds went (deep chains start more often
// right after a rejection), so per-position acceptance differs between depths even for the same
// drafter. To compare drafters, compare rounds at one depth (the workers' probe requests).
//
// By source (drafter/draft_tree.h DraftSource): drafted_by counts the verified drafts each source
// proposed, accepted_by the accepted ones (a node several sources proposed counts for the one
// that proposed it first: DraftSource). Their sums equal drafted and accepted.
//
// verify_seconds: the policy's forward passes of the steps that speculated (shared out among
// requests by their rows); draft_seconds: the drafter's passes (absorbing committed pairs and
// proposing), shared out equally among the sequences drafted for.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "drafter/draft_tree.h"

namespace updraft {

struct SpecStats {
  int64_t rounds = 0, drafted = 0, accepted = 0;
  std::vector<int64_t> accepted_at;  // [j]: rounds whose accepted length reached j + 1
  std::vector<int64_t> tried_at;     // [j]: rounds whose tree reached depth j + 1
  std::array<int64_t, kDraftSources> drafted_by{}, accepted_by{};
  int64_t truncated = 0;  // rounds whose accepted tokens were cut by a stop token or the length limit
  double draft_seconds = 0, verify_seconds = 0;

  double tau() const { return rounds == 0 ? 1.0 : 1.0 + static_cast<double>(accepted) / static_cast<double>(rounds); }
  // Estimated acceptance length of depth-`depth` rounds (see above); 1 when nothing was tried.
  double tau_at(int64_t depth) const;
  // How many leading positions (up to `depth`) at least `min_tried` rounds tried: the depth to
  // which tau_at measures rather than counts untried positions as never accepted.
  int64_t tried_depth(int64_t depth, int64_t min_tried) const;
  // Acceptance of position j given positions < j were accepted (n-alpha for chains).
  double alpha(size_t j) const;
  // One round: `drafted_tokens` drafts in a tree of depth `depth` (0: the depth equals the
  // drafted count, as for a chain), `accepted_tokens` of them accepted.
  void add_round(int64_t drafted_tokens, int64_t accepted_tokens, int64_t depth = 0);
  // The same round's drafts and acceptances by source (indexed by DraftSource).
  void add_sources(const std::array<int32_t, kDraftSources>& drafted_by_source,
                   const std::array<int32_t, kDraftSources>& accepted_by_source);
  void merge(const SpecStats& o);
  // Leaves what was added since `earlier`, a snapshot of these same totals.
  void subtract(const SpecStats& earlier);
};

}  // namespace updraft
