#include "app/demo_cmd.h"

namespace updraft {

void add_demo_options(CLI::App& cmd, demo::DemoOptions& o) {
  cmd.add_option("--model", o.model_dir, "policy directory (default: the built-in small policy)");
  cmd.add_option("--drafter", o.drafter_dir, "its initial EAGLE-3 drafter (default: the built-in one)");
  cmd.add_option("--out", o.out_dir, "where report.json, tau.svg and the published versions go")->capture_default_str();
  cmd.add_option("--steps", o.steps, "RL steps")->capture_default_str();
  cmd.add_option("--prompts", o.prompts_per_step, "prompts per RL step")->capture_default_str();
  cmd.add_option("--group", o.group, "responses sampled per prompt (GRPO group)")->capture_default_str();
  cmd.add_option("--max-new-tokens", o.max_new_tokens, "tokens per response")->capture_default_str();
  cmd.add_option("--rl-lr", o.rl_lr, "policy learning rate (AdamW)")->capture_default_str();
  cmd.add_option("--domain", o.domain,
                 "corpus domain of the RL prompts: mix, arith, code, or a curriculum A>B (stage A, then B)")
      ->capture_default_str();
  cmd.add_option("--switch-step", o.switch_step, "curriculum: RL steps of the first stage (0: a quarter of the run)")
      ->capture_default_str();
  cmd.add_option("--workers", o.workers, "rollout worker threads")->capture_default_str();
  cmd.add_option("--worker-batch", o.worker_batch,
                 "sequences each worker decodes at once (0: all of its share of the step)")
      ->capture_default_str();
  cmd.add_flag("!--no-adaptive", o.adaptive_spec,
               "always speculate (default: a worker decodes plainly, with speculative probes, while that is faster)");
  cmd.add_option("--suffix-drafts", o.suffix_drafts,
                 "the online run's model-free drafts from sibling rollouts and recent completions: off, group, "
                 "history or both")
      ->check(CLI::IsMember({"off", "group", "history", "both"}))
      ->capture_default_str();
  cmd.add_option("--suffix-nodes", o.suffix_nodes, "suffix drafts grafted per round at most (1-64)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd.add_option("--suffix-factor", o.suffix_factor, "a suffix lookup's nodes per matched token at most (> 0)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_flag("--trainer-fresh-optimizer", o.trainer_fresh_optimizer,
               "online trainer: a fresh AdamW every round instead of carrying its moments across rounds");
  cmd.add_flag("!--no-prefix-reuse", o.prefix_reuse,
               "every rollout prefills its prompt (default: a group's siblings take it from the cache)");
  cmd.add_option("--spec-steps", o.spec_steps, "draft depth per speculation round")->capture_default_str();
  cmd.add_option("--spec-top-k", o.spec_top_k, "draft branching (1 = chain)")->capture_default_str();
  cmd.add_option("--spec-draft-tokens", o.spec_draft_tokens, "tree size (0 = the depth, a chain)")
      ->capture_default_str();
  cmd.add_option("--spec-stop-below", o.spec_stop_below,
                 "a chain stops drafting once its drafts are jointly less likely than this under the drafter (0: "
                 "never; chains only)")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  cmd.add_option("--spec-sampled-drafts", o.spec_sampled_drafts,
                 "a sampling request's chain draws its drafts from the drafter's distribution (on), takes its top "
                 "tokens (off), or whichever measures the higher acceptance (auto)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd.add_option("--trainer-idle-rounds", o.trainer_idle_rounds,
                 "online trainer rounds on the unchanged window after each round on new records, within its share")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd.add_option("--trainer-steps", o.trainer_steps_per_round, "online trainer steps per round")->capture_default_str();
  cmd.add_option("--trainer-share", o.trainer_share,
                 "trainer CPU seconds per RL step, as a multiple of the CPU seconds of the step's online generation "
                 "(the cores are shared)")
      ->capture_default_str();
  cmd.add_option("--trainer-lr", o.trainer_lr, "online trainer learning rate")->capture_default_str();
  cmd.add_option("--trainer-lr-decay", o.trainer_lr_decay,
                 "the online trainer's lr within a round: constant, or falling towards --trainer-min-lr-ratio x lr "
                 "(linear, cosine)")
      ->check(CLI::IsMember({"constant", "linear", "cosine"}))
      ->capture_default_str();
  cmd.add_option("--trainer-min-lr-ratio", o.trainer_min_lr_ratio,
                 "the online trainer's lr at a round's end over its start, with a decay")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd.add_option("--trainer-samples", o.trainer_samples, "online trainer records per optimiser step")
      ->capture_default_str();
  cmd.add_option("--trainer-ttt-steps", o.trainer_ttt_steps, "online trainer training-time-test depth K")
      ->capture_default_str();
  cmd.add_option("--trainer-rejected-weight", o.trainer_rejected_weight,
                 "online trainer's loss weight of the positions where the workers' speculation was rejected")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--trainer-newest-share", o.trainer_newest_share,
                 "share of the online trainer's draws from the newest policy version's records (0: uniform)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd.add_option("--trainer-matmul", o.trainer_matmul,
                 "precision of the online trainer's products: f32, bf16 (f32 sums and master weights) or auto "
                 "(bf16 where the CPU kernel is AMX)")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}))
      ->capture_default_str();
  cmd.add_option("--trainer-eval-records", o.trainer_eval_records,
                 "held-out records each online trainer round evaluates on, the newest first (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd.add_option("--window-versions", o.window_versions, "policy versions the trainer reads")->capture_default_str();
  cmd.add_option("--final-prompts", o.final_prompts, "held-out prompts of the final comparison")->capture_default_str();
  cmd.add_option("--offline-prompts", o.offline_prompts, "rollouts for the quick reference drafter")
      ->capture_default_str();
  cmd.add_option("--offline-steps", o.offline_steps,
                 "minimum optimiser steps of the quick reference (it takes as many as the online trainer took)")
      ->capture_default_str();
  cmd.add_option("--reference", o.reference,
                 "reference drafters trained offline on the final policy: strong (converged, cached; with quick), "
                 "quick (the online trainer's budget) or off")
      ->check(CLI::IsMember({"strong", "quick", "off"}))
      ->capture_default_str();
  cmd.add_option("--strong-prompts", o.strong_prompts, "rollouts for the strong reference")->capture_default_str();
  cmd.add_option("--strong-steps", o.strong_steps, "optimiser steps of the strong reference")->capture_default_str();
  cmd.add_option("--reference-cache", o.reference_cache, "cache of strong references (default: OUT/reference-cache)");
  cmd.add_flag("--keep-buffer", o.keep_buffer, "keep the RocksDB buffer in OUT/buffer");
  cmd.add_flag("--fetch-weights", o.fetch_weights,
               "workers fetch every new version as chunks over the weight link (as without a shared filesystem)");
  cmd.add_option("--record-rate", o.record_rate, "share of the online completions streamed to the buffer as records")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd.add_option("--record-max-tokens", o.record_max_tokens,
                 "positions per record; longer completions are split (0: no cap, else at least 2)")
      ->check([](const std::string& v) {
        try {
          const long long n = std::stoll(v);
          return n == 0 || n >= 2 ? std::string() : std::string("must be 0 or at least 2");
        } catch (...) {
          return std::string("not an integer");
        }
      })
      ->capture_default_str();
  cmd.add_option("--seed", o.seed, "seed of prompts, sampling and training")->capture_default_str();
}

int run_demo_cmd(const demo::DemoOptions& o) {
  return demo::run_demo(o);
}

}  // namespace updraft
