// Training checkpoints: model weights, AdamW state and trainer state, saved atomically and
// validated completely before anything is loaded.
//
// Layout of a checkpoint directory <dir>:
//   model.safetensors      one F32 tensor per parameter, named as the parameter, in set order
//   optimizer.safetensors  "exp_avg.<name>" and "exp_avg_sq.<name>" per parameter (F32, the
//                          parameter's shape): AdamW's first and second moments
//   trainer_state.json     {
//     "format": "updraft.train_checkpoint", "version": 1,
//     "step": <the caller's step counter>,
//     "optimizer": {"type": "adamw", "steps": <t>, "beta1", "beta2", "eps", "weight_decay"},
//     "schedule": {"decay": "constant"|"linear"|"cosine", "peak_lr", "total_steps",
//                  "warmup_steps", "warmup_ratio", "min_lr_ratio"},
//     "params": {"count": <parameters>, "numel": <elements>},
//     "user": <any JSON the caller passed: RNG state, data cursor, counters; stored as given>,
//     "files": {"model.safetensors": {"bytes": <n>, "sha256": <hex>}, "optimizer.safetensors": {..}},
//     "state_sha256": <sha256 of this document without "state_sha256", serialised compactly
//                     with sorted keys, i.e. nlohmann::json::dump()>
//   }
// Doubles are written with round-trip precision, so a resumed run continues bit for bit.
//
// Atomic save. Files are written into "<dir>.tmp" (each fsynced, then the directory), and
// the finished directory replaces <dir> in one step:
//   * no <dir> yet: rename("<dir>.tmp", <dir>), fsync of the parent;
//   * <dir> exists: renameat2(RENAME_EXCHANGE) swaps the two directories atomically, the parent
//     is fsynced and the old checkpoint (now "<dir>.tmp") removed;
//   * where the filesystem cannot exchange (or CheckpointSaveOptions says not to): rename
//     <dir> to "<dir>.prev", fsync, rename "<dir>.tmp" to <dir>, fsync, remove "<dir>.prev".
// At every instant <dir> is therefore the complete old checkpoint or the complete new one;
// only inside the last path's window between its two renames is <dir> absent, with the
// complete old checkpoint at "<dir>.prev": load reads it from there, and the next save moves it
// back first. A half-written checkpoint only ever exists as "<dir>.tmp", which load never
// reads and save discards. The sha256 of every file, checked on load, also rejects a directory
// whose files come from different saves. One writer per <dir> at a time.
//
// Load validates, in this order, and throws updraft::Error naming the file (and the tensor)
// at the first failure: trainer_state.json present, parseable, its state_sha256 right, format
// and version known, every field of the right type and in range; both files present with the
// recorded size and sha256; every parameter in model.safetensors, both moments in
// optimizer.safetensors, each F32 with the parameter's shape; no other tensors. Only then are
// the parameter values and the optimiser state replaced: a failed load changes nothing.
//
// Thread safety: none; the training thread saves and loads between steps.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "trainer/adamw.h"
#include "trainer/params.h"

namespace updraft::train {

struct TrainState {
  int64_t step = 0;                                // the caller's step counter
  LrScheduleOptions schedule;                      // the schedule to rebuild on resume
  nlohmann::json user = nlohmann::json::object();  // opaque to this layer
};

struct CheckpointSaveOptions {
  // Called after each stage with its name: "tmp_created", "model_written", "optimizer_written",
  // "state_written" (the new checkpoint complete in "<dir>.tmp"), "old_moved" (the rename path
  // only: old checkpoint at "<dir>.prev"), "swapped" (new checkpoint at <dir>), "done" (old one
  // removed). Tests stop the process here to check every crash point.
  std::function<void(const std::string& stage)> after_stage;
  // False forces the two-rename path (tests; filesystems without RENAME_EXCHANGE use it anyway).
  bool use_rename_exchange = true;
};

// REQUIRES: `opt` was built on `params`. Errors: I/O (naming the path); a bad schedule in
// `state`; refusing to replace a <dir> that is neither empty nor a checkpoint.
void save_train_checkpoint(const std::string& dir, const ParamSet& params, const AdamW& opt, const TrainState& state,
                           const CheckpointSaveOptions& options = {});

// Loads into the existing `params` (the model defines names and shapes) and `opt` (moments,
// step count and options replaced); returns the trainer state. REQUIRES: `opt` built on `params`.
TrainState load_train_checkpoint(const std::string& dir, ParamSet& params, AdamW& opt);

}  // namespace updraft::train
