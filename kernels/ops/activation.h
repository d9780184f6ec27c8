// Element-wise ops of the decoder layer.
//
// silu_mul: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)); gate, up, out [R, I].
// add:      out = a + b (the residual stream); all [same shape]. out may alias a or b.
// convert:  dst = src converted between f32/bf16/f16 (RNE), same numel, same device.
// CPU: f32 (convert: any float types).  CUDA: f32 or bf16, all tensors the same dtype.
#pragma once

#include "kernels/core/tensor.h"

namespace updraft::ops {

void silu_mul(const Tensor& gate, const Tensor& up, Tensor out);
void add(const Tensor& a, const Tensor& b, Tensor out);
void convert(const Tensor& src, Tensor dst);

}  // namespace updraft::ops
