// Softmax and log-softmax over the last dimension, in f32, max-subtracted.
// x, out [R, C] (out may be x). CPU: f32. CUDA: x f32 or bf16, out f32.
#pragma once

#include "kernels/core/tensor.h"

namespace updraft::ops {

void softmax(const Tensor& x, Tensor out);
void log_softmax(const Tensor& x, Tensor out);

}  // namespace updraft::ops
