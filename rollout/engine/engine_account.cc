// Engine::account: a step's bookkeeping after it committed (rollout/engine/engine.h): the
// engine's and each request's counters and seconds, the draws chooser's measures, and the depth
// chooser's sample of the step.
#include <algorithm>

#include "rollout/engine/commit.h"
#include "rollout/engine/engine.h"

namespace updraft {

void Engine::account(const StepPlan& plan, const std::vector<Committed>& committed, const RunOut& run, int64_t depth,
                     const Drafted& drafted, double seconds, int suffix) {
  ++stats_.steps;
  stats_.step_seconds += seconds;
  draws_.observe(stats_.q_overlap - draws_seen_.q_overlap, stats_.q_top - draws_seen_.q_top,
                 stats_.q_nodes - draws_seen_.q_nodes);
  draws_seen_ = {stats_.q_overlap, stats_.q_top, stats_.q_nodes};
  stats_.prompt_tokens += plan.prefill_tokens;
  stats_.preemptions = scheduler_.preemptions();
  stats_.recomputed_tokens = scheduler_.recomputed_tokens();
  stats_.reused_tokens = scheduler_.reused_tokens();
  const double share = seconds / static_cast<double>(plan.entries.size());
  for (size_t e = 0; e < plan.entries.size(); ++e) {
    Seq& s = *plan.entries[e].seq;
    s.result.step_seconds += share;
    if (run.at[e].rows > 1 && plan.entries[e].prefill == 0) {  // a tree: its rows' share of the forward verified
      const double v = run.forward_seconds * static_cast<double>(run.at[e].rows) / static_cast<double>(run.rows);
      s.result.spec.verify_seconds += v;
      stats_.spec.verify_seconds += v;
    }
  }
  stats_.spec.draft_seconds += drafted.seconds;
  for (Seq* s : drafted.proposers)
    s->result.spec.draft_seconds += drafted.seconds / static_cast<double>(drafted.proposers.size());
  stats_.last_depth = depth;
  stats_.last_decoding = plan.decoding;
  if (plan.decoding == 0)
    return;
  if (stats_.depth_steps.size() <= static_cast<size_t>(depth))
    stats_.depth_steps.resize(static_cast<size_t>(depth) + 1, 0);
  ++stats_.depth_steps[static_cast<size_t>(depth)];
  if (chooser_ != nullptr && drafter_ != nullptr) {
    StepSample ss;
    ss.batch = plan.decoding;
    ss.depth = depth;
    ss.seconds = seconds;
    ss.prefill_rows = run.prefill_rows;
    ss.forward_seconds = run.forward_seconds;
    ss.forward_rows = run.rows;
    ss.draft_seconds = drafted.seconds;
    ss.draft_rows = drafted.absorbed;
    ss.cold = cold_step();
    ss.suffix = suffix;
    ss.grafted_rows = drafted.grafted;
    for (size_t e = 0; e < plan.entries.size(); ++e) {
      const Seq& s = *plan.entries[e].seq;
      if (plan.entries[e].prefill != 0)
        continue;
      ss.extra_tokens += static_cast<double>(std::max<size_t>(1, committed[e].tokens.size()) - 1);
      if (suffix != DepthChooser::kNoSuffix && grafts(s)) {
        // The depth the drafter ran at for it: the step's (a grafting sequence is no probe, so it
        // drafts exactly when the step's depth is above 0), the full one for the canary; a
        // sequence without the drafter is as if it ran to the full depth and drafted nothing (its
        // suffix drafts add their whole run at every depth).
        const SpecRound none;
        const SpecRound& r = committed[e].round ? s.result.rounds.back() : none;
        const int64_t d = s.spec && !full_settings(s) ? depth : opts_.spec.steps;
        ss.runs.push_back({static_cast<int32_t>(d), s.spec ? r.eagle_run : 0, r.suffix_run, r.drawn});
      }
    }
    for (const Seq* s : drafted.proposers) {         // each proposer verified one round this step
      const SpecRound& r = s->result.rounds.back();  // the drafter's part: what the depth governs
      // Tried to the depth it ran at (a probe's or the canary's: the full settings'), where a chain
      // stopped early (stop_below) too: acceptance per position is then what a round at that depth brings.
      const int64_t asked = full_settings(*s) ? opts_.spec.steps : depth;
      if (r.drafted_by[0] > 0)
        ss.spec.add_round(r.drafted_by[0], r.eagle_run, std::max<int64_t>(r.eagle_depth, asked));
      ss.extra_tokens -= std::min<double>(r.eagle_run, ss.extra_tokens);
      ss.mixed |= full_settings(*s) && depth != opts_.spec.steps;
    }
    chooser_->observe(ss);
  }
}

}  // namespace updraft
