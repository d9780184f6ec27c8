// Matrix products. The policy, drafter and trainers do all their dense math through these.
//
// gemm:          c[M,N] = alpha * op(a) · op(b) + beta * c
//                op(a) is a [M,K] (trans_a=false) or a^T with a stored [K,M] (trans_a=true);
//                op(b) is b [K,N] (trans_b=false) or b^T with b stored [N,K] (trans_b=true).
// batched_gemm:  the same for every index of a leading batch dimension Bt (a, b, c all 3-D).
// linear:        y[T,N] = x[T,K] · w[N,K]^T (+ bias[N]) — the Hugging Face Linear layout.
//                Small T (decode, T <= 8) takes a bandwidth-bound GEMV path; on the CPU with
//                bf16/f16 weights every T runs GEMV kernels tile by tile, so each output row is
//                bitwise the same whatever T is (decode, verification, prefill, any batch). With
//                f32 weights that holds up to T = 8 (beyond, sgemm).
//                CPU with bf16 weights: x is rounded to bf16 first (as on the GPU), products
//                are exact and summed in f32 by the process's bf16 kernel (below), which
//                computes every row the same whatever T is, prefill included.
//
// dtypes
//   CPU : a, c f32; b f32, bf16 or f16 (weights); accumulation in f32.
//   CUDA: a, b the same dtype in {f32, bf16}; c f32 or bf16; accumulation in f32 (cuBLAS).
//   bias (linear) has b's dtype or f32.
// Preconditions (CheckFailure otherwise): shapes agree, all tensors on one device, c does not
// alias a or b. beta != 0 reads c.
//
// CPU bf16 kernel: one per process, since a row's last bits depend on the kernel. kAuto (the
// default) resolves at the first bf16 linear(): kDot (vdpbf16ps) with AVX512-BF16, else kFma
// (weights widened in registers, f32 FMAs) with AVX-512, else kPortable. kAmx (AMX-BF16 tiles;
// K not a multiple of 32 runs kFma) is opt-in: far faster for many rows (prefill, large
// batches), slower for one.
// set_cpu_bf16_kernel (CheckFailure if the CPU lacks the kernel) belongs before the first
// forward pass: switching mid-run changes the last bits of later rows against earlier ones
// (benchmarks switch between runs to compare kernels side by side).
#pragma once

#include <string_view>

#include "kernels/core/tensor.h"

namespace updraft::ops {

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor c, float alpha = 1.f, float beta = 0.f);

void batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor c, float alpha = 1.f,
                  float beta = 0.f);

void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor y);

enum class CpuBf16Kernel { kAuto, kPortable, kFma, kDot, kAmx };
void set_cpu_bf16_kernel(CpuBf16Kernel k);
CpuBf16Kernel cpu_bf16_kernel();  // the kernel in use, resolving kAuto on the first call
bool cpu_bf16_kernel_available(CpuBf16Kernel k);
const char* cpu_bf16_kernel_name(CpuBf16Kernel k);
CpuBf16Kernel parse_cpu_bf16_kernel(std::string_view name);  // auto|portable|fma|dot|amx, else CheckFailure

}  // namespace updraft::ops
