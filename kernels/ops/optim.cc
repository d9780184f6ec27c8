#include "kernels/ops/optim.h"

#include "kernels/ops/backend.h"
#include "kernels/ops/optim_backend.h"

namespace updraft::ops {

double sum_squares(const Tensor& x) {
  check_dtype("sum_squares", "x", x, {DType::F32});
  double out = 0;
  if (x.numel() > 0)
    UPD_DISPATCH(x.device(), sum_squares, x, out);
  return out;
}

void scale_(Tensor x, float s) {
  check_dtype("scale_", "x", x, {DType::F32});
  if (x.numel() > 0)
    UPD_DISPATCH(x.device(), scale_, x, s);
}

void adamw_update(Tensor value, const Tensor& grad, Tensor m, Tensor v, const AdamWCoefficients& c) {
  check_same_device("adamw_update", {&value, &grad, &m, &v});
  check_dtype("adamw_update", "value", value, {DType::F32});
  check_dtype("adamw_update", "grad", grad, {DType::F32});
  check_dtype("adamw_update", "m", m, {DType::F32});
  check_dtype("adamw_update", "v", v, {DType::F32});
  check_shape("adamw_update", "grad", grad, value.shape());
  check_shape("adamw_update", "m", m, value.shape());
  check_shape("adamw_update", "v", v, value.shape());
  if (value.numel() > 0)
    UPD_DISPATCH(value.device(), adamw_update, value, grad, m, v, c);
}

}  // namespace updraft::ops
