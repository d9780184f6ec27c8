// Per-row losses over the last dimension (f32 math).
//
// cross_entropy:      loss[r] = logsumexp(z[r]) - z[r, target[r]];  target < 0 -> loss 0
//                     (ignored row). logits [R, C]; target i32 [R]; loss f32 [R].
//                     A target >= C throws CheckFailure (CPU); on CUDA it yields NaN
//                     (targets come from validated token ids).
// soft_cross_entropy: loss[r] = -sum_c p[r, c] * log_softmax(z[r])[c].
//                     logits [R, C]; teacher probs [R, C] (rows sum to 1 or are all 0);
//                     loss f32 [R].
// CPU: f32. CUDA: logits f32 or bf16, teacher f32.
#pragma once

#include "kernels/core/tensor.h"

namespace updraft::ops {

void cross_entropy(const Tensor& logits, const Tensor& target, Tensor loss);
void soft_cross_entropy(const Tensor& logits, const Tensor& teacher, Tensor loss);

}  // namespace updraft::ops
