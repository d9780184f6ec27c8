#include "kernels/ops/norm.h"

#include "kernels/ops/backend.h"

namespace updraft::ops {

void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) {
  check_same_device("rms_norm", {&x, &w, &out});
  UPD_CHECK(x.dim() == 2) << "rms_norm: x must be [R, H], got " << x.str();
  check_shape("rms_norm", "w", w, {x.size(1)});
  check_shape("rms_norm", "out", out, x.shape());
  UPD_CHECK(out.dtype() == x.dtype()) << "rms_norm: out dtype differs from x";
  if (x.is_cpu()) {
    check_dtype("rms_norm", "x", x, {DType::F32});
    check_dtype("rms_norm", "w", w, {DType::F32, DType::BF16, DType::F16});
  } else {
    check_dtype("rms_norm", "x", x, {DType::F32, DType::BF16});
    check_dtype("rms_norm", "w", w, {DType::F32, DType::BF16});
  }
  UPD_DISPATCH(x.device(), rms_norm, x, w, eps, out);
}

}  // namespace updraft::ops
