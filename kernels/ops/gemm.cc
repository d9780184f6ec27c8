#include "kernels/ops/gemm.h"

#include "kernels/ops/backend.h"
#include "kernels/ops/gemv_cpu.h"

namespace updraft::ops {
namespace {

void check_gemm(const char* op, const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, int batch_dims) {
  check_same_device(op, {&a, &b, &c});
  const int64_t nd = 2 + batch_dims;
  UPD_CHECK(a.dim() == nd && b.dim() == nd && c.dim() == nd)
      << op << ": expected " << nd << "-D tensors, got " << a.str() << ", " << b.str() << ", " << c.str();
  const int64_t M = ta ? a.size(-1) : a.size(-2);
  const int64_t K = ta ? a.size(-2) : a.size(-1);
  const int64_t Kb = tb ? b.size(-1) : b.size(-2);
  const int64_t N = tb ? b.size(-2) : b.size(-1);
  UPD_CHECK(K == Kb) << op << ": inner dimensions differ: " << a.str() << (ta ? "^T" : "") << " · " << b.str()
                     << (tb ? "^T" : "");
  UPD_CHECK(c.size(-2) == M && c.size(-1) == N)
      << op << ": output " << c.str() << ", expected [" << M << "," << N << "]";
  if (batch_dims == 1)
    UPD_CHECK(a.size(0) == b.size(0) && a.size(0) == c.size(0)) << op << ": batch sizes differ";
  UPD_CHECK(c.raw() != a.raw() && c.raw() != b.raw()) << op << ": output aliases an input";
  if (a.is_cpu()) {
    check_dtype(op, "a", a, {DType::F32});
    check_dtype(op, "b", b, {DType::F32, DType::BF16, DType::F16});
    check_dtype(op, "c", c, {DType::F32});
  } else {
    check_dtype(op, "a", a, {DType::F32, DType::BF16});
    UPD_CHECK(b.dtype() == a.dtype()) << op << ": on CUDA a and b must share a dtype";
    check_dtype(op, "c", c, {DType::F32, DType::BF16});
  }
}

// linear()'s checks: x [T, K], w [N, K], y [T, N], and a bias of N values if any.
void check_linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
  check_gemm("linear", x, false, w, true, y, 0);
  if (bias != nullptr) {
    check_shape("linear", "bias", *bias, {w.size(0)});
    check_same_device("linear", {&x, bias});
    check_dtype("linear", "bias", *bias, {DType::F32, w.dtype()});
  }
}

}  // namespace

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor c, float alpha, float beta) {
  check_gemm("gemm", a, trans_a, b, trans_b, c, 0);
  UPD_DISPATCH(a.device(), gemm, a, trans_a, b, trans_b, c, alpha, beta);
}

void batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor c, float alpha, float beta) {
  check_gemm("batched_gemm", a, trans_a, b, trans_b, c, 1);
  UPD_DISPATCH(a.device(), batched_gemm, a, trans_a, b, trans_b, c, alpha, beta);
}

void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor y) {
  check_linear(x, w, bias, y);
  UPD_DISPATCH(x.device(), linear, x, w, bias, y);
}

LinearWeight prepare_linear(Tensor w) {
  LinearWeight lw{std::move(w), {}, {}, {}};
  if (!lw.w.defined() || !lw.w.is_cpu() || lw.w.dim() != 2)
    return lw;
  if (cpu_bf16_kernel() == CpuBf16Kernel::kAmx)
    lw.panels = cpu::pack_linear_panels(lw.w);
  else if (cpu_bf16_kernel() == CpuBf16Kernel::kDot)
    lw.dot_panels = cpu::pack_linear_dot_panels(lw.w);
  return lw;
}

LinearWeight prepare_linear_int8(Tensor w) {
  UPD_CHECK(w.defined() && w.is_cpu() && w.dim() == 2)
      << "prepare_linear_int8: int8 weights run only on the CPU, from a [N, K] weight; got " << w.str();
  LinearWeight lw{std::move(w), {}, {}, {}};
  lw.q8 = std::make_shared<const cpu::Int8Weight>(cpu::quantize_weight_int8(lw.w));
  return lw;
}

bool cpu_has_int8_tiles() {
  return cpu::cpu_has_amx_int8();
}

bool cpu_has_int8_vectors() {
  return cpu::cpu_has_avx512_vnni();
}

const char* cpu_int8_kernel_name() {
  return cpu_has_int8_tiles() ? "AMX-INT8" : cpu_has_int8_vectors() ? "AVX512-VNNI" : "none";
}

void linear(const Tensor& x, const LinearWeight& w, const Tensor* bias, Tensor y) {
  linear_shared_input(x, {{&w, bias, y}});
}

namespace {

// Products with int8 weights: all in one pass when every weight has them, else one at a time.
void linear_int8_products(const Tensor& x, std::vector<LinearProduct>& products) {
  std::vector<cpu::Int8Product> q8;
  for (LinearProduct& p : products) {
    check_linear(x, p.w->w, p.bias, p.y);
    if (p.w->q8 != nullptr)
      q8.push_back({p.w->q8.get(), p.bias, &p.y});
  }
  if (q8.size() == products.size())
    return cpu::linear_int8(x, q8);
  for (LinearProduct& p : products)
    if (p.w->q8 != nullptr)
      cpu::linear_int8(x, {{p.w->q8.get(), p.bias, &p.y}});
    else
      linear_shared_input(x, {p});
}

#ifdef UPDRAFT_WITH_CUDA
// Products without biases on CUDA in one launch (cuda::linear_rows), each checked as linear()
// checks it; false where that kernel does not apply.
bool cuda_products(const Tensor& x, std::vector<LinearProduct>& products) {
  std::vector<const Tensor*> ws;
  std::vector<Tensor*> ys;
  for (LinearProduct& p : products) {
    if (p.bias != nullptr)
      return false;
    check_gemm("linear", x, false, p.w->w, true, p.y, 0);
    ws.push_back(&p.w->w);
    ys.push_back(&p.y);
  }
  return cuda::linear_rows(x, ws, ys);
}
#endif

}  // namespace

void linear_shared_input(const Tensor& x, std::vector<LinearProduct> products) {
  for (const LinearProduct& p : products)
    if (p.w->q8 != nullptr)
      return linear_int8_products(x, products);
  if (x.is_cpu()) {  // one pass of the thread team for them all: from panels, else row-major
    bool panels = true;
    for (const LinearProduct& p : products) {
      check_linear(x, p.w->w, p.bias, p.y);
      panels = panels && p.w->panels.defined();
    }
    if (panels) {
      std::vector<cpu::PanelProduct> cp;
      for (LinearProduct& p : products)
        cp.push_back({&p.w->panels, p.w->w.size(0), p.bias, &p.y});
      if (cpu::linear_panels(x, cp))
        return;
    }
    std::vector<cpu::Bf16Product> bp;
    for (LinearProduct& p : products)
      bp.push_back({&p.w->w, p.bias, &p.y, p.w->dot_panels.defined() ? &p.w->dot_panels : nullptr});
    if (cpu::linear_bf16(x, bp))
      return;
  }
#ifdef UPDRAFT_WITH_CUDA
  if (!x.is_cpu() && products.size() > 1 && cuda_products(x, products))
    return;
#endif
  for (const LinearProduct& p : products)
    linear(x, p.w->w, p.bias, p.y);
}

}  // namespace updraft::ops
