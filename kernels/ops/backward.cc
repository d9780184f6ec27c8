#include "kernels/ops/backward.h"

#include "kernels/ops/backward_cpu.h"
#include "kernels/ops/gemm.h"

namespace updraft::ops {
namespace {

// Every backward op runs in f32 on the CPU for now.
void check_f32_cpu(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
  for (const auto& [name, t] : ts) {
    if (t == nullptr)
      continue;
    UPD_CHECK(t->defined()) << op << ": " << name << " is undefined";
    UPD_CHECK(t->is_cpu()) << op << ": " << name << " is on " << t->str() << "; the CUDA backward is not built yet";
    check_dtype(op, name, *t, {DType::F32});
  }
}

}  // namespace

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, bool accumulate_dx, Tensor* dw,
                     Tensor* db) {
  const char* op = "linear_backward";
  check_f32_cpu(op, {{"x", &x}, {"w", &w}, {"dy", &dy}, {"dx", dx}, {"dw", dw}, {"db", db}});
  UPD_CHECK(x.dim() == 2 && w.dim() == 2) << op << ": x " << x.str() << " and w " << w.str() << " must be 2-D";
  const int64_t T = x.size(0), K = x.size(1), N = w.size(0);
  check_shape(op, "w", w, {N, K});
  check_shape(op, "dy", dy, {T, N});
  if (dx != nullptr) {
    check_shape(op, "dx", *dx, {T, K});
    gemm(dy, false, w, false, *dx, 1.f, accumulate_dx ? 1.f : 0.f);
  }
  if (dw != nullptr) {
    check_shape(op, "dw", *dw, {N, K});
    gemm(dy, true, x, false, *dw, 1.f, 1.f);
  }
  if (db != nullptr) {
    check_shape(op, "db", *db, {N});
    cpu::add_column_sums(dy, *db);
  }
}

void rms_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor dx, Tensor* dw) {
  const char* op = "rms_norm_backward";
  check_f32_cpu(op, {{"x", &x}, {"w", &w}, {"dy", &dy}, {"dx", &dx}, {"dw", dw}});
  UPD_CHECK(x.dim() == 2) << op << ": x must be [R, H], got " << x.str();
  check_shape(op, "w", w, {x.size(1)});
  check_shape(op, "dy", dy, x.shape());
  check_shape(op, "dx", dx, x.shape());
  if (dw != nullptr)
    check_shape(op, "dw", *dw, {x.size(1)});
  cpu::rms_norm_backward(x, w, eps, dy, dx, dw);
}

void rope_backward(Tensor dx, const Tensor& positions, const Tensor& inv_freq) {
  const char* op = "rope_backward";
  check_f32_cpu(op, {{"dx", &dx}, {"inv_freq", &inv_freq}});
  UPD_CHECK(dx.dim() == 3) << op << ": dx must be [T, NH, HD], got " << dx.str();
  check_shape(op, "positions", positions, {dx.size(0)});
  check_dtype(op, "positions", positions, {DType::I32});
  check_shape(op, "inv_freq", inv_freq, {dx.size(2) / 2});
  cpu::rope_rotate(dx, positions, inv_freq, -1.f);
}

void silu_mul_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor dgate, Tensor dup) {
  const char* op = "silu_mul_backward";
  check_f32_cpu(op, {{"gate", &gate}, {"up", &up}, {"dout", &dout}, {"dgate", &dgate}, {"dup", &dup}});
  check_shape(op, "up", up, gate.shape());
  check_shape(op, "dout", dout, gate.shape());
  check_shape(op, "dgate", dgate, gate.shape());
  check_shape(op, "dup", dup, gate.shape());
  cpu::silu_mul_backward(gate, up, dout, dgate, dup);
}

void embedding_backward(const Tensor& ids, const Tensor& dout, Tensor dtable) {
  const char* op = "embedding_backward";
  check_f32_cpu(op, {{"dout", &dout}, {"dtable", &dtable}});
  check_dtype(op, "ids", ids, {DType::I32});
  UPD_CHECK(ids.dim() == 1 && dtable.dim() == 2) << op << ": ids [T] and dtable [V, H] expected";
  check_shape(op, "dout", dout, {ids.size(0), dtable.size(1)});
  cpu::embedding_backward(ids, dout, dtable);
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, const AttentionMask& mask, float scale, Tensor dq, Tensor dk, Tensor dv) {
  const char* op = "attention_backward";
  check_f32_cpu(op, {{"q", &q},
                     {"k", &k},
                     {"v", &v},
                     {"out", &out},
                     {"lse", &lse},
                     {"dout", &dout},
                     {"dq", &dq},
                     {"dk", &dk},
                     {"dv", &dv}});
  UPD_CHECK(q.dim() == 3 && k.dim() == 3) << op << ": q [T, NH, HD] and k [S, NKV, HD] expected";
  const int64_t T = q.size(0), NH = q.size(1), HD = q.size(2), S = k.size(0), NKV = k.size(1);
  UPD_CHECK(NKV > 0 && NH % NKV == 0) << op << ": heads " << NH << " not a multiple of kv heads " << NKV;
  check_shape(op, "k", k, {S, NKV, HD});
  check_shape(op, "v", v, {S, NKV, HD});
  check_shape(op, "out", out, q.shape());
  check_shape(op, "dout", dout, q.shape());
  check_shape(op, "dq", dq, q.shape());
  check_shape(op, "lse", lse, {T, NH});
  check_shape(op, "dk", dk, k.shape());
  check_shape(op, "dv", dv, v.shape());
  switch (mask.kind) {
    case MaskKind::Causal:
      UPD_CHECK(S >= mask.q_offset + T) << op << ": causal mask needs S >= q_offset + T";
      break;
    case MaskKind::Tree:
      UPD_CHECK(S == mask.q_offset + T && mask.tree_mask.is_cpu()) << op << ": tree mask needs S == prefix + T";
      check_shape(op, "tree_mask", mask.tree_mask, {T, T});
      break;
    case MaskKind::TTT:
      UPD_CHECK(mask.q_offset >= 0 && S == (mask.ttt_steps + 1) * (mask.q_offset + T))
          << op << ": TTT mask needs S == (steps + 1) * (first_row + T)";
      break;
  }
  cpu::attention_backward(q, k, v, out, lse, dout, mask, scale, dq, dk, dv);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& dloss, Tensor dlogits) {
  const char* op = "cross_entropy_backward";
  check_f32_cpu(op, {{"logits", &logits}, {"dloss", &dloss}, {"dlogits", &dlogits}});
  UPD_CHECK(logits.dim() == 2) << op << ": logits must be [R, C]";
  check_shape(op, "target", target, {logits.size(0)});
  check_dtype(op, "target", target, {DType::I32});
  check_shape(op, "dloss", dloss, {logits.size(0)});
  check_shape(op, "dlogits", dlogits, logits.shape());
  cpu::cross_entropy_backward(logits, target, dloss, dlogits);
}

void soft_cross_entropy_backward(const Tensor& logits, const Tensor& teacher, const Tensor& dloss, Tensor dlogits) {
  const char* op = "soft_cross_entropy_backward";
  check_f32_cpu(op, {{"logits", &logits}, {"teacher", &teacher}, {"dloss", &dloss}, {"dlogits", &dlogits}});
  UPD_CHECK(logits.dim() == 2) << op << ": logits must be [R, C]";
  check_shape(op, "teacher", teacher, logits.shape());
  check_shape(op, "dloss", dloss, {logits.size(0)});
  check_shape(op, "dlogits", dlogits, logits.shape());
  cpu::soft_cross_entropy_backward(logits, teacher, dloss, dlogits);
}

}  // namespace updraft::ops
