// argmax and top-k over the last dimension.
// argmax: x [R, C] -> out i32 [R]; the first (lowest) index among equal maxima.
// topk:   x [R, C] -> values f32 [R, k], indices i32 [R, k], sorted by value descending,
//         ties broken by lower index; 1 <= k <= C.
// top_log_softmax: x [R, C] -> the k largest entries of log_softmax(x) per row and their
//         indices, as topk orders them: bitwise what log_softmax then topk give on the same
//         backend, without the [R, C] intermediate (the drafter's proposal, every draft step).
//         The CPU computes it in one pass over each row after its max and sum; CUDA runs the two
//         ops.
// CPU: x f32. CUDA: x f32 or bf16.
#pragma once

#include "kernels/core/tensor.h"

namespace updraft::ops {

void argmax(const Tensor& x, Tensor out);
void topk(const Tensor& x, int64_t k, Tensor values, Tensor indices);
void top_log_softmax(const Tensor& x, int64_t k, Tensor values, Tensor indices);

}  // namespace updraft::ops
