// Internal: the per-backend entry points behind kernels/ops/optim.h (called after its checks).
// Not a public header.
#pragma once

#include "kernels/ops/optim.h"

namespace updraft::ops {

#define UPD_OPTIM_DECLARE_BACKEND(ns)                                                                     \
  namespace ns {                                                                                          \
  void sum_squares(const Tensor& x, double& out);                                                         \
  void scale_(Tensor& x, float s);                                                                        \
  void adamw_update(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, const AdamWCoefficients& c); \
  }

UPD_OPTIM_DECLARE_BACKEND(cpu)
UPD_OPTIM_DECLARE_BACKEND(cuda)
#undef UPD_OPTIM_DECLARE_BACKEND

}  // namespace updraft::ops
