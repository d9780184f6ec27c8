#include "app/train_cmd.h"

#include <spdlog/spdlog.h>

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

}  // namespace updraft
