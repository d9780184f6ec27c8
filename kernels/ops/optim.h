// Optimiser ops on f32 tensors (master weights, gradients, Adam moments), CPU and CUDA.
//
// sum_squares(x):  Σ x[i]² accumulated in double in a fixed order: x is cut into chunks of
//                  kSumSquaresChunk elements, each chunk summed in a fixed pattern, the chunk
//                  sums added in chunk order. The result depends only on the values and the
//                  backend, never on the thread count, so a resumed run clips exactly like an
//                  uninterrupted one. Returned on the host (a CUDA call waits for the stream).
//                  A non-finite element gives a non-finite result (inf, or NaN for a NaN).
// scale_(x, s):    x[i] *= s, in place.
// adamw_update:    one AdamW step of one tensor, element by element in f32, each operation
//                  rounded once as written (no FMA contraction, so CPU and CUDA agree bit for bit):
//                    g  = grad * grad_scale                   (gradient clipping folded in; 1: none)
//                    p  = value * decay                       decay = 1 - lr * weight_decay
//                    m  = beta1 * m + one_minus_beta1 * g
//                    v  = beta2 * v + one_minus_beta2 * (g * g)
//                    value = p - step_size * (m / (sqrt(v) / bc2_sqrt + eps))
//                  with step_size = lr / (1 - beta1^t) and bc2_sqrt = sqrt(1 - beta2^t) for the
//                  t-th step: PyTorch's torch.optim.AdamW with decoupled weight decay. The
//                  caller (trainer/adamw.h) derives the coefficients once per step in double.
//
// Preconditions (CheckFailure): f32 tensors on one device, grad/m/v shaped like value.
#pragma once

#include <cstdint>

#include "kernels/core/tensor.h"

namespace updraft::ops {

constexpr int64_t kSumSquaresChunk = int64_t{1} << 16;

struct AdamWCoefficients {
  float decay = 1.f;
  float beta1 = 0.9f, one_minus_beta1 = 0.1f;
  float beta2 = 0.999f, one_minus_beta2 = 0.001f;
  float step_size = 0.f;
  float bc2_sqrt = 1.f;
  float eps = 1e-8f;
  float grad_scale = 1.f;  // the gradient is multiplied by this first: scale_ then 1, bit for bit
};

double sum_squares(const Tensor& x);
void scale_(Tensor x, float s);
void adamw_update(Tensor value, const Tensor& grad, Tensor m, Tensor v, const AdamWCoefficients& c);

}  // namespace updraft::ops
