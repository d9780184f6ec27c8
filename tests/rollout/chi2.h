// Goodness-of-fit helpers for the sampling tests (tests/rollout/).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace updraft::testing_chi2 {

// Chi-square critical value at tail probability ~1e-6 (z = 4.75), Wilson-Hilferty approximation:
// a correct implementation fails with probability ~1e-6; the biased control exceeds it by far.
inline double chi2_critical(int df) {
  const double a = 2.0 / (9.0 * df), z = 4.75;
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// Pearson's statistic of `counts` against probabilities `p`, cells with expected count < 5
// merged into one; returns {statistic, degrees of freedom}.
inline std::pair<double, int> chi2_fit(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n) {
  double stat = 0, rest_e = 0, rest_o = 0;
  int cells = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * static_cast<double>(n);
    if (e < 5) {
      rest_e += e;
      rest_o += static_cast<double>(counts[i]);
      if (p[i] == 0) {
        EXPECT_EQ(counts[i], 0) << "cell " << i << " has probability 0";
      }
      continue;
    }
    stat += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  if (rest_e > 0) {
    stat += (rest_o - rest_e) * (rest_o - rest_e) / rest_e;
    ++cells;
  }
  return {stat, cells - 1};
}

}  // namespace updraft::testing_chi2
