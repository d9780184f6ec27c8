// Hands out a checkpoint's tensors by name for a model being built, checking each one's dtype
// and shape against what the config implies, and remembering which were taken so that leftovers
// (tensors of another architecture, a wrong config) are reported instead of silently ignored.
// Every failure is an Error naming `where` and the tensor.
//
// Weights are returned as stored on the CPU (views into the memory-mapped file); on CUDA they
// are converted to bf16 on the host and copied to the device.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "kernels/core/tensor.h"

namespace updraft {

class WeightTaker {
 public:
  using Getter = std::function<Tensor(const std::string&)>;
  WeightTaker(const std::vector<std::string>& names, Getter get, Device device, std::string where);

  bool has(const std::string& name) const { return names_.count(name) != 0; }
  // A floating-point weight (f32/bf16/f16) of exactly `shape`, every value finite (a NaN or
  // infinity would poison every output: such a checkpoint is refused here, wherever it comes from).
  Tensor take(const std::string& name, const Shape& shape);
  // The tensor as stored, any dtype, on the CPU (index buffers such as d2t).
  Tensor take_raw(const std::string& name);
  void ignore(const std::string& name) { taken_.insert(name); }
  // Error naming the first tensor nobody took (rotary inv_freq buffers excepted).
  void check_all_taken() const;

 private:
  std::set<std::string> names_, taken_;
  Getter get_;
  Device device_;
  std::string where_;
};

}  // namespace updraft
