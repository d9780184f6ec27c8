#include "trainer/init.h"

#include <cmath>

#include "kernels/ops/sampling.h"

namespace updraft::train {

Tensor init_normal(const Shape& shape, float std, uint64_t seed, uint64_t stream) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.data<float>();
  const int64_t n = t.numel();
  const uint64_t s = ops::mix64(seed ^ ops::mix64(stream + 0x9e3779b97f4a7c15ULL));
  constexpr float kTwoPi = 6.2831853071795864f;
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    // uniform01 is in [0, 1): 1 - u is in (0, 1], safe for the log.
    const float u1 = 1.0f - ops::uniform01(s, 2 * static_cast<uint64_t>(i));
    const float u2 = ops::uniform01(s, 2 * static_cast<uint64_t>(i) + 1);
    p[i] = std * std::sqrt(-2.0f * std::log(u1)) * std::cos(kTwoPi * u2);
  }
  return t;
}

Tensor init_constant(const Shape& shape, float value) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = value;
  return t;
}

Param* ParamStore::add(const std::string& name, Tensor value, bool weight_decay) {
  auto p = std::make_unique<Param>();
  p->name = name;
  p->grad = Tensor::zeros(value.shape(), DType::F32);
  p->value = std::move(value);
  p->weight_decay = weight_decay;
  owned_.push_back(std::move(p));
  set_.add(*owned_.back());
  return owned_.back().get();
}

}  // namespace updraft::train
