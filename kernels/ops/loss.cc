#include "kernels/ops/loss.h"

#include "kernels/ops/backend.h"

namespace updraft::ops {
namespace {

void check_logits(const char* op, const Tensor& logits, const Tensor& loss) {
  UPD_CHECK(logits.dim() == 2) << op << ": logits must be [R, C], got " << logits.str();
  if (logits.is_cpu())
    check_dtype(op, "logits", logits, {DType::F32});
  else
    check_dtype(op, "logits", logits, {DType::F32, DType::BF16});
  check_shape(op, "loss", loss, {logits.size(0)});
  check_dtype(op, "loss", loss, {DType::F32});
}

}  // namespace

void cross_entropy(const Tensor& logits, const Tensor& target, Tensor loss) {
  check_same_device("cross_entropy", {&logits, &target, &loss});
  check_logits("cross_entropy", logits, loss);
  check_shape("cross_entropy", "target", target, {logits.size(0)});
  check_dtype("cross_entropy", "target", target, {DType::I32});
  UPD_DISPATCH(logits.device(), cross_entropy, logits, target, loss);
}

void soft_cross_entropy(const Tensor& logits, const Tensor& teacher, Tensor loss) {
  check_same_device("soft_cross_entropy", {&logits, &teacher, &loss});
  check_logits("soft_cross_entropy", logits, loss);
  check_shape("soft_cross_entropy", "teacher", teacher, logits.shape());
  check_dtype("soft_cross_entropy", "teacher", teacher, {DType::F32});
  UPD_DISPATCH(logits.device(), soft_cross_entropy, logits, teacher, loss);
}

}  // namespace updraft::ops
