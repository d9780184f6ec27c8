// Group-aware drafting, side by side in one run (spec_bench --group N): GRPO-shaped groups of N
// siblings (N seeded samples of one prompt), decoded plainly, with the drafter alone, with suffix
// drafts alone (rollout/spec/suffix_drafts.h) and with both merged into one tree. Two layouts:
// live (a group's siblings decode together, a batch of N) and one at a time (batch 1, each
// sibling after the one before, so only the history can help). Each of `reps` turns builds one
// engine per arm and runs every group through all four before the next group, the arms' order
// rotating from group to group, so that a slow spell of the shared host (seen: plain decoding at
// half speed for seconds) falls on every arm alike rather than on the one whose turn it was; the
// history builds up over the groups, as in a worker. Figures are totals over the turns, timed
// after each group's prefill. With adaptive, the drafter's depth (0:
// none) is chosen per step by AdaptiveDepth in the eagle and merged arms. Before its timed groups
// each engine decodes `warmup` untimed groups of other prompts in the same layout, as a worker
// that has served before: the depth chooser and the suffix gate start from what they measured
// there (a turn's timed groups are a few hundred steps, about what a fresh chooser explores), and
// the history index holds those completions (other prompts: no text of the timed ones).
#pragma once

#include <cstdint>
#include <vector>

#include "drafter/draft_model.h"
#include "rollout/policy_model.h"
#include "rollout/spec/suffix_drafts.h"

namespace updraft::bench {

struct GroupBenchArgs {
  const PolicyModel* model = nullptr;
  const DraftModel* draft = nullptr;
  SpecSettings spec{4, 1, 5};  // the drafter's settings in the eagle and merged arms
  SuffixOptions suffix;        // mode is set per arm (both)
  std::vector<std::vector<int32_t>> prompts;
  int64_t group = 4, groups = 8, tokens = 64, reps = 3;
  int64_t warmup = -1;  // untimed groups per engine first, on prompts after the timed ones (-1: `groups`)
  float temperature = 1.0f;
  bool ignore_eos = false;
  bool adaptive = false;  // the eagle and merged arms choose the drafter's depth per step (spec/adaptive.h)
};

// False, with a message on stderr, when the prompts are fewer than the timed and warm-up groups.
bool run_group_bench(GroupBenchArgs a);

}  // namespace updraft::bench
