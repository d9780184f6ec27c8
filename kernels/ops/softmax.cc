#include "kernels/ops/softmax.h"

#include "kernels/ops/backend.h"

namespace updraft::ops {
namespace {

void check_softmax(const char* op, const Tensor& x, const Tensor& out) {
  check_same_device(op, {&x, &out});
  UPD_CHECK(x.dim() == 2) << op << ": x must be [R, C], got " << x.str();
  check_shape(op, "out", out, x.shape());
  check_dtype(op, "out", out, {DType::F32});
  if (x.is_cpu())
    check_dtype(op, "x", x, {DType::F32});
  else
    check_dtype(op, "x", x, {DType::F32, DType::BF16});
}

}  // namespace

void softmax(const Tensor& x, Tensor out) {
  check_softmax("softmax", x, out);
  UPD_DISPATCH(x.device(), softmax, x, out, false);
}

void log_softmax(const Tensor& x, Tensor out) {
  check_softmax("log_softmax", x, out);
  UPD_DISPATCH(x.device(), softmax, x, out, true);
}

}  // namespace updraft::ops
