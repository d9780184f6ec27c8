#include "trainer/adamw.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/ops/optim.h"

namespace updraft::train {

void AdamWOptions::validate() const {
  UPD_REQUIRE(std::isfinite(beta1) && beta1 >= 0 && beta1 < 1) << "adamw: beta1 = " << beta1 << " is not in [0, 1)";
  UPD_REQUIRE(std::isfinite(beta2) && beta2 >= 0 && beta2 < 1) << "adamw: beta2 = " << beta2 << " is not in [0, 1)";
  UPD_REQUIRE(std::isfinite(eps) && eps > 0) << "adamw: eps = " << eps << " must be positive";
  UPD_REQUIRE(std::isfinite(weight_decay) && weight_decay >= 0)
      << "adamw: weight_decay = " << weight_decay << " must be >= 0";
}

AdamW::AdamW(const ParamSet& params, AdamWOptions options) : params_(params), options_(options) {
  options_.validate();
  for (const Param* p : params_) {
    m_.push_back(Tensor::zeros(p->value.shape(), DType::F32, p->value.device()));
    v_.push_back(Tensor::zeros(p->value.shape(), DType::F32, p->value.device()));
  }
}

void AdamW::step(double lr, float grad_scale) {
  UPD_CHECK(std::isfinite(lr) && lr >= 0) << "AdamW::step: lr = " << lr;
  UPD_CHECK(std::isfinite(grad_scale) && grad_scale > 0) << "AdamW::step: grad_scale = " << grad_scale;
  UPD_CHECK(params_.size() == m_.size()) << "AdamW::step: the parameter set changed from " << m_.size() << " to "
                                         << params_.size() << " parameters after the optimiser was built";
  ++steps_;
  const double t = static_cast<double>(steps_);
  ops::AdamWCoefficients c;
  c.beta1 = static_cast<float>(options_.beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - options_.beta1);
  c.beta2 = static_cast<float>(options_.beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - options_.beta2);
  c.step_size = static_cast<float>(lr / (1.0 - std::pow(options_.beta1, t)));
  c.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(options_.beta2, t)));
  c.eps = static_cast<float>(options_.eps);
  c.grad_scale = grad_scale;
  const float decay = static_cast<float>(1.0 - lr * options_.weight_decay);
  for (size_t i = 0; i < m_.size(); ++i) {
    Param& p = params_[i];
    c.decay = p.weight_decay ? decay : 1.f;
    ops::adamw_update(p.value, p.grad, m_[i], v_[i], c);
  }
}

void AdamW::restore(int64_t steps, const AdamWOptions& options, const std::vector<Tensor>& m,
                    const std::vector<Tensor>& v) {
  UPD_CHECK(steps >= 0) << "AdamW::restore: steps = " << steps;
  UPD_CHECK(m.size() == m_.size() && v.size() == v_.size())
      << "AdamW::restore: " << m.size() << "/" << v.size() << " moment tensors for " << m_.size() << " parameters";
  for (size_t i = 0; i < m_.size(); ++i) {
    UPD_CHECK(m[i].dtype() == DType::F32 && m[i].shape() == m_[i].shape())
        << "AdamW::restore: exp_avg of '" << params_[i].name << "' is " << m[i].str() << ", expected " << m_[i].str();
    UPD_CHECK(v[i].dtype() == DType::F32 && v[i].shape() == v_[i].shape())
        << "AdamW::restore: exp_avg_sq of '" << params_[i].name << "' is " << v[i].str() << ", expected "
        << v_[i].str();
  }
  options.validate();
  for (size_t i = 0; i < m_.size(); ++i) {
    m_[i].copy_from(m[i]);
    v_[i].copy_from(v[i]);
  }
  options_ = options;
  steps_ = steps;
}

float clip_scale(const ParamSet& params, double max_norm, double* norm) {
  UPD_CHECK(max_norm > 0) << "clip_scale: max_norm = " << max_norm;
  *norm = params.grad_norm();
  return !std::isfinite(*norm) || *norm <= max_norm ? 1.f : static_cast<float>(max_norm / *norm);
}

double clip_grad_norm(const ParamSet& params, double max_norm) {
  double norm = 0;
  const float scale = clip_scale(params, max_norm, &norm);
  if (scale != 1.f)
    for (const Param* p : params)
      ops::scale_(p->grad, scale);
  return norm;
}

const char* lr_decay_name(LrDecay d) {
  switch (d) {
    case LrDecay::Constant:
      return "constant";
    case LrDecay::Linear:
      return "linear";
    case LrDecay::Cosine:
      return "cosine";
  }
  return "?";
}

LrDecay lr_decay_from_name(const std::string& s) {
  for (LrDecay d : {LrDecay::Constant, LrDecay::Linear, LrDecay::Cosine})
    if (s == lr_decay_name(d))
      return d;
  UPD_FAIL() << "lr schedule: unknown decay \"" << s << "\" (constant, linear or cosine)";
  return LrDecay::Constant;
}

LrSchedule::LrSchedule(LrScheduleOptions o) : options_(o) {
  UPD_REQUIRE(std::isfinite(o.peak_lr) && o.peak_lr > 0)
      << "lr schedule: peak_lr = " << o.peak_lr << " must be positive";
  UPD_REQUIRE(o.total_steps >= 0) << "lr schedule: total_steps = " << o.total_steps << " is negative";
  UPD_REQUIRE(o.decay == LrDecay::Constant || o.total_steps > 0)
      << "lr schedule: " << lr_decay_name(o.decay) << " decay needs total_steps > 0";
  UPD_REQUIRE(o.warmup_steps >= 0) << "lr schedule: warmup_steps = " << o.warmup_steps << " is negative";
  UPD_REQUIRE(std::isfinite(o.warmup_ratio) && o.warmup_ratio >= 0 && o.warmup_ratio <= 1)
      << "lr schedule: warmup_ratio = " << o.warmup_ratio << " is not in [0, 1]";
  UPD_REQUIRE(o.warmup_steps == 0 || o.warmup_ratio == 0)
      << "lr schedule: give warmup_steps or warmup_ratio, not both (" << o.warmup_steps << ", " << o.warmup_ratio
      << ")";
  UPD_REQUIRE(o.warmup_ratio == 0 || o.total_steps > 0) << "lr schedule: warmup_ratio needs total_steps > 0";
  UPD_REQUIRE(std::isfinite(o.min_lr_ratio) && o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1)
      << "lr schedule: min_lr_ratio = " << o.min_lr_ratio << " is not in [0, 1]";
  warmup_ = o.warmup_steps > 0 ? o.warmup_steps
                               : static_cast<int64_t>(std::ceil(o.warmup_ratio * static_cast<double>(o.total_steps)));
  UPD_REQUIRE(o.total_steps == 0 || warmup_ <= o.total_steps)
      << "lr schedule: warmup of " << warmup_ << " steps is longer than total_steps = " << o.total_steps;
}

double LrSchedule::lr(int64_t step) const {
  UPD_CHECK(step >= 0) << "LrSchedule::lr: step = " << step;
  const LrScheduleOptions& o = options_;
  if (step < warmup_)
    return o.peak_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  if (o.decay == LrDecay::Constant)
    return o.peak_lr;
  const double span = static_cast<double>(o.total_steps - warmup_);
  const double p = span > 0 ? std::clamp(static_cast<double>(step - warmup_) / span, 0.0, 1.0) : 1.0;
  const double min = o.peak_lr * o.min_lr_ratio;
  // Weights c and 1 - c make both ends exact: peak_lr at p = 0, min at p = 1.
  const double c = o.decay == LrDecay::Linear ? 1.0 - p : 0.5 * (1.0 + std::cos(std::numbers::pi * p));
  return c * o.peak_lr + (1.0 - c) * min;
}

}  // namespace updraft::train
