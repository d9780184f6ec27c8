#include "app/demo/report.h"
#include "drafter/draft_model.h"
#include "trainer/ttt_linear.h"

namespace updraft::demo {

nlohmann::json report_json(const DemoOptions& o, const EngineOptions& eo, const std::string& policy,
                           const std::string& initial_drafter, const std::vector<StepRecord>& steps,
                           const std::vector<TrainerPoint>& curve, const Summary& sum) {
  nlohmann::json js = nlohmann::json::array(), rounds = nlohmann::json::array();
  for (const StepRecord& r : steps)
    js.push_back(step_json(r));
  for (const TrainerPoint& p : curve)
    rounds.push_back(trainer_point_json(p));
  const bool quick = sum.final_quick_tau > 0;
  const nlohmann::json options = {{"steps", o.steps},
                                  {"prompts_per_step", o.prompts_per_step},
                                  {"group", o.group},
                                  {"max_new_tokens", o.max_new_tokens},
                                  {"rl_lr", o.rl_lr},
                                  {"domain", o.domain},
                                  {"workers", o.workers},
                                  {"worker_batch", eo.max_batch},
                                  {"spec",
                                   {{"steps", o.spec_steps},
                                    {"top_k", o.spec_top_k},
                                    {"draft_tokens", eo.spec.draft_tokens},
                                    {"stop_below", eo.spec.stop_below},
                                    {"sampled_drafts", draft_sampling_name(eo.draft_sampling)}}},
                                  {"trainer",
                                   {{"steps_per_round", o.trainer_steps_per_round},
                                    {"idle_rounds", o.trainer_idle_rounds},
                                    {"lr", o.trainer_lr},
                                    {"lr_decay", o.trainer_lr_decay},
                                    {"min_lr_ratio", o.trainer_min_lr_ratio},
                                    {"share", o.trainer_share},
                                    {"samples_per_step", o.trainer_samples},
                                    {"ttt_steps", o.trainer_ttt_steps},
                                    {"rejected_weight", o.trainer_rejected_weight},
                                    {"fresh_optimizer", o.trainer_fresh_optimizer},
                                    {"newest_share", o.trainer_newest_share},
                                    {"eval_records", o.trainer_eval_records},
                                    {"matmul", train::ttt_matmul_name(train::parse_ttt_matmul(o.trainer_matmul))}}},
                                  {"reference", o.reference},
                                  {"record_rate", o.record_rate},
                                  {"record_max_tokens", o.record_max_tokens},
                                  {"seed", o.seed}};
  const nlohmann::json summary = {
      {"frozen_tau_first_quarter", sum.frozen_tau_first_quarter},
      {"frozen_tau_last_quarter", sum.frozen_tau_last_quarter},
      {"drift", sum.drift},
      {"online_tau_second_half", sum.online_tau_second_half},
      {"frozen_tau_second_half", sum.frozen_tau_second_half},
      {"online_over_frozen", sum.adapt_ratio},
      {"pre_switch_online_tau", sum.pre_switch_tau},
      {"recovery_steps_to_70pct", sum.recovery_steps},
      {"final_tau",
       {{"online", sum.final_online_tau},
        {"frozen", sum.final_frozen_tau},
        {"quick_reference", sum.final_quick_tau},
        {"strong_reference", sum.final_strong_tau}}},
      {"online_over_quick_reference", sum.vs_quick},
      {"online_over_strong_reference", sum.vs_strong},
      {"strong_reference",
       {{"start", sum.strong_start}, {"seconds", sum.strong_seconds}, {"cached", sum.strong_cached}}},
      {"trainer_cpu_share", sum.trainer_share},
      {"workers_plain_tokens_per_s",
       {{"trainer_paused", sum.plain_tps_trainer_paused}, {"trainer_running", sum.plain_tps_trainer_running}}},
      {"generation_speedup", sum.gen_speedup},
      {"step_speedup", sum.step_speedup},
      {"generation_share_of_step", sum.gen_share},
      {"suffix_drafts", o.suffix_drafts},
      {"suffix_nodes", o.suffix_nodes},
      {"suffix_factor", o.suffix_factor},
      {"prefix_reuse", o.prefix_reuse},
      {"draft_weights", draft_weights_name(resolved_draft_weights(Device::CPU))},  // the demo runs on the CPU
      {"online_prompt_tokens",
       {{"prefilled", sum.online_prefill_tokens}, {"taken_from_cache", sum.online_cached_prompt_tokens}}},
      {"online_accepted_per_round",
       {{"drafter", sum.accepted_per_round[0]},
        {"group", sum.accepted_per_round[1]},
        {"history", sum.accepted_per_round[2]}}},
      {"full_batch",
       {{"batch", sum.full_batch},
        {"plain_tokens_per_s", sum.full_batch_plain_tps},
        {"online_tokens_per_s", sum.full_batch_online_tps}}},
      {"reward_first_quarter", sum.reward_first},
      {"reward_last_quarter", sum.reward_last},
      {"drafters_promoted", sum.promotions},
      {"drafter_swaps", sum.drafter_swaps},
      {"policy_swaps", sum.policy_swaps},
      {"rejected_versions", sum.rejected},
      {"rollbacks", sum.rollbacks},
      {"records_stored", sum.records_stored},
      {"completions_unrecorded", sum.completions_unrecorded},
      {"record_chunks", sum.record_chunks},
      {"seconds", sum.seconds}};
  const nlohmann::json checks = {{"drift_at_least_15pct", sum.drift >= 0.15},
                                 {"online_at_least_1_15x_frozen", sum.adapt_ratio >= 1.15},
                                 {"online_at_least_0_9x_quick_reference", !quick || sum.vs_quick >= 0.9},
                                 {"rl_step_faster_than_plain", sum.step_speedup > 1.0}};
  return {{"policy", policy}, {"initial_drafter", initial_drafter}, {"options", options},
          {"steps", js},      {"trainer_rounds", rounds},           {"summary", summary},
          {"checks", checks}};
}

}  // namespace updraft::demo
