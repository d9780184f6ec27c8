#include "app/train_cmd.h"

#include <spdlog/spdlog.h>

#include "kernels/ops.h"

namespace updraft {

void add_pretrain_options(CLI::App& cmd, train::PretrainOptions& o) {
  cmd.add_option("--preset", o.preset, "tiny (seconds, for tests) or small (the built-in policy)")
      ->check(CLI::IsMember({"tiny", "small"}))
      ->capture_default_str();
  cmd.add_option("--out", o.out_dir, "output model directory (Hugging Face layout)")->required();
  cmd.add_option("--steps", o.steps, "optimiser steps (default: the preset's)");
  cmd.add_option("--batch", o.batch, "sequences per step (default: the preset's)");
  cmd.add_option("--seq-len", o.seq_len, "tokens per sequence (default: the preset's)");
  cmd.add_option("--vocab-size", o.vocab_size, "tokenizer vocabulary (default: the preset's)");
  cmd.add_option("--lr", o.lr, "peak learning rate (default: the preset's)");
  cmd.add_option("--warmup-steps", o.warmup_steps, "linear warmup steps (default: the preset's)");
  cmd.add_option("--corpus-chars", o.corpus_chars, "characters of training text to generate (default: the preset's)");
  cmd.add_option("--eval-every", o.eval_every, "held-out evaluation interval in steps");
  cmd.add_option("--checkpoint-every", o.checkpoint_every, "checkpoint interval in steps");
  cmd.add_option("--seed", o.seed, "seed of the corpus, the initial weights and the batches")->capture_default_str();
  cmd.add_flag("--resume", o.resume, "continue from OUT/checkpoint when it exists");
}

int run_pretrain(train::PretrainOptions o) {
  o.progress = [](const std::string& line) { spdlog::info("pretrain: {}", line); };
  const train::PretrainResult r = train::pretrain(o);
  spdlog::info("pretrain: done: {} steps, {} tokens, held-out loss {:.3f}, {:.0f} s", r.steps, r.tokens_seen,
               r.heldout_loss, r.seconds);
  return 0;
}

void add_train_options(CLI::App& cmd, TrainArgs& a) {
  train::TrainOnceOptions& o = a.once_opts;
  cmd.add_flag("--once", a.once, "offline: rollouts of the policy, then a drafter trained on them (in-domain init)");
  cmd.add_option("--model", o.model_dir, "policy directory (Hugging Face layout with tokenizer.json)")->required();
  cmd.add_option("--out", o.out_dir,
                 "--once: the drafter's directory (EAGLE format); online: published versions + checkpoint")
      ->required();
  cmd.add_option("--prompts", o.prompts, "training prompts from the built-in corpus")->capture_default_str();
  cmd.add_option("--heldout-prompts", o.heldout_prompts, "held-out prompts for the acceptance measurement")
      ->capture_default_str();
  cmd.add_option("--domain", o.domain, "corpus domain of the prompts")
      ->check(CLI::IsMember({"mix", "arith", "code"}))
      ->capture_default_str();
  cmd.add_option("--max-new-tokens", o.max_new_tokens, "tokens per rollout")->capture_default_str();
  cmd.add_option("--temperature", o.temperature, "rollout temperature (0 = greedy)")->capture_default_str();
  cmd.add_option("--draft-vocab", o.draft_vocab, "draft vocabulary size")->capture_default_str();
  cmd.add_option("--init", o.init_dir, "--once: continue this drafter (EAGLE format) instead of a fresh one");
  cmd.add_option("--teacher-k", o.teacher_k, "top-k log-probabilities kept as the teacher")->capture_default_str();
  cmd.add_option("--steps", o.train.steps, "optimiser steps")->capture_default_str();
  cmd.add_option("--samples-per-step", o.train.samples_per_step, "rollouts per step")->capture_default_str();
  cmd.add_option("--ttt-steps", o.train.ttt.steps, "training-time-test unroll K")->capture_default_str();
  cmd.add_option("--rejected-weight", o.train.ttt.rejected_weight,
                 "loss weight of the positions where the serving speculation was rejected (records mark them; 1: "
                 "every position alike)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--lr", a.lr, "peak learning rate (default: 1e-3 with --once, 3e-4 online)");
  cmd.add_option("--matmul", a.matmul,
                 "precision of the training products: f32, bf16 (operands rounded, f32 sums, f32 master weights) "
                 "or auto (bf16 where the CPU kernel is AMX)")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}))
      ->capture_default_str();
  cmd.add_option("--eval-every", o.train.eval_every, "held-out evaluation interval in steps (0: end only)")
      ->capture_default_str();
  cmd.add_option("--spec-steps", o.spec_steps, "chain length of the acceptance measurement")->capture_default_str();
  cmd.add_option("--seed", o.seed, "seed of prompts, sampling and initial weights")->capture_default_str();
  OnlineTrainArgs& on = a.online;
  auto* g = cmd.add_option_group("online", "the online trainer (without --once)");
  g->add_option("--buffer", on.buffer, "the buffer's RocksDB directory (read as a secondary while it runs)");
  g->add_option("--drafter", on.drafter, "the initial serving drafter (EAGLE format)");
  g->add_option("--policy-version", on.policy_version, "version of --model")->capture_default_str();
  g->add_option("--drafter-version", on.drafter_version, "version of --drafter")->capture_default_str();
  g->add_option("--policy-pub", on.policy_pub, "weight link PUB endpoint announcing policy versions");
  g->add_option("--policy-req", on.policy_req, "weight link request endpoint of the same publisher");
  g->add_option("--announce-pub", on.announce_pub, "bind a weight link here (PUB) to announce promoted drafters");
  g->add_option("--announce-req", on.announce_req, "its request endpoint (version requests, chunks)");
  g->add_option("--curve-key", on.curve_key_file, "CURVE: this trainer's key file (from `updraft keygen`)");
  g->add_option("--curve-allow", on.curve_allow_file, "CURVE on the announce link: subscribers' public keys admitted");
  g->add_option("--policy-curve-server", on.policy_curve_server_file,
                "CURVE on the policy link: the publisher's public key file (with --curve-key)");
  g->add_option("--window-versions", on.window_versions, "train on records of the newest N policy versions")
      ->capture_default_str();
  g->add_option("--window-records", on.window_records, "at most this many newest records per round")
      ->capture_default_str();
  g->add_option("--newest-share", on.newest_share,
                "share of training draws from the newest policy version's records (0: uniform over the window)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  g->add_option("--eval-records", on.eval_records,
                "held-out records a round evaluates candidate and serving drafter on, the newest first (0: all)")
      ->capture_default_str();
  g->add_option("--steps-per-round", on.steps_per_round, "optimiser steps per round")->capture_default_str();
  g->add_option("--lr-decay", on.lr_decay,
                "the lr within a round: constant, or falling towards --min-lr-ratio x lr (linear, cosine)")
      ->check(CLI::IsMember({"constant", "linear", "cosine"}))
      ->capture_default_str();
  g->add_option("--min-lr-ratio", on.min_lr_ratio, "a decaying round's last lr over its first")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  g->add_flag("--fresh-optimizer", on.fresh_optimizer,
              "a fresh AdamW every round instead of carrying its moments across rounds");
  g->add_option("--idle-rounds", on.idle_rounds,
                "rounds on the unchanged window after each round on new records, while nothing new is due (0: wait)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  g->add_option("--min-new-records", on.min_new_records, "trigger: records stored since the last round")
      ->capture_default_str();
  g->add_option("--min-new-tokens", on.min_new_tokens, "trigger: response tokens stored since the last round (0: off)")
      ->capture_default_str();
  g->add_option("--tau-floor", on.tau_floor, "trigger: live acceptance below this (0: off)")->capture_default_str();
  g->add_option("--promote-margin", on.promote_margin, "promote when the candidate's tau is this much better")
      ->capture_default_str();
  g->add_option("--metrics-file", on.metrics_file,
                "rewrite Prometheus text metrics here (rounds, promotions, loss, tau, consumer lag)");
  g->add_option("--report-seconds", on.report_seconds, "how often the metrics file is rewritten")
      ->capture_default_str();
  g->add_option("--max-rounds", on.max_rounds, "stop after this many rounds (0: run until SIGINT/SIGTERM)")
      ->capture_default_str();
}

int run_train(TrainArgs a) {
  a.once_opts.train.ttt.matmul = train::parse_ttt_matmul(a.matmul);
  spdlog::info("train: training products in {} ({} CPU kernel)", train::ttt_matmul_name(a.once_opts.train.ttt.matmul),
               ops::cpu_bf16_kernel_name(ops::cpu_bf16_kernel()));
  if (!a.once)
    return run_train_online(a);
  UPD_REQUIRE(a.online.buffer.empty() && a.online.drafter.empty())
      << "train: --buffer and --drafter belong to the online trainer (without --once)";
  a.once_opts.train.lr = a.lr > 0 ? a.lr : 1e-3;
  a.once_opts.train.seed = a.once_opts.seed;
  a.once_opts.progress = [](const std::string& line) { spdlog::info("train: {}", line); };
  const train::TrainOnceResult r = train::train_once(a.once_opts);
  spdlog::info("train: done: tau {:.2f}, speculative {:.1f} vs plain {:.1f} tokens/s", r.tau, r.spec_tokens_per_s,
               r.plain_tokens_per_s);
  return 0;
}

}  // namespace updraft
