// Engine::plan_suffix, look_up_suffix, graft_suffix and observe_suffix: suffix drafts in a step
// (rollout/engine/engine.h, rollout/spec/suffix_drafts.h, rollout/spec/suffix_gate.h).
#include <algorithm>
#include <chrono>

#include "rollout/engine/commit.h"
#include "rollout/engine/engine.h"

namespace updraft {

int Engine::plan_suffix(const StepPlan& plan, std::vector<SuffixFound>& found, bool& gated) {
  gated = false;
  if (!suffix_.options().on() || plan.decoding == 0)
    return DepthChooser::kNoSuffix;
  const int suffix = look_up_suffix(plan, found);
  if (suffix == 0)  // nothing to graft: a step like any without suffix drafts
    return DepthChooser::kNoSuffix;
  gated = suffix_gate_ != nullptr;
  return !gated || suffix_gate_->choose(plan.decoding) ? suffix : DepthChooser::kNoSuffix;
}

int Engine::look_up_suffix(const StepPlan& plan, std::vector<SuffixFound>& found) {
  const auto t0 = std::chrono::steady_clock::now();
  found.assign(plan.entries.size(), {});
  std::vector<int32_t> context;
  int64_t looked = 0, deepest_sum = 0;
  for (size_t e = 0; e < plan.entries.size(); ++e) {
    const Seq& s = *plan.entries[e].seq;
    if (plan.entries[e].prefill > 0 || !grafts(s))
      continue;
    const int64_t n = s.prompt_len() + s.out_len();
    context.clear();
    for (int64_t p = std::max<int64_t>(0, n - suffix_.options().max_match); p < n; ++p)
      context.push_back(s.token_at(p));
    // A draft deeper than the tokens the request may still emit cannot be kept (the root's
    // children are candidates for the next one).
    found[e] = suffix_.lookup(s.id, context, s.req.params.max_new_tokens - s.out_len());
    ++looked;
    deepest_sum += deepest(found[e]);
  }
  stats_.suffix_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The step's class: how deep the candidates reach on average, against the drafter's full depth.
  const double reach = looked > 0 ? static_cast<double>(deepest_sum) / static_cast<double>(looked) : 0.0;
  return reach <= 0 ? 0 : reach < static_cast<double>(opts_.spec.steps) ? 1 : 2;
}

int64_t Engine::graft_suffix(const StepPlan& plan, const std::vector<SuffixFound>& found, double min_prob) {
  const auto t0 = std::chrono::steady_clock::now();
  int64_t nodes = 0;
  for (size_t e = 0; e < plan.entries.size(); ++e) {
    Seq& s = *plan.entries[e].seq;
    if (plan.entries[e].prefill > 0 || !grafts(s))
      continue;
    if (s.tree.tokens.empty())
      s.tree = DraftTree::single(s.pending_token());
    nodes += graft_candidates(s.tree, found[e], suffix_.options().max_nodes, min_prob);
  }
  stats_.suffix_nodes += nodes;
  stats_.suffix_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return nodes;
}

void Engine::calibrate_suffix(const StepPlan& plan, const std::vector<Committed>& committed) {
  double claimed = 0;
  int64_t accepted = 0;
  for (size_t e = 0; e < plan.entries.size(); ++e) {
    const GenResult& r = plan.entries[e].seq->result;
    if (!committed[e].round || r.rounds.empty())
      continue;
    const SpecRound& round = r.rounds.back();
    claimed += round.suffix_claimed;
    accepted += round.accepted_by[static_cast<size_t>(DraftSource::kGroup)] +
                round.accepted_by[static_cast<size_t>(DraftSource::kHistory)];
  }
  calibration_.observe(claimed, accepted);
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
