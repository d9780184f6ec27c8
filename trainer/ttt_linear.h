// The TTT drafter trainer's matrix products, y = x·w^T and its backward, in one of two precisions:
//
//   F32   f32 operands, OpenBLAS sgemm (ops::linear / ops::linear_backward): the reference.
//   BF16  operands rounded to bf16 (round to nearest even), products summed in f32 by the
//         process's CPU bf16 kernel (ops::cpu_bf16_kernel(); it pays with AMX tiles, which take
//         many rows at the cost of one). The weights stay f32 in the optimiser (master weights);
//         refresh() makes their bf16 copies, w and w^T, after they change. Gradients are f32 and
//         accumulated as linear_backward does; they differ from F32's by bf16 rounding.
//
// Every dimension a product sums over should be a multiple of 32 for AMX (the drafter's sizes
// are; a sum over rows is padded with zeros); otherwise the kernel's vector path runs.
// Thread safety: none (one training thread).
#pragma once

#include <string_view>
#include <unordered_map>
#include <vector>

#include "kernels/core/tensor.h"
#include "trainer/params.h"

namespace updraft::train {

enum class TttMatmul { F32, BF16 };
TttMatmul parse_ttt_matmul(std::string_view name);  // "f32" | "bf16" | "auto", else Error
const char* ttt_matmul_name(TttMatmul m);
// "auto": BF16 where the process's CPU bf16 kernel is AMX, else F32.
TttMatmul auto_ttt_matmul();

class TttLinears {
 public:
  explicit TttLinears(TttMatmul m = TttMatmul::F32) : precision_(m) {}
  TttMatmul precision() const { return precision_; }
  void set_precision(TttMatmul m);

  // BF16: rounds each weight to bf16, and with `transposed` also its transpose (for dx). F32:
  // nothing. Either way, weight gradients still deferred from an unfinished backward are dropped.
  void refresh(const std::vector<const Param*>& weights, bool transposed);
  // y[T, N] = x[T, K]·w^T. BF16 needs refresh() since w last changed.
  void forward(const Tensor& x, const Param& w, Tensor y) const;
  // dx[T, K] = dy·w (written, or added with accumulate_dx; skipped when dx is null) and
  // w.grad += dy^T·x: F32 at once; BF16 at flush_grads(), the rows of every call for the same
  // weight summed in one product (x and dy are held until then: do not modify them).
  // BF16 needs refresh(.., true) since w last changed.
  void backward(const Tensor& x, const Param& w, const Tensor& dy, Tensor* dx, bool accumulate_dx);
  // Adds the deferred weight gradients (BF16); nothing for F32.
  void flush_grads();

 private:
  struct Copies {
    Tensor w, wt;             // bf16 [N, K] and [K, N]
    bool wt_current = false;  // wt made by the last refresh
  };
  struct Pending {
    const Param* w;
    Tensor x, dy;
  };
  const Copies& copies(const Param& w, bool transposed) const;

  TttMatmul precision_;
  std::unordered_map<const Param*, Copies> copies_;
  std::vector<Pending> pending_;
};

}  // namespace updraft::train
