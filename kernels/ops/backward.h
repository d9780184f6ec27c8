// Backward passes of the ops a Llama decoder layer and the EAGLE-3 drafter use, for training.
// Each takes the forward op's inputs (and, where cheaper, its saved outputs) plus the gradient
// of the loss with respect to the forward output, and produces the gradients of the inputs.
//
// Conventions
//   * "d" prefixes a gradient: dy = dLoss/dy.
//   * Parameter gradients (dw, db, dtable) are ACCUMULATED (+=), so steps of a training-time-test
//     unroll and micro-batches add up; the trainer zeroes them.
//   * Input gradients (dx, dq, ...) are WRITTEN unless the op says `accumulate`.
//   * Everything is f32. CPU now; a CUDA tensor is a CheckFailure (the CUDA versions follow).
//
// linear_backward:   y = x·w^T (+b).  dx[T,K] = dy·w (+= when accumulate_dx);
//                    dw[N,K] += dy^T·x;  db[N] += Σ_t dy[t].  Any of dx, dw, db may be null.
// rms_norm_backward: y = x·r·w, r = rsqrt(mean(x²) + eps), per row of x [R, H].
//                    dx = r·(w∘dy) − r³·x·Σ(w∘dy∘x)/H;   dw += Σ_rows dy∘x·r.
// rope_backward:     the forward rotation is orthogonal: dx is dy rotated by −angle, in place
//                    (x [T, NH, HD], same positions and inv_freq as the forward).
// silu_mul_backward: out = silu(g)·u.  dg = dout·u·σ(g)·(1 + g·(1 − σ(g)));  du = dout·silu(g).
// embedding_backward: out[t] = table[ids[t]].  dtable[ids[t]] += dout[t]; ids validated.
// attention_backward: the forward of ops::attention (any mask kind; GQA) given q, k, v, its
//                    output `out` and log-sum-exp `lse` [T, NH] (saved by the forward), and
//                    dout: dq [T,NH,HD] written, dk, dv [S,NKV,HD] ADDED to (the TTT trainer
//                    sums the key gradients a step receives from all later steps).
// cross_entropy_backward:      loss[r] = lse(z[r]) − z[r, t[r]] scaled by dloss[r]:
//                              dz[r] = dloss[r]·(softmax(z[r]) − onehot(t[r])); ignored rows
//                              (t < 0) get 0.
// soft_cross_entropy_backward: loss[r] = −Σ p·log_softmax(z), scaled by dloss[r]:
//                              dz[r] = dloss[r]·(Σp·softmax(z[r]) − p[r]).
// dz is written in both; it may alias logits (in place).
#pragma once

#include "kernels/core/tensor.h"
#include "kernels/ops/attention.h"

namespace updraft::ops {

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, bool accumulate_dx, Tensor* dw,
                     Tensor* db);

void rms_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor dx, Tensor* dw);

void rope_backward(Tensor dx, const Tensor& positions, const Tensor& inv_freq);

void silu_mul_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor dgate, Tensor dup);

void embedding_backward(const Tensor& ids, const Tensor& dout, Tensor dtable);

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, const AttentionMask& mask, float scale, Tensor dq, Tensor dk, Tensor dv);

void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& dloss, Tensor dlogits);

void soft_cross_entropy_backward(const Tensor& logits, const Tensor& teacher, const Tensor& dloss, Tensor dlogits);

}  // namespace updraft::ops
