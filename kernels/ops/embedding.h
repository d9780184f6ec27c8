// Embedding gather: out[t, :] = table[ids[t], :].
// ids i32 [T]; table [V, H] f32/bf16/f16; out [T, H].
// CPU: out f32; an id outside [0, V) throws Error naming it (bad input, nothing written).
// CUDA: out f32 or bf16; ids must have been validated on the host (rows with an invalid id
// are written as zeros).
#pragma once

#include "kernels/core/tensor.h"

namespace updraft::ops {

void embedding(const Tensor& ids, const Tensor& table, Tensor out);

}  // namespace updraft::ops
