#include "kernels/ops/topk.h"

#include "kernels/ops/backend.h"

namespace updraft::ops {
namespace {

void check_x(const char* op, const Tensor& x) {
  UPD_CHECK(x.dim() == 2) << op << ": x must be [R, C], got " << x.str();
  if (x.is_cpu())
    check_dtype(op, "x", x, {DType::F32});
  else
    check_dtype(op, "x", x, {DType::F32, DType::BF16});
}

void check_topk(const char* op, const Tensor& x, int64_t k, const Tensor& values, const Tensor& indices) {
  check_same_device(op, {&x, &values, &indices});
  check_x(op, x);
  UPD_CHECK(k >= 1 && k <= x.size(1)) << op << ": k=" << k << " outside [1, " << x.size(1) << "]";
  check_shape(op, "values", values, {x.size(0), k});
  check_shape(op, "indices", indices, {x.size(0), k});
  check_dtype(op, "values", values, {DType::F32});
  check_dtype(op, "indices", indices, {DType::I32});
}

}  // namespace

void argmax(const Tensor& x, Tensor out) {
  check_same_device("argmax", {&x, &out});
  check_x("argmax", x);
  check_shape("argmax", "out", out, {x.size(0)});
  check_dtype("argmax", "out", out, {DType::I32});
  UPD_DISPATCH(x.device(), argmax, x, out);
}

void topk(const Tensor& x, int64_t k, Tensor values, Tensor indices) {
  check_topk("topk", x, k, values, indices);
  UPD_DISPATCH(x.device(), topk, x, k, values, indices);
}

void top_log_softmax(const Tensor& x, int64_t k, Tensor values, Tensor indices) {
  check_topk("top_log_softmax", x, k, values, indices);
  if (x.is_cpu()) {
    cpu::top_log_softmax(x, k, values, indices);
    return;
  }
  Tensor lp = Tensor::empty(x.shape(), DType::F32, x.device());
  UPD_DISPATCH(x.device(), softmax, x, lp, true);
  UPD_DISPATCH(x.device(), topk, lp, k, values, indices);
}

}  // namespace updraft::ops
