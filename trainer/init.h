// Seeded parameter initialisation for the trainers (deterministic for a given seed and stream,
// whatever the thread count): counter-based uniforms turned into normals by Box–Muller.
#pragma once

#include <cstdint>

#include "kernels/core/tensor.h"

namespace updraft::train {

// f32 CPU tensor ~ N(0, std^2); `stream` separates tensors drawn from one seed.
Tensor init_normal(const Shape& shape, float std, uint64_t seed, uint64_t stream);
Tensor init_constant(const Shape& shape, float value);

}  // namespace updraft::train
