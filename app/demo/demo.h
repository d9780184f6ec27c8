// `updraft demo`: the whole mission in one process (design.md §1, issue "online adaptation").
//
// Roles, all real: W rollout workers (threads, rollout/worker/worker.h) generating with EAGLE-3
// speculation and streaming records over ZeroMQ (inproc) to the buffer server, which stores them
// in RocksDB (a temporary directory); the online trainer (trainer/online/online_trainer.h)
// refreshing the drafter from the buffer and publishing versions the workers hot-swap; and a
// GRPO loop (trainer/grpo.h) on the corpus's verifiable rewards that updates the policy every
// step and publishes it through the same versioned hot-swap path.
//
// Each RL step s (policy version s + 1):
//   1. P prompts of the corpus's RL split (positions s·P ..), each sampled G times at
//      temperature 1 with per-request seeds: the same requests for all three runs below.
//   2. Online: the workers generate them with the serving drafter (the RL data; records
//      captured and streamed), speculating while that pays (adaptive speculation,
//      rollout/worker/worker.h), with suffix drafts from the request's siblings and recent
//      completions (suffix_drafts; rollout/spec/suffix_drafts.h) where they pay. Frozen: the
//      same requests, all speculative, with a frozen copy of the initial drafter (τ only).
//      Plain: the same requests without a drafter. All three on the same policy version, back
//      to back (their order rotates every step), with the trainer paused: one policy
//      trajectory (the one the plain run's rollouts drive, see below), three ways of
//      generating it.
//   The RL prompts come from one domain mix, or from a two-stage curriculum ("arith>code":
//   arithmetic until switch_step, then code), as multi-stage RL pipelines do. A curriculum
//   starts from a drafter trained in-domain for its first stage (models/small-eagle3-arith),
//   so the second stage is where a frozen drafter's acceptance drifts.
//   3. Rewards, GRPO update, publish policy v+1 and announce it on the weight link
//      (messaging/weight_link.h, inproc); each worker's subscriber hands it to the worker's
//      hot-swap path, and the loop waits until every worker has it staged (the weight sync of
//      an on-policy RL loop). The trainer gets it too.
//   4. The trainer's slot. In a deployment the trainer has its own device and runs beside
//      generation; here it shares two cores with the workers, so the demo time-slices: it is
//      paused while generation runs (it yields within one training step) and gets a slot of
//      trainer_share × the CPU seconds of the step's online generation after the update
//      (ended early when it is idle). Step timings exclude the slot, which is reported on its own. Promoted
//      drafters are announced on the weight link as they appear and served from the next batch
//      (or the next speculation round when one arrives while a batch runs).
//   The GRPO update uses the plain run's rollouts: the same requests and seeds, and the same
//   distribution as the online run's (speculation is lossless), but unlike those they do not
//   depend on timing-dependent choices (adaptive depth, promotions), so the policy trajectory is
//   reproducible: reruns with the same options, and ablations of the online trainer, see the
//   same policies step for step, and the strong reference's cache hits.
// At the end two reference drafters are trained offline on the final policy's rollouts
// (app/demo/reference.h: a quick one with the online trainer's budget, a strong one trained to
// convergence), and the online, frozen and reference drafters are measured on the same held-out
// requests. The report adds the online drafter's recovery after a curriculum switch, the trainer's
// learning curve (its rounds) and its compute share (process CPU seconds in its slot over those of
// the online generation), and the workers' plain decoding speed with the trainer's work running
// beside them against alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rollout/spec/suffix_drafts.h"

namespace updraft::demo {

struct DemoOptions {
  std::string model_dir;    // the policy (HF dir + tokenizer.json); empty: the built-in one
  std::string drafter_dir;  // its initial drafter; empty: the built-in one, or trained here
  std::string out_dir = "updraft-demo";
  std::string domain = "arith>code";  // RL prompts: mix, arith, code, or a curriculum "A>B" (the default)
  int64_t switch_step = 0;            // curriculum: steps of stage A (0: a quarter of the run)
  int64_t steps = 16;
  int64_t prompts_per_step = 8, group = 4;
  int64_t max_new_tokens = 64;
  double rl_lr = 5e-5;
  int64_t workers = 2;
  int64_t worker_batch = 1;            // sequences each worker's engine decodes at once; 0: its whole share
  bool adaptive_spec = true;           // workers fall back to plain decoding while speculation does not pay
  std::string suffix_drafts = "both";  // the online run's suffix drafts: off, group, history, both
  int64_t suffix_nodes = SuffixOptions{}.max_nodes;    // grafted per round at most
  double suffix_factor = SuffixOptions{}.spec_factor;  // a lookup's nodes per matched token at most
  bool prefix_reuse = true;            // every engine's prefix reuse (rollout/engine/prefix_reuse.h)
  int64_t spec_steps = 4, spec_top_k = 1, spec_draft_tokens = 0;  // 0: spec_steps + 1 (a chain)
  double spec_stop_below = 0;                                     // SpecSettings::stop_below
  std::string spec_sampled_drafts = "auto";                       // EngineOptions::draft_sampling: auto, on, off
  // The online trainer's recipe, chosen by the ablation in docs/online.md ("Drift recovery"):
  // training-time test as deep as the served chain (K = 4), one record per optimiser step, 40
  // steps per round (the records per round of the earlier 4 x 10).
  int64_t trainer_steps_per_round = 40;
  int64_t trainer_idle_rounds = 0;  // rounds on the unchanged window, within the slot's budget (measured: no gain)
  double trainer_share = 4.0;       // trainer CPU seconds per CPU second of online generation, per step
  double trainer_lr = 3e-4;
  std::string trainer_lr_decay = "constant";  // within a round: constant, linear, cosine
  double trainer_min_lr_ratio = 0.1;          // a decaying round's last lr over its first
  int64_t trainer_samples = 1;          // records per optimiser step
  int64_t trainer_ttt_steps = 4;        // K of training-time test
  double trainer_rejected_weight = 1;   // loss weight of positions the speculation was rejected at
  bool trainer_fresh_optimizer = false;  // a fresh AdamW each round instead of carried moments
  double trainer_newest_share = 0;      // share of draws from the newest policy version's records (0: uniform)
  int64_t trainer_eval_records = 0;     // held-out records a round evaluates on, newest first (0: all)
  std::string trainer_matmul = "auto";  // the TTT products' precision: auto|f32|bf16 (trainer/ttt_linear.h)
  uint64_t window_versions = 3;
  int64_t final_prompts = 16;                         // held-out comparison at the end
  std::string reference = "strong";                   // reference drafters: strong (and quick), quick, off
  int64_t offline_prompts = 128, offline_steps = 60;  // the quick reference
  int64_t strong_prompts = 1024, strong_steps = 200;  // the strong reference
  std::string reference_cache;                        // where strong references are cached (empty: OUT/reference-cache)
  uint64_t seed = 1;
  bool keep_buffer = false;
  bool fetch_weights = false;     // workers copy new versions over the weight link instead of reading them in place
  double record_rate = 1.0;       // share of the online completions streamed as records
  int64_t record_max_tokens = 0;  // positions per record (longer completions are split; 0: no cap)
};

// Writes out_dir/report.json and out_dir/tau.svg; returns a process exit code.
int run_demo(const DemoOptions& options);

}  // namespace updraft::demo
