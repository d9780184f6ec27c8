// Internal: the per-backend entry points behind the op contracts in this folder.
// The contract file (e.g. norm.cc) checks shapes, dtypes and devices, then calls
// cpu::<op> or cuda::<op>. Backends may assume the checks passed. Not a public header.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops/attention.h"
#include "kernels/ops/paged_attention.h"
#include "kernels/ops/rope.h"

namespace updraft::ops {

#define UPD_OPS_DECLARE_BACKEND(ns)                                                                              \
  namespace ns {                                                                                                 \
  void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, float alpha, float beta);             \
  void batched_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, float alpha, float beta);     \
  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y);                                  \
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out);                                       \
  void rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq);                                         \
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out);                                              \
  void add(const Tensor& a, const Tensor& b, Tensor& out);                                                       \
  void convert(const Tensor& src, Tensor& dst);                                                                  \
  void softmax(const Tensor& x, Tensor& out, bool log);                                                          \
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,                   \
                 const Tensor& tree_mask_dev, float scale, Tensor& out, Tensor* lse);                            \
  void paged_attention(const Tensor& q, const PagedKv& kv, const Tensor& block_table, const Tensor& kv_len,      \
                       const Tensor& q_start, const Tensor& tree_mask, const Tensor& mask_len, float scale,    \
                       Tensor& out);                                                                           \
  void copy_rows(const Tensor& src, const Tensor& src_idx, Tensor& dst, const Tensor& dst_idx);                  \
  void embedding(const Tensor& ids, const Tensor& table, Tensor& out);                                           \
  void argmax(const Tensor& x, Tensor& out);                                                                     \
  void topk(const Tensor& x, int64_t k, Tensor& values, Tensor& indices);                                        \
  void sampling_probs(const Tensor& logits, const Tensor& temperature, const Tensor& top_k, const Tensor& top_p, \
                      Tensor& probs);                                                                            \
  void sample_from_probs(const Tensor& probs, const Tensor& uniforms, Tensor& out);                              \
  void cross_entropy(const Tensor& logits, const Tensor& target, Tensor& loss);                                  \
  void soft_cross_entropy(const Tensor& logits, const Tensor& teacher, Tensor& loss);                            \
  }

UPD_OPS_DECLARE_BACKEND(cpu)

namespace cpu {
// out[i] = softmax(x * scale)[i] over one row of C (out may be x): the CPU softmax's vector exp
// and lane sums; entries of x at -inf get exactly 0.
void softmax_row_scaled(const float* x, float scale, float* out, int64_t C);
// ops::top_log_softmax on the CPU: one pass over each row after its max and sum.
void top_log_softmax(const Tensor& x, int64_t k, Tensor& values, Tensor& indices);
// Visible key indices of query i (of T) under `mask`, in increasing order (tree: bool [T, T]).
void visible_keys(const AttentionMask& m, const uint8_t* tree, int64_t T, int64_t i, std::vector<int64_t>& out);
}  // namespace cpu
UPD_OPS_DECLARE_BACKEND(cuda)
namespace cuda {
// y_i = x w_i^T for each i in one launch of the kernel whose rows do not depend on the row count
// (bf16 x and w_i, one output dtype, up to 4 products, up to 16 rows or a few hundred for small
// weights: gemm_cuda.cu); false, with nothing computed, where it does not apply.
bool linear_rows(const Tensor& x, const std::vector<const Tensor*>& ws, const std::vector<Tensor*>& ys);
}  // namespace cuda
#undef UPD_OPS_DECLARE_BACKEND

}  // namespace updraft::ops

// Calls the backend of `device` (a Device value) for op `name` with the given arguments.
#ifdef UPDRAFT_WITH_CUDA
#define UPD_DISPATCH(device, name, ...)        \
  do {                                         \
    if ((device) == ::updraft::Device::CPU) {  \
      ::updraft::ops::cpu::name(__VA_ARGS__);  \
    } else {                                   \
      ::updraft::ops::cuda::name(__VA_ARGS__); \
    }                                          \
  } while (0)
#else
#define UPD_DISPATCH(device, name, ...)                                        \
  do {                                                                         \
    if ((device) == ::updraft::Device::CPU) {                                  \
      ::updraft::ops::cpu::name(__VA_ARGS__);                                  \
    } else {                                                                   \
      UPD_FAIL() << #name ": built without CUDA, cannot run on a CUDA tensor"; \
    }                                                                          \
  } while (0)
#endif
