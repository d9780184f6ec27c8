// The demo's per-step measurements, its summary and the files it writes: report.json and
// tau.svg (τ of the online and frozen drafters over RL steps, with policy-update and
// drafter-swap markers).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/demo/demo.h"
#include "rollout/engine/engine.h"

namespace updraft::demo {

struct StepRecord {
  int64_t step = 0;
  uint64_t policy_version = 0, drafter_version = 0;  // what the online run generated with
  std::string domain;                                // of the step's prompts
  double reward = 0, format_rate = 0;
  double tau_online = 0, tau_frozen = 0;  // online: over its requests at the full settings
  double spec_share = 1;                  // fraction of the online run's requests decoded speculatively (adaptive)
  double mean_depth = 0;                  // chain depth per online request (0 for plain; adaptive speculation)
  double tps_online = 0, tps_frozen = 0, tps_plain = 0;  // generated tokens / wall seconds
  double gen_online_s = 0, gen_frozen_s = 0, gen_plain_s = 0;
  double capture_s = 0, update_s = 0, trainer_slot_s = 0;
  // Process CPU seconds (all threads) over the online generation and over the trainer's slot:
  // the rollouts' and the trainer's compute (the two never overlap here).
  double rollout_cpu_s = 0, trainer_cpu_s = 0;
  int64_t tokens_online = 0, tokens_plain = 0;
  int64_t records_acked = 0;
  std::vector<uint64_t> promoted;  // drafter versions the trainer published during this step
  double grad_norm = 0, nll = 0;
  std::array<int64_t, 3> accepted_by{};  // the online run's accepted drafts: drafter, group, history
  int64_t rounds_online = 0;             // and its speculation rounds
  // The online run's stalled steps and the seconds they took beyond their depth's settled cost
  // (summed over the workers, which run in parallel: compare with gen_online_s x workers).
  int64_t stall_steps_online = 0;
  double stall_s_online = 0;
  double gen_speedup() const { return tps_plain > 0 ? tps_online / tps_plain : 0.0; }
  // (plain generation + update) / (online generation + capture + update), per generated token.
  double step_speedup() const;
};

// One online-trainer round, for the learning curve: τ̂ on held-out records against the
// optimiser steps taken and the records stored so far.
struct TrainerPoint {
  int64_t round = 0, rl_step = 0;  // the RL step whose trainer slot finished the round
  int64_t optimizer_steps = 0;     // cumulative
  int64_t records_stored = 0;      // in the buffer when the slot ended
  double candidate_tau = 0, serving_tau = 0;
  bool promoted = false;
};

struct Summary {
  double frozen_tau_first_quarter = 0, frozen_tau_last_quarter = 0, drift = 0;  // drift: 1 - last/first
  double online_tau_second_half = 0, frozen_tau_second_half = 0, adapt_ratio = 0;
  // Curriculum: the online drafter's mean τ over the first stage, and the first step after the
  // switch (k = 0: the first step of the second stage, measured before any of its records were
  // trained on) whose online τ reached 70% of it; -1: never.
  double pre_switch_tau = 0;
  int64_t recovery_steps = -1;
  double final_online_tau = 0, final_frozen_tau = 0;
  double final_quick_tau = 0, vs_quick = 0;    // quick reference (0: not run)
  double final_strong_tau = 0, vs_strong = 0;  // strong reference (0: not run)
  double strong_seconds = 0;
  bool strong_cached = false;
  std::string strong_start;
  // Trainer CPU seconds over rollout CPU seconds (StepRecord), over the whole run.
  double trainer_share = 0;
  // The workers' plain decoding of the final requests alone and with the trainer's work (TTT
  // steps) running beside them on the same cores (0: not measured).
  double plain_tps_trainer_paused = 0, plain_tps_trainer_running = 0;
  double gen_speedup = 0, step_speedup = 0;
  // Generation's share of the online RL step's time (generation + capture + update): what
  // speculation can speed up (the step speedup is at most 1 / (1 - share)).
  double gen_share = 0;
  std::array<double, 3> accepted_per_round{};  // the online run's, by source (drafter, group, history)
  // The final held-out requests decoded all at once with every core (the throughput-optimal
  // setting on a CPU, where a large batch is compute-bound): plain and online-speculative.
  int64_t full_batch = 0;
  double full_batch_plain_tps = 0, full_batch_online_tps = 0;
  double reward_first = 0, reward_last = 0;
  int64_t promotions = 0, drafter_swaps = 0, policy_swaps = 0, rejected = 0, rollbacks = 0;
  int64_t records_stored = 0;
  // The workers' serving engines (the online run): context tokens prefilled, and taken over from
  // the caches by prefix reuse (a group's siblings, decoded in turn, take their prompt).
  int64_t online_prefill_tokens = 0, online_cached_prompt_tokens = 0;
  int64_t completions_unrecorded = 0, record_chunks = 0;  // record volume bounds (record_rate, record_max_tokens)
  double seconds = 0;
};

// switch_step: the 0-based index of the first step of a curriculum's second stage (0 or
// steps.size(): no curriculum, no recovery figures).
Summary summarize(const std::vector<StepRecord>& steps, size_t switch_step);
constexpr double kRecoveryShare = 0.7;
nlohmann::json step_json(const StepRecord& s);
nlohmann::json trainer_point_json(const TrainerPoint& p);
// The plot: online and frozen τ per step; the reference drafters' τ on the final policy as
// dashed horizontal lines (when measured), and the recovery threshold after a switch.
std::string render_svg(const std::vector<StepRecord>& steps, const Summary& sum, const std::string& title);
// report.json: the options, every step, the trainer's learning curve, the summary and the checks.
nlohmann::json report_json(const DemoOptions& o, const EngineOptions& eo, const std::string& policy,
                           const std::string& initial_drafter, const std::vector<StepRecord>& steps,
                           const std::vector<TrainerPoint>& curve, const Summary& sum);

// The summary table printed at the end (fixed-width text, one line per row).
std::vector<std::string> summary_table(const Summary& s);

}  // namespace updraft::demo
