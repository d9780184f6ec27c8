#include "kernels/ops/attention.h"

#include "kernels/ops/backend.h"

namespace updraft::ops {

bool attention_visible(const AttentionMask& m, int64_t T, int64_t i, int64_t j) {
  switch (m.kind) {
    case MaskKind::Causal:
      return j <= m.q_offset + i;
    case MaskKind::Tree:
      if (j < m.q_offset)
        return true;
      return m.tree_mask.data<uint8_t>()[i * T + (j - m.q_offset)] != 0;
    case MaskKind::TTT: {
      const int64_t R = m.q_offset + T, row = m.q_offset + i, step = j / R, p = j % R;
      return step == 0 ? p <= row : p == row;
    }
  }
  return false;
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, float scale, Tensor out,
               Tensor* lse) {
  const char* op = "attention";
  check_same_device(op, {&q, &k, &v, &out});
  UPD_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3)
      << op << ": q, k, v must be 3-D: " << q.str() << " " << k.str() << " " << v.str();
  const int64_t T = q.size(0), NH = q.size(1), HD = q.size(2), S = k.size(0), NKV = k.size(1);
  check_shape(op, "v", v, k.shape());
  UPD_CHECK(k.size(2) == HD) << op << ": head dims differ";
  UPD_CHECK(NKV > 0 && NH % NKV == 0) << op << ": NH=" << NH << " not a multiple of NKV=" << NKV;
  check_shape(op, "out", out, q.shape());
  UPD_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype() && out.dtype() == q.dtype())
      << op << ": q, k, v, out must share a dtype";
  if (q.is_cpu())
    check_dtype(op, "q", q, {DType::F32});
  else
    check_dtype(op, "q", q, {DType::F32, DType::BF16});
  if (lse != nullptr) {
    check_shape(op, "lse", *lse, {T, NH});
    check_dtype(op, "lse", *lse, {DType::F32});
    check_same_device(op, {&q, lse});
  }
  Tensor tree_dev;
  switch (mask.kind) {
    case MaskKind::Causal:
      UPD_CHECK(mask.q_offset >= 0 && S >= mask.q_offset + T) << op << ": causal mask needs S >= q_offset + T (S=" << S
                                                              << ", q_offset=" << mask.q_offset << ", T=" << T << ")";
      break;
    case MaskKind::Tree:
      UPD_CHECK(S == mask.q_offset + T) << op << ": tree mask needs S == prefix + T";
      check_shape(op, "tree_mask", mask.tree_mask, {T, T});
      check_dtype(op, "tree_mask", mask.tree_mask, {DType::Bool});
      UPD_CHECK(mask.tree_mask.is_cpu()) << op << ": tree_mask must be a CPU tensor";
      tree_dev = mask.tree_mask.to(q.device());
      break;
    case MaskKind::TTT:
      UPD_CHECK(mask.ttt_steps >= 0 && mask.q_offset >= 0 && S == (mask.ttt_steps + 1) * (mask.q_offset + T))
          << op << ": TTT mask needs S == (steps+1)*(first_row+T)";
      break;
  }
  UPD_DISPATCH(q.device(), attention, q, k, v, mask, tree_dev, scale, out, lse);
}

}  // namespace updraft::ops
