// Engine::wants_suffix, graft_suffix and observe_suffix: suffix drafts in a step (rollout/engine/engine.h,
// rollout/spec/suffix_drafts.h, rollout/spec/suffix_gate.h).
#include <algorithm>
#include <chrono>

#include "rollout/engine/commit.h"
#include "rollout/engine/engine.h"

namespace updraft {

bool Engine::wants_suffix(const StepPlan& plan) {
  return suffix_.options().on() && plan.decoding > 0 && (!suffix_gate_ || suffix_gate_->choose(plan.decoding));
}

void Engine::graft_suffix(const StepPlan& plan) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> context;
  for (const StepEntry& e : plan.entries) {
    Seq& s = *e.seq;
    if (e.prefill > 0 || !grafts(s))
      continue;
    if (s.tree.tokens.empty())
      s.tree = DraftTree::single(s.pending_token());
    const int64_t n = s.prompt_len() + s.out_len();
    context.clear();
    for (int64_t p = std::max<int64_t>(0, n - suffix_.options().max_match); p < n; ++p)
      context.push_back(s.token_at(p));
    // A draft deeper than the tokens the request may still emit cannot be kept (the root's
    // children are candidates for the next one).
    stats_.suffix_nodes += suffix_.graft(s.id, context, s.req.params.max_new_tokens - s.out_len(), s.tree);
  }
  stats_.suffix_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Engine::observe_suffix(const StepPlan& plan, const std::vector<Committed>& committed, const RunOut& run,
                            double seconds, bool grafted) {
  if (!suffix_gate_ || plan.decoding == 0)
    return;
  int64_t tokens = 0;
  for (size_t e = 0; e < plan.entries.size(); ++e)
    if (plan.entries[e].prefill == 0)
      tokens += static_cast<int64_t>(committed[e].tokens.size());
  const double decode_s =
      seconds - run.forward_seconds * static_cast<double>(run.prefill_rows) / static_cast<double>(run.rows);
  suffix_gate_->observe(plan.decoding, grafted, tokens, decode_s, cold_step());
}

}  // namespace updraft
