// Model-free drafts for the engine's rounds: text the policy has already written predicts what it
// writes next, above all in RL, where GRPO samples n completions of one prompt and an RL step
// repeats the prompts and answer shapes of the last.
//
// Indexes (drafter/suffix/suffix_index.h):
//  - group: one per group of running requests (GenRequest::group, or, when 0, every running
//    request with the same prompt). Each member is a document, its prompt then its tokens, appended
//    as it emits them, so a sibling ahead drafts for the ones behind. A member looks up with its
//    own document excluded at its current end (not matching itself trivially; its earlier text
//    counts, as repetitions do). The index goes when its last member leaves.
//  - history: one per engine over recent completions (prompt + completion of every request that
//    finished by a stop or the length limit, not aborted ones), bounded by history_tokens, oldest
//    out. A completion of policy generation g weighs version_weight^g (set_policy advances g), so
//    the newest policy's text dominates what it can match.
//
// Grafting. Each round, the candidates of both indexes for the sequence's context (prompt + output,
// its last token the tree's root) are merged into its draft tree (the drafter's, or the root
// alone): each index's lookup gives at most min(max_nodes, spec_factor x match length) nodes (none
// for a match shorter than min_match); all candidates in order of descending path probability
// (ties: group before history, then each index's selection order), a candidate whose token its
// parent node already has as a child is deduplicated into that child (it keeps its first source and
// score; DraftTree::proposers records every source), a new one is appended (score: log path
// probability) if its path probability clears the step's bar (the engine's depth chooser prices a
// verification row at the live batch, DepthChooser::row_worth, divided by how far the grafted
// nodes' path probabilities were borne out, SuffixCalibration), until max_nodes new nodes. A
// candidate whose parent did not make it is dropped. The
// nodes are then renumbered breadth-first with every node's children by descending score (ties:
// drafter first), the order sampling verification tries them in. The result is still a DraftTree
// (parents before children), so the verifier treats every node as a deterministic proposal and the
// round stays lossless whatever the sources.
//
// Thread safety: none; the engine's thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "drafter/draft_tree.h"
#include "drafter/suffix/suffix_index.h"

namespace updraft {

enum class SuffixMode { kOff, kGroup, kHistory, kBoth };
const char* suffix_mode_name(SuffixMode m);          // "off", "group", "history", "both"
SuffixMode parse_suffix_mode(const std::string& s);  // Error naming the choices otherwise

struct SuffixOptions {
  SuffixMode mode = SuffixMode::kOff;
  int64_t max_nodes = 16;  // suffix drafts grafted per round at most (extra rows verified)
  int64_t max_depth = 8;  // deepest suffix draft (1: the token after the root)
  double min_prob = 0.2;  // a candidate less likely than this given its parent is not drafted
  // A lookup drafts at most spec_factor x its match length nodes (longer matches predict better;
  // SuffixDecoding's rule), and nothing for a match shorter than min_match tokens.
  double spec_factor = 2.0;
  int64_t min_match = 3;
  int64_t max_match = 32;            // longest context suffix looked up
  int64_t history_tokens = 1 << 20;  // history capacity in tokens
  double version_weight = 2.0;       // weight of a completion per policy generation newer
  // Whether a step grafts at all is chosen per live batch by measured throughput
  // (rollout/spec/suffix_gate.h); false: every step grafts.
  bool gate = true;
  bool group() const { return mode == SuffixMode::kGroup || mode == SuffixMode::kBoth; }
  bool history() const { return mode == SuffixMode::kHistory || mode == SuffixMode::kBoth; }
  bool on() const { return mode != SuffixMode::kOff; }
  int64_t rows() const { return on() ? max_nodes : 0; }  // extra tree rows a round may verify
  void validate() const;                                 // Error naming the bad field
};

// One candidate of a lookup with its source.
struct SourcedCandidate {
  SuffixCandidate c;
  DraftSource source = DraftSource::kGroup;
};

// What the indexes found for one context: each lookup's nodes, tagged with their source.
using SuffixFound = std::vector<std::vector<SourcedCandidate>>;
int32_t deepest(const SuffixFound& found);  // the deepest candidate's depth (0: none)

// Grafts `trees` onto `tree` as described at the top of the file; returns the nodes added (<= budget).
// A candidate of path probability below min_prob adds no node (its verification row would cost
// more than it can add: DepthChooser::row_worth), though it may still join an existing one.
int64_t graft_candidates(DraftTree& tree, const SuffixFound& trees, int64_t budget, double min_prob = 0.0);

class SuffixDrafts {
 public:
  explicit SuffixDrafts(const SuffixOptions& opts);  // validates

  const SuffixOptions& options() const { return opts_; }
  // Request `id` joins `group` (0: its prompt's group) with its prompt.
  void join(uint64_t id, uint64_t group, const std::vector<int32_t>& prompt);
  // Tokens `id` emitted, in order.
  void extend(uint64_t id, const std::vector<int32_t>& tokens);
  // `id` leaves its group; a completed request's prompt + output joins the history.
  void leave(uint64_t id, bool completed, const std::vector<int32_t>& prompt, const std::vector<int32_t>& output);
  void policy_changed() { ++generation_; }  // later completions weigh version_weight times more
  // Candidates after `context` (its last token is a tree's root), at most max_depth deep.
  SuffixFound lookup(uint64_t id, const std::vector<int32_t>& context, int64_t max_depth) const;
  // The same, grafted onto `tree` (graft_candidates with max_nodes); returns the nodes added.
  int64_t graft(uint64_t id, const std::vector<int32_t>& context, int64_t max_depth, DraftTree& tree);

  int64_t groups() const { return static_cast<int64_t>(groups_.size()); }
  int64_t history_tokens() const { return history_ ? history_->tokens() : 0; }
  size_t memory_bytes() const;

 private:
  struct Group {
    SuffixIndex index;
    int64_t members = 0;
    explicit Group(int64_t max_match) : index(max_match) {}
  };
  struct Member {
    uint64_t group = 0;
    int64_t doc = -1;
  };

  SuffixOptions opts_;
  std::unordered_map<uint64_t, std::unique_ptr<Group>> groups_;
  std::unordered_map<uint64_t, Member> members_;
  std::unique_ptr<SuffixIndex> history_;
  int64_t generation_ = 0;
};

}  // namespace updraft
