// A depth chooser for tests: any allowed depth at random each step (losslessness may not
// depend on the depth adaptive speculation picks).
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "rollout/spec/adaptive.h"

namespace updraft {

class RandomDepth final : public DepthChooser {
 public:
  RandomDepth(const SpecSettings& full, uint64_t seed) : depths_(allowed(full)), rng_(seed) {}
  int64_t choose(int64_t, int64_t, int) override { return depths_[rng_() % depths_.size()]; }
  void observe(const StepSample& s) override {
    EXPECT_GT(s.batch, 0);
    ++observed;
    if (keep)
      seen.push_back(s);
  }
  void drafter_changed(uint64_t) override { ++changes; }
  int64_t observed = 0, changes = 0;
  bool keep = false;  // keep every sample in `seen`
  std::vector<StepSample> seen;

 private:
  static std::vector<int64_t> allowed(const SpecSettings& f) {
    std::vector<int64_t> d = {0};
    for (int64_t k = f.chain() ? 1 : f.steps; k <= f.steps; ++k)
      d.push_back(k);
    return d;
  }
  std::vector<int64_t> depths_;
  std::mt19937_64 rng_;
};

}  // namespace updraft
