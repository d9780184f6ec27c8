// Internal: the CPU implementations behind kernels/ops/backward.h (contracts checked there).
#pragma once

#include "kernels/core/tensor.h"
#include "kernels/ops/attention.h"

namespace updraft::ops::cpu {

void add_column_sums(const Tensor& m, Tensor& sums);  // sums[N] += Σ_rows m[T, N]
void rms_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor& dx, Tensor* dw);
void rope_rotate(Tensor& x, const Tensor& positions, const Tensor& inv_freq, float sign);
void silu_mul_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup);
void embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dtable);
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, const AttentionMask& mask, float scale, Tensor& dq, Tensor& dk, Tensor& dv);
void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& dloss, Tensor& dlogits);
void soft_cross_entropy_backward(const Tensor& logits, const Tensor& teacher, const Tensor& dloss, Tensor& dlogits);

}  // namespace updraft::ops::cpu
