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
// default) resolves at the first bf16 linear(): kAmx (AMX-BF16 tiles; K not a multiple of 32
// runs kFma) where the CPU and the OS grant it, else kDot (vdpbf16ps) with AVX512-BF16, else
// kFma (weights widened in registers, f32 FMAs) with AVX-512, else kAvx2 (the same in 256-bit
// vectors) with AVX2 and FMA, else kPortable. AMX needs its
// weights in panels (prepare_linear) for one row to run as fast as kDot; it is far faster for
// several rows (verification, batches, prefill).
// set_cpu_bf16_kernel (CheckFailure if the CPU lacks the kernel) belongs before the first
// forward pass: switching mid-run changes the last bits of later rows against earlier ones
// (benchmarks switch between runs to compare kernels side by side).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "kernels/core/tensor.h"

namespace updraft::ops {

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor c, float alpha = 1.f, float beta = 0.f);

void batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor c, float alpha = 1.f,
                  float beta = 0.f);

void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor y);

// A linear layer's weight prepared for the process's CPU bf16 kernel: the policy's and the
// drafter's serving weights. Where the kernel is AMX, prepare_linear adds a copy of a bf16 CPU
// weight [N, K] (K a multiple of 32) laid out in tile panels, which one decode row streams near
// the cache bandwidth where row-major tile loads do not (kernels/README.md); where it is the
// vdpbf16ps kernel (dot), a copy in that kernel's 32-row panels, one sequential stream per thread
// where row-major rows are eight. Either costs a second copy of the weight's bytes. linear()
// reads the panels made for the process's kernel while it is that kernel, and the row-major
// weight otherwise; both give the same bits (the same values through the same
// instructions in the same order), so packing changes only speed. The panels do not follow later
// writes into w: prepare weights that are not written in place (serving weights are replaced
// whole), or prepare them again after a write.
// On the dot kernel a bf16 weight without panels is packed into them on every call (one pass
// over the weight: at decode's row counts several times the product's own time, repaid at
// training's), so serving weights are prepared.
namespace cpu {
struct Int8Weight;
}
struct LinearWeight {
  Tensor w;       // [N, K], the Hugging Face layout
  Tensor panels;  // undefined, or w's values in AMX tile panels
  std::shared_ptr<const cpu::Int8Weight> q8;  // null, or the int8 weights linear() uses instead of w
  Tensor dot_panels;                          // undefined, or w's values in the vdpbf16ps kernel's 32-row panels
};
LinearWeight prepare_linear(Tensor w);
// int8 weights, for a drafter's serving weights where asked (`--draft-weights int8`): a CPU
// weight quantized per row, and each input row per call (kernels/ops/gemv_cpu.h, "int8
// weights"), so y approximates x w^T to about 1% and is no longer bitwise the bf16 product.
// Every output row is the same whatever T is and however threads split the work (exact int32
// sums). AMX-INT8 tiles where cpu_has_int8_tiles() and K is a multiple of 64, else AVX512-VNNI
// where the CPU has it, else a scalar loop (correct, slow). CheckFailure for a CUDA weight: int8
// weights are a CPU path. cpu_int8_kernel_name(): "AMX-INT8", "AVX512-VNNI" or "none" (the loop).
LinearWeight prepare_linear_int8(Tensor w);
bool cpu_has_int8_tiles();
bool cpu_has_int8_vectors();  // AVX512-VNNI
const char* cpu_int8_kernel_name();
void linear(const Tensor& x, const LinearWeight& w, const Tensor* bias, Tensor y);

// Products of one input with several weights (q, k and v; gate and up): each y = x w^T (+ bias)
// exactly as linear() computes it. On the CPU, bf16 weights on any kernel but the portable one
// run in one pass of the thread team that rounds or packs x once (a team's start and join cost a
// few microseconds each, a twentieth of a small policy's decode step), from the panels made for
// the process's kernel where the weights have them; int8 weights likewise. On CUDA, bf16 products without
// biases over up to 16 rows (more for small weights) run in one launch of the kernel linear()
// uses for them, with the same bits. Otherwise one linear() each.
struct LinearProduct {
  const LinearWeight* w;
  const Tensor* bias;  // nullptr: none
  Tensor y;
};
void linear_shared_input(const Tensor& x, std::vector<LinearProduct> products);

enum class CpuBf16Kernel { kAuto, kPortable, kFma, kDot, kAmx, kAvx2 };
void set_cpu_bf16_kernel(CpuBf16Kernel k);
CpuBf16Kernel cpu_bf16_kernel();  // the kernel in use, resolving kAuto on the first call
bool cpu_bf16_kernel_available(CpuBf16Kernel k);
const char* cpu_bf16_kernel_name(CpuBf16Kernel k);
CpuBf16Kernel parse_cpu_bf16_kernel(std::string_view name);  // auto|portable|avx2|fma|dot|amx, else CheckFailure

}  // namespace updraft::ops
