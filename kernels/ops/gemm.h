// Matrix products. The policy, drafter and trainers do all their dense math through these.
//
// gemm:          c[M,N] = alpha * op(a) · op(b) + beta * c
//                op(a) is a [M,K] (trans_a=false) or a^T with a stored [K,M] (trans_a=true);
//                op(b) is b [K,N] (trans_b=false) or b^T with b stored [N,K] (trans_b=true).
// batched_gemm:  the same for every index of a leading batch dimension Bt (a, b, c all 3-D).
// linear:        y[T,N] = x[T,K] · w[N,K]^T (+ bias[N]) — the Hugging Face Linear layout.
//                Small T (decode, T <= 8) takes a bandwidth-bound GEMV path; on the CPU with
//                bf16/f16 weights and T <= 64 the same GEMV kernel runs tile by tile, so each
//                output row is bitwise the same whatever T is (decode vs verification).
//                CPU with bf16 weights: x is rounded to bf16 first (as on the GPU), products
//                are exact and summed in f32 (vdpbf16ps where the CPU has AVX512-BF16, for
//                every T, so there every row is also the same in prefill).
//
// dtypes
//   CPU : a, c f32; b f32, bf16 or f16 (weights); accumulation in f32.
//   CUDA: a, b the same dtype in {f32, bf16}; c f32 or bf16; accumulation in f32 (cuBLAS).
//   bias (linear) has b's dtype or f32.
// Preconditions (CheckFailure otherwise): shapes agree, all tensors on one device, c does not
// alias a or b. beta != 0 reads c.
#pragma once

#include "kernels/core/tensor.h"

namespace updraft::ops {

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor c, float alpha = 1.f, float beta = 0.f);

void batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor c, float alpha = 1.f,
                  float beta = 0.f);

void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor y);

}  // namespace updraft::ops
