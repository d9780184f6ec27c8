#include "trainer/params.h"

#include <cmath>

#include "kernels/ops/optim.h"

namespace updraft::train {

Param make_param(std::string name, const Shape& shape, bool weight_decay, Device device) {
  Param p;
  p.name = std::move(name);
  p.value = Tensor::zeros(shape, DType::F32, device);
  p.grad = Tensor::zeros(shape, DType::F32, device);
  p.weight_decay = weight_decay;
  return p;
}

void ParamSet::add(Param& p) {
  UPD_CHECK(!p.name.empty()) << "ParamSet::add: a parameter needs a name";
  UPD_CHECK(index_.count(p.name) == 0) << "ParamSet::add: duplicate parameter name '" << p.name << "'";
  UPD_CHECK(p.value.defined() && p.grad.defined()) << "ParamSet::add: '" << p.name << "' needs a value and a grad";
  UPD_CHECK(p.value.dtype() == DType::F32 && p.grad.dtype() == DType::F32)
      << "ParamSet::add: '" << p.name << "' must be f32 (value " << p.value.str() << ", grad " << p.grad.str() << ")";
  UPD_CHECK(p.grad.shape() == p.value.shape() && p.grad.device() == p.value.device())
      << "ParamSet::add: '" << p.name << "' grad " << p.grad.str() << " does not match value " << p.value.str();
  index_.emplace(p.name, params_.size());
  params_.push_back(&p);
}

Param* ParamSet::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : params_[it->second];
}

void ParamSet::zero_grad() {
  for (Param* p : params_)
    p->grad.zero_();
}

int64_t ParamSet::numel() const {
  int64_t n = 0;
  for (const Param* p : params_)
    n += p->value.numel();
  return n;
}

std::string ParamSet::non_finite() const {
  for (const Param* p : params_)
    if (p->value.first_non_finite() >= 0)
      return p->name;
  return "";
}

double ParamSet::grad_norm() const {
  double sum = 0;
  for (const Param* p : params_)
    sum += ops::sum_squares(p->grad);
  return std::sqrt(sum);
}

std::vector<std::pair<std::string, Tensor>> ParamSet::values() const {
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(params_.size());
  for (const Param* p : params_)
    out.emplace_back(p->name, p->value);
  return out;
}

std::vector<std::pair<std::string, Tensor>> ParamSet::copy_values(DType dtype) const {
  UPD_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16)
      << "ParamSet::copy_values: float dtypes only, got " << dtype_name(dtype);
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(params_.size());
  for (const Param* p : params_) {
    Tensor host = p->value.to(Device::CPU);
    if (dtype == DType::F32 && host.raw() == p->value.raw()) {  // already on the host: copy explicitly
      Tensor copy = Tensor::empty(host.shape(), DType::F32);
      copy.copy_from(host);
      host = copy;
    } else {
      host = host.to_dtype(dtype);
    }
    out.emplace_back(p->name, std::move(host));
  }
  return out;
}

}  // namespace updraft::train
