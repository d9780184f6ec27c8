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

}  // namespace

void argmax(const Tensor& x, Tensor out) {
  check_same_device("argmax", {&x, &out});
  check_x("argmax", x);
  check_shape("argmax", "out", out, {x.size(0)});
  check_dtype("argmax", "out", out, {DType::I32});
  UPD_DISPATCH(x.device(), argmax, x, out);
}

void topk(const Tensor& x, int64_t k, Tensor values, Tensor indices) {
  check_same_device("topk", {&x, &values, &indices});
  check_x("topk", x);
  UPD_CHECK(k >= 1 && k <= x.size(1)) << "topk: k=" << k << " outside [1, " << x.size(1) << "]";
  check_shape("topk", "values", values, {x.size(0), k});
  check_shape("topk", "indices", indices, {x.size(0), k});
  check_dtype("topk", "values", values, {DType::F32});
  check_dtype("topk", "indices", indices, {DType::I32});
  UPD_DISPATCH(x.device(), topk, x, k, values, indices);
}

}  // namespace updraft::ops
