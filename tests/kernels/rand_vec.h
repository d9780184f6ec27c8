// Seeded uniform random floats for the kernel tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace updraft::testing_kernels {

inline std::vector<float> rand_vec(int64_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v)
    x = d(rng);
  return v;
}

}  // namespace updraft::testing_kernels
