// AdamW on f32 master weights, global-norm gradient clipping, and the learning-rate schedule.
//
// A training step reads:
//
//   const double norm = clip_grad_norm(params, max_norm);
//   if (!std::isfinite(norm)) { ++skipped; params.zero_grad(); }   // no update: weights stay finite
//   else opt.step(schedule.lr(step));
//
// AdamW (Loshchilov & Hutter; torch.optim.AdamW's formulas, spelled out in kernels/ops/optim.h):
// per parameter, m and v are f32 tensors on the parameter's device, zero at construction.
// step(lr) advances the step count t (so the first update uses t = 1 in the bias corrections)
// and updates every parameter; weight decay is decoupled (value *= 1 - lr * weight_decay) and
// applies only to Params with weight_decay == true. Updates are elementwise, so results do not
// depend on the thread count: the same gradients give the same bits.
//
// LrSchedule: `step` counts updates already applied, so lr(0) is the rate of the first update.
//   warmup (W steps, from warmup_steps, or ceil(warmup_ratio * total_steps) when that is 0):
//     lr(s) = peak_lr * (s + 1) / W  for s < W, reaching peak_lr at s = W - 1;
//   then, with progress p = (s - W) / (total_steps - W) clamped to [0, 1] and
//   min = peak_lr * min_lr_ratio:
//     constant: peak_lr                   (total_steps may be 0)
//     linear:   (1 - p) * peak_lr + p * min
//     cosine:   c * peak_lr + (1 - c) * min,  c = (1 + cos(pi * p)) / 2
//   so lr(total_steps) = min, and steps past the end stay there.
//
// Errors: options come from configuration, so a bad value is an updraft::Error naming the field.
// Misuse (a parameter set that changed size, a negative lr) is a CheckFailure.
// Thread safety: none; one training thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/params.h"

namespace updraft::train {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;

  void validate() const;  // Error: betas in [0, 1), eps > 0, weight_decay >= 0, all finite
};

class AdamW {
 public:
  // REQUIRES: `params` is complete and outlives the optimiser.
  AdamW(const ParamSet& params, AdamWOptions options);
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update of every parameter from its gradient times grad_scale (clip_scale's, or 1).
  // REQUIRES: lr >= 0 and finite gradients (a NaN gradient would spread into m, v and the
  // weights: check the norm first). The gradients are left as they were.
  void step(double lr, float grad_scale = 1.f);

  const ParamSet& params() const { return params_; }
  const AdamWOptions& options() const { return options_; }
  int64_t steps() const { return steps_; }  // updates applied: t of the bias corrections
  // First and second moments of parameter i (handles onto the optimiser's state).
  const Tensor& exp_avg(size_t i) const { return m_.at(i); }
  const Tensor& exp_avg_sq(size_t i) const { return v_.at(i); }

  // Replaces the whole state (checkpoint resume). m and v are in set order with each
  // parameter's shape, f32, any device (copied). All preconditions are checked (CheckFailure)
  // before anything changes.
  void restore(int64_t steps, const AdamWOptions& options, const std::vector<Tensor>& m, const std::vector<Tensor>& v);

 private:
  const ParamSet& params_;
  AdamWOptions options_;
  int64_t steps_ = 0;
  std::vector<Tensor> m_, v_;
};

// Scales every gradient by max_norm / norm when the global norm exceeds max_norm (so the norm
// after clipping is max_norm, up to f32 rounding) and returns the norm before clipping. A
// non-finite norm leaves the gradients untouched and is returned as is: the caller skips the
// step (and counts it). REQUIRES: max_norm > 0.
double clip_grad_norm(const ParamSet& params, double max_norm);
// The same clipping without touching the gradients: the factor clip_grad_norm would scale them by
// (1 when the norm is within max_norm or not finite), for AdamW::step to apply as it reads them
// (bit for bit the same update, one pass over the gradients fewer); *norm gets the norm.
float clip_scale(const ParamSet& params, double max_norm, double* norm);

enum class LrDecay { Constant, Linear, Cosine };
const char* lr_decay_name(LrDecay d);              // "constant", "linear", "cosine"
LrDecay lr_decay_from_name(const std::string& s);  // Error for any other name

struct LrScheduleOptions {
  LrDecay decay = LrDecay::Cosine;
  double peak_lr = 1e-4;
  int64_t total_steps = 0;
  int64_t warmup_steps = 0;
  double warmup_ratio = 0;  // used when warmup_steps is 0; at most one of the two is non-zero
  double min_lr_ratio = 0;  // final lr = peak_lr * min_lr_ratio
};

class LrSchedule {
 public:
  // Error naming the field: peak_lr > 0 and finite; total_steps >= 0 (> 0 for linear and cosine,
  // and for a warmup_ratio); warmup_steps in [0, total_steps] (any >= 0 for constant without
  // total_steps); warmup_ratio and min_lr_ratio in [0, 1]; not both warmup_steps and warmup_ratio.
  explicit LrSchedule(LrScheduleOptions options);

  double lr(int64_t step) const;  // REQUIRES: step >= 0
  int64_t warmup_steps() const { return warmup_; }
  const LrScheduleOptions& options() const { return options_; }

 private:
  LrScheduleOptions options_;
  int64_t warmup_ = 0;
};

}  // namespace updraft::train
