// RMSNorm (Llama / Qwen): out[r,:] = x[r,:] * rsqrt(mean(x[r,:]^2) + eps) * w
// Statistics in f32 whatever the storage type (as Hugging Face does).
//
// x, out [R, H] (out may be x: in place); w [H].
// CPU: x, out f32; w f32/bf16/f16.   CUDA: x, out f32 or bf16 (same); w f32/bf16.
// Qwen3's per-head q/k norm is this op on x viewed as [T*NH, HD].
#pragma once

#include "kernels/core/tensor.h"

namespace updraft::ops {

void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out);

}  // namespace updraft::ops
