// The demo's per-step measurements, its summary and the files it writes: report.json and
// tau.svg (τ of the online and frozen drafters over RL steps, with policy-update and
// drafter-swap markers).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace updraft::demo {

struct StepRecord {
  int64_t step = 0;
  uint64_t policy_version = 0, drafter_version = 0;  // what the online run generated with
  std::string domain;  // of the step's prompts
  double reward = 0, format_rate = 0;
  double tau_online = 0, tau_frozen = 0;  // online: over its requests at the full settings
  double spec_share = 1;  // fraction of the online run's requests decoded speculatively (adaptive)
  double mean_depth = 0;  // chain depth per online request (0 for plain; adaptive speculation)
  double tps_online = 0, tps_frozen = 0, tps_plain = 0;  // generated tokens / wall seconds
  double gen_online_s = 0, gen_frozen_s = 0, gen_plain_s = 0;
  double capture_s = 0, update_s = 0, trainer_slot_s = 0;
  int64_t tokens_online = 0, tokens_plain = 0;
  int64_t records_acked = 0;
  std::vector<uint64_t> promoted;  // drafter versions the trainer published during this step
  double grad_norm = 0, nll = 0;
  std::array<int64_t, 3> accepted_by{};  // the online run's accepted drafts: drafter, group, history
  int64_t rounds_online = 0;             // and its speculation rounds
  double gen_speedup() const { return tps_plain > 0 ? tps_online / tps_plain : 0.0; }
  // (plain generation + update) / (online generation + capture + update), per generated token.
  double step_speedup() const;
};

struct Summary {
  double frozen_tau_first_quarter = 0, frozen_tau_last_quarter = 0, drift = 0;  // drift: 1 - last/first
  double online_tau_second_half = 0, frozen_tau_second_half = 0, adapt_ratio = 0;
  double final_online_tau = 0, final_frozen_tau = 0, final_offline_tau = 0, vs_offline = 0;
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
  int64_t completions_unrecorded = 0, record_chunks = 0;  // record volume bounds (record_rate, record_max_tokens)
  double seconds = 0;
};

Summary summarize(const std::vector<StepRecord>& steps);
nlohmann::json step_json(const StepRecord& s);
std::string render_svg(const std::vector<StepRecord>& steps, const std::string& title);
// The summary table printed at the end (fixed-width text, one line per row).
std::vector<std::string> summary_table(const Summary& s, bool offline);

}  // namespace updraft::demo
