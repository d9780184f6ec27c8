// `updraft train --once`: in-domain initialisation of an EAGLE-3 drafter for a policy (design.md
// §9): generate rollouts of the policy on corpus prompts, capture the drafter's training data
// from them (rollout/capture/capture.h), choose the draft vocabulary from the response tokens, train with
// TTT (trainer/draft_train.h) and save the drafter in the EAGLE format. Then measure it: greedy
// speculative decoding against plain decoding on held-out prompts, side by side, written to
// OUT/train_report.json with the training figures.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "trainer/draft_train.h"

namespace updraft::train {

struct TrainOnceOptions {
  std::string model_dir;  // the policy (with tokenizer.json)
  std::string out_dir;    // the drafter
  int64_t prompts = 256, heldout_prompts = 32;
  std::string domain = "mix";  // mix, arith or code
  int64_t max_new_tokens = 96;
  float temperature = 0.f;
  int64_t draft_vocab = 1024;
  std::string init_dir;  // continue this drafter (its vocabulary) instead of a fresh one
  int64_t teacher_k = 16;
  DraftTrainOptions train;
  int64_t spec_steps = 4;  // chain length used for the acceptance measurement
  uint64_t seed = 1;
  std::function<void(const std::string& line)> progress;
};

struct TrainOnceResult {
  double tau = 0, plain_tokens_per_s = 0, spec_tokens_per_s = 0;
  DraftTrainResult training;
};

TrainOnceResult train_once(const TrainOnceOptions& o);

}  // namespace updraft::train
