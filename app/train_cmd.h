// `updraft pretrain` (the built-in policy, trainer/pretrain.h), `updraft train --once` (an
// in-domain EAGLE-3 drafter from the policy's own rollouts, trainer/draft_train.h) and
// `updraft train` (the online trainer daemon, trainer/online/online_trainer.h, beside a running
// `updraft buffer`). Progress goes to the log, one line per report.
#pragma once

#include <CLI/CLI.hpp>

#include "trainer/pretrain.h"
#include "trainer/train_once.h"

namespace updraft {

void add_pretrain_options(CLI::App& cmd, train::PretrainOptions& o);
int run_pretrain(train::PretrainOptions o);

// The online trainer daemon: reads the buffer's RocksDB store as a secondary (read-only)
// instance, follows policy versions announced on a weight link (optional), publishes promoted
// drafters under --out and announces them on its own weight link (optional). Runs until
// SIGINT/SIGTERM or max_rounds rounds; a restart resumes from <out>/trainer.
struct OnlineTrainArgs {
  std::string buffer;   // the buffer's RocksDB directory
  std::string drafter;  // the initial (serving) drafter
  uint64_t policy_version = 1, drafter_version = 1;
  std::string policy_pub, policy_req;      // weight link announcing policy versions ("": the policy stays)
  std::string announce_pub, announce_req;  // weight link to announce drafters on ("": files only)
  // CURVE (messaging/curve_keys.h): this trainer's key file; the subscribers its announce link
  // admits; the policy publisher's public key.
  std::string curve_key_file, curve_allow_file, policy_curve_server_file;
  uint64_t window_versions = 3;
  size_t window_records = 256;
  double newest_share = 0;
  size_t eval_records = 0;
  int64_t steps_per_round = 30;
  std::string lr_decay = "constant";  // the lr within a round (OnlineTrainerOptions::round_decay)
  double min_lr_ratio = 0.1;
  bool fresh_optimizer = false;  // OnlineTrainerOptions::fresh_optimizer_each_round
  int64_t idle_rounds = 0;
  uint64_t min_new_records = 16;
  uint64_t min_new_tokens = 0;
  double tau_floor = 0, promote_margin = 0.01;
  int64_t max_rounds = 0;  // 0: until a signal
  std::string metrics_file;  // Prometheus text rewritten every report_seconds and at the end
  double report_seconds = 10;
};

struct TrainArgs {
  bool once = false;
  double lr = 0;  // 0: the mode's default (1e-3 with --once, 3e-4 online)
  std::string matmul = "auto";  // the TTT products' precision (trainer/ttt_linear.h)
  train::TrainOnceOptions once_opts;
  OnlineTrainArgs online;
};
void add_train_options(CLI::App& cmd, TrainArgs& a);
int run_train(TrainArgs a);
int run_train_online(const TrainArgs& a);  // app/train_online.cc

}  // namespace updraft
