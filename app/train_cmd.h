// `updraft pretrain` (the built-in policy, trainer/pretrain.h) and `updraft train --once` (an
// in-domain EAGLE-3 drafter from the policy's own rollouts, trainer/draft_train.h). Progress goes
// to the log, one line per report; the result is a model directory.
#pragma once

#include <CLI/CLI.hpp>

#include "trainer/pretrain.h"
#include "trainer/train_once.h"

namespace updraft {

void add_pretrain_options(CLI::App& cmd, train::PretrainOptions& o);
int run_pretrain(train::PretrainOptions o);

struct TrainArgs {
  bool once = false;
  train::TrainOnceOptions once_opts;
};
void add_train_options(CLI::App& cmd, TrainArgs& a);
int run_train(TrainArgs a);

}  // namespace updraft
