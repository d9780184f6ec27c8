#include "kernels/ops/paged_attention.h"

#include <set>

#include "kernels/ops/backend.h"

namespace updraft::ops {

void paged_attention(const Tensor& q, const PagedKv& kv, const Tensor& block_table, const Tensor& kv_len,
                     const Tensor& q_start, const Tensor& tree_mask, float scale, Tensor out, const Tensor& mask_len) {
  const char* op = "paged_attention";
  check_same_device(op, {&q, &kv.k_cache, &kv.v_cache, &out});
  UPD_CHECK(q.dim() == 3 && kv.k_cache.dim() == 3) << op << ": q [T,NH,HD], caches [NSLOT,NKV,HD]";
  const int64_t T = q.size(0), NH = q.size(1), HD = q.size(2), NSLOT = kv.k_cache.size(0), NKV = kv.k_cache.size(1);
  check_shape(op, "v_cache", kv.v_cache, kv.k_cache.shape());
  check_shape(op, "out", out, q.shape());
  UPD_CHECK(kv.k_cache.size(2) == HD) << op << ": head dims differ";
  UPD_CHECK(NKV > 0 && NH % NKV == 0) << op << ": NH=" << NH << " not a multiple of NKV=" << NKV;
  UPD_CHECK(kv.block_size > 0 && NSLOT % kv.block_size == 0) << op << ": cache slots not whole blocks";
  UPD_CHECK(kv.k_cache.dtype() == q.dtype() && kv.v_cache.dtype() == q.dtype() && out.dtype() == q.dtype())
      << op << ": q, caches, out must share a dtype";
  if (q.is_cpu())
    check_dtype(op, "q", q, {DType::F32});
  else
    check_dtype(op, "q", q, {DType::F32, DType::BF16});
  UPD_CHECK(block_table.is_cpu() && kv_len.is_cpu() && q_start.is_cpu()) << op << ": index tensors on the CPU";
  check_dtype(op, "block_table", block_table, {DType::I32});
  check_dtype(op, "kv_len", kv_len, {DType::I32});
  check_dtype(op, "q_start", q_start, {DType::I32});
  UPD_CHECK(block_table.dim() == 2) << op << ": block_table [B, MAXB]";
  const int64_t B = block_table.size(0), MAXB = block_table.size(1), NB = NSLOT / kv.block_size;
  check_shape(op, "kv_len", kv_len, {B});
  check_shape(op, "q_start", q_start, {B + 1});
  const int32_t* qs = q_start.data<int32_t>();
  const int32_t* kl = kv_len.data<int32_t>();
  const int32_t* bt = block_table.data<int32_t>();
  UPD_CHECK(qs[0] == 0 && qs[B] == T) << op << ": q_start must run from 0 to T";
  int64_t max_q = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = qs[b + 1] - qs[b];
    UPD_CHECK(n >= 0 && n <= kl[b] && kl[b] <= MAXB * kv.block_size)
        << op << ": sequence " << b << " has " << n << " new tokens and kv_len " << kl[b];
    max_q = std::max(max_q, n);
    for (int64_t j = 0; j < (kl[b] + kv.block_size - 1) / kv.block_size; ++j)
      UPD_CHECK(bt[b * MAXB + j] >= 0 && bt[b * MAXB + j] < NB)
          << op << ": sequence " << b << " block " << j << " id " << bt[b * MAXB + j] << " outside [0, " << NB << ")";
  }
  if (tree_mask.defined()) {
    UPD_CHECK(tree_mask.is_cpu() && tree_mask.dim() == 2 && tree_mask.size(0) == T && tree_mask.size(1) >= max_q)
        << op << ": tree_mask must be a CPU bool [T, >= max new tokens]";
    check_dtype(op, "tree_mask", tree_mask, {DType::Bool});
  }
  if (mask_len.defined()) {
    UPD_CHECK(tree_mask.defined()) << op << ": mask_len needs a tree_mask";
    UPD_CHECK(mask_len.is_cpu()) << op << ": mask_len on the CPU";
    check_dtype(op, "mask_len", mask_len, {DType::I32});
    check_shape(op, "mask_len", mask_len, {B});
    const int32_t* ml = mask_len.data<int32_t>();
    for (int64_t b = 0; b < B; ++b)
      UPD_CHECK(ml[b] >= qs[b + 1] - qs[b] && ml[b] <= kl[b] && ml[b] <= tree_mask.size(1))
          << op << ": sequence " << b << " mask window " << ml[b] << " outside [" << qs[b + 1] - qs[b] << ", "
          << std::min<int64_t>(kl[b], tree_mask.size(1)) << "]";
  }
  if (T == 0)
    return;
  UPD_DISPATCH(q.device(), paged_attention, q, kv, block_table, kv_len, q_start, tree_mask, mask_len, scale, out);
}

void copy_rows(const Tensor& src, const Tensor& src_idx, Tensor dst, const Tensor& dst_idx) {
  const char* op = "copy_rows";
  check_same_device(op, {&src, &dst});
  UPD_CHECK(src.dim() >= 1 && dst.dim() >= 1 && src.dtype() == dst.dtype())
      << op << ": " << src.str() << " -> " << dst.str();
  const int64_t N = src.size(0), P = dst.size(0);
  const int64_t row = N == 0 ? 0 : src.numel() / N;
  UPD_CHECK(P == 0 || dst.numel() / P == row) << op << ": row sizes differ: " << src.str() << " -> " << dst.str();
  UPD_CHECK(src_idx.is_cpu() && dst_idx.is_cpu() && src_idx.dim() == 1) << op << ": indices are CPU i32 [M]";
  check_dtype(op, "src_idx", src_idx, {DType::I32});
  check_dtype(op, "dst_idx", dst_idx, {DType::I32});
  check_shape(op, "dst_idx", dst_idx, src_idx.shape());
  const int64_t M = src_idx.size(0);
  const int32_t* si = src_idx.data<int32_t>();
  const int32_t* di = dst_idx.data<int32_t>();
  std::set<int32_t> dsts;
  for (int64_t m = 0; m < M; ++m) {
    UPD_CHECK(si[m] >= 0 && si[m] < N && di[m] >= 0 && di[m] < P)
        << op << ": index pair " << m << " (" << si[m] << " -> " << di[m] << ") out of range";
    UPD_CHECK(dsts.insert(di[m]).second) << op << ": destination row " << di[m] << " written twice";
  }
  if (src.raw() == dst.raw())  // in-place compaction: no copy may read a row another copy writes
    for (int64_t m = 0; m < M; ++m)
      UPD_CHECK(si[m] == di[m] || !dsts.count(si[m])) << op << ": row " << si[m] << " is both read and written";
  if (M == 0 || row == 0)
    return;
  UPD_DISPATCH(src.device(), copy_rows, src, src_idx, dst, dst_idx);
}

}  // namespace updraft::ops
