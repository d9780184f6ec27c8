// Softmax and log-softmax over the last dimension, in f32, max-subtracted. A masked entry (-inf)
// gets probability exactly 0 (log-probability -inf). CPU: exp in 16-lane vectors, within 2 ulp.
// x, out [R, C] (out may be x). CPU: f32. CUDA: x f32 or bf16, out f32.
#pragma once

#include "kernels/core/tensor.h"

namespace updraft::ops {

void softmax(const Tensor& x, Tensor out);
void log_softmax(const Tensor& x, Tensor out);

}  // namespace updraft::ops
