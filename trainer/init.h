// Seeded parameter initialisation for the trainers (deterministic for a given seed and stream,
// whatever the thread count): counter-based uniforms turned into normals by Box–Muller; and the
// store that owns a model's Params (stable addresses, so the ParamSet over them survives moves).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/tensor.h"
#include "trainer/params.h"

namespace updraft::train {

// f32 CPU tensor ~ N(0, std^2); `stream` separates tensors drawn from one seed.
Tensor init_normal(const Shape& shape, float std, uint64_t seed, uint64_t stream);
Tensor init_constant(const Shape& shape, float value);

class ParamStore {
 public:
  // A new Param holding `value` (f32 CPU) with a zeroed gradient, added to set().
  Param* add(const std::string& name, Tensor value, bool weight_decay);
  ParamSet& set() { return set_; }
  const ParamSet& set() const { return set_; }

 private:
  std::vector<std::unique_ptr<Param>> owned_;
  ParamSet set_;
};

}  // namespace updraft::train
