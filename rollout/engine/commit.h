// Verification and commit, the middle of a step (rollout/engine/engine.h): for every entry that
// has logit rows, the verdict over its tree (rollout/spec/verifier.h; a prompt's last row is a
// tree of one node), the tokens it emits (up to a stop token or the length limit; tokens a round
// accepted beyond a stop are discarded), and the policy's KV of a tree cut to the root and the
// accepted path. Every entry reports what it committed: the forward rows of the positions now in
// the cache for good (a chunk's rows; a tree's root and accepted nodes), which the drafter's pairs
// and capture read, and for each emitted token the logit row of the distribution it was drawn from.
#pragma once

#include <cstdint>
#include <vector>

#include "rollout/engine/model_runner.h"
#include "rollout/engine/request.h"

namespace updraft {

struct Committed {
  std::vector<int32_t> rows;  // forward rows of the committed positions, in position order
  int64_t first_pos = 0;      // position of rows[0]
  std::vector<int32_t> teacher_rows;  // per emitted token: its distribution's logit row
  std::vector<int32_t> tokens;        // emitted this step (streaming)
  std::vector<float> logprobs;
  bool round = false;  // a speculation round was verified: GenResult::rounds ends with it
};

struct CommitOptions {
  std::vector<int32_t> eos_token_ids;
  AcceptRule accept_rule = AcceptRule::Exact;
  int64_t vocab = 0;
};

// A verified round's counts, in total and by source (SpecRound).
SpecRound round_of(const DraftTree& tree, const Verdict& v);

std::vector<Committed> verify_commit(const StepPlan& plan, const RunOut& run, KvCache& cache,
                                     const CommitOptions& opts, EngineStats& stats);

}  // namespace updraft
