#include "kernels/ops/activation.h"

#include "kernels/ops/backend.h"

namespace updraft::ops {
namespace {

void check_elementwise(const char* op, std::initializer_list<const Tensor*> ts) {
  check_same_device(op, ts);
  const Tensor* first = *ts.begin();
  for (const Tensor* t : ts) {
    UPD_CHECK(t->shape() == first->shape()) << op << ": shapes differ: " << first->str() << " vs " << t->str();
    UPD_CHECK(t->dtype() == first->dtype()) << op << ": dtypes differ: " << first->str() << " vs " << t->str();
    if (t->is_cpu())
      check_dtype(op, "tensor", *t, {DType::F32});
    else
      check_dtype(op, "tensor", *t, {DType::F32, DType::BF16});
  }
}

}  // namespace

void silu_mul(const Tensor& gate, const Tensor& up, Tensor out) {
  check_elementwise("silu_mul", {&gate, &up, &out});
  UPD_DISPATCH(gate.device(), silu_mul, gate, up, out);
}

void add(const Tensor& a, const Tensor& b, Tensor out) {
  check_elementwise("add", {&a, &b, &out});
  UPD_DISPATCH(a.device(), add, a, b, out);
}

void convert(const Tensor& src, Tensor dst) {
  check_same_device("convert", {&src, &dst});
  UPD_CHECK(src.numel() == dst.numel()) << "convert: " << src.str() << " -> " << dst.str();
  check_dtype("convert", "src", src, {DType::F32, DType::BF16, DType::F16});
  check_dtype("convert", "dst", dst, {DType::F32, DType::BF16, DType::F16});
  UPD_DISPATCH(src.device(), convert, src, dst);
}

}  // namespace updraft::ops
