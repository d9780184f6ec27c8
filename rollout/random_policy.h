// Random policy weights for benchmarks and tests: every tensor a PolicyConfig implies, filled
// with seeded values (linear weights ~ U(-a, a) with a = sqrt(3 / fan_in), norms ~ 1 +- 0.1,
// biases ~ U(-0.1, 0.1)) and stored in `dtype`. Deterministic for a given (config, seed).
#pragma once

#include <map>
#include <string>

#include "rollout/policy_model.h"

namespace updraft {

std::map<std::string, Tensor> random_policy_tensors(const PolicyConfig& cfg, uint64_t seed, DType dtype);
PolicyModel random_policy(const PolicyConfig& cfg, uint64_t seed, DType dtype, const PolicyOptions& opts = {});

}  // namespace updraft
