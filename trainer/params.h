// Trainable parameters: one f32 master tensor and its gradient per Param, and the ParamSet a
// model hands to the optimiser and the checkpoint writer.
//
// Ownership: a model owns its Params (as members); a ParamSet holds pointers to them, in the
// order they were added, which is the order of every per-parameter list derived from it
// (optimiser state, checkpoint files). The Params must outlive the set and anything built on
// it (AdamW). Tensors are handles: the set never copies parameter data except where a function
// below says it returns copies.
//
// Preconditions (CheckFailure when violated, at add()): a unique non-empty name; value and grad
// defined, f32, the same shape, on the same device.
//
// Thread safety: none; a ParamSet and its Params are used by one training thread.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/core/tensor.h"

namespace updraft::train {

struct Param {
  std::string name;          // unique, e.g. "layers.0.self_attn.q_proj.weight"
  Tensor value;              // f32 master weights
  Tensor grad;               // f32, same shape; accumulated by backward, zeroed by the trainer
  bool weight_decay = true;  // false for norms and biases
};

// A Param with zero-filled value and grad of `shape` on `device`.
Param make_param(std::string name, const Shape& shape, bool weight_decay = true, Device device = Device::CPU);

class ParamSet {
 public:
  void add(Param& p);

  size_t size() const { return params_.size(); }
  Param& operator[](size_t i) const { return *params_[i]; }
  const std::vector<Param*>& list() const { return params_; }
  std::vector<Param*>::const_iterator begin() const { return params_.begin(); }
  std::vector<Param*>::const_iterator end() const { return params_.end(); }

  Param* find(const std::string& name) const;  // nullptr when absent
  void zero_grad();
  int64_t numel() const;  // total elements over all values
  // The name of the first value holding a NaN or infinity; "" when every value is finite.
  std::string non_finite() const;

  // sqrt(Σ over all grads of g²), accumulated in double in a fixed order (see ops::sum_squares):
  // the same gradients always give the same norm. Non-finite when any gradient element is.
  double grad_norm() const;

  // (name, value) handles in set order, no copy: for writers that finish before training goes on.
  std::vector<std::pair<std::string, Tensor>> values() const;
  // (name, copy) in set order: CPU tensors converted to `dtype` (f32, bf16 or f16, round to
  // nearest even), independent of the training weights. bf16 is what a published drafter or a
  // served policy is saved in.
  std::vector<std::pair<std::string, Tensor>> copy_values(DType dtype) const;

 private:
  std::vector<Param*> params_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace updraft::train
