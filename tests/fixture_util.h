// Helpers for tests that compare against committed reference fixtures (tests/fixtures/*).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/core/tensor.h"

namespace updraft::fixture_util {

// A file or directory of the source tree (UPDRAFT_SOURCE_DIR is defined by the test target).
inline std::string source_path(const std::string& rel) {
  return std::string(UPDRAFT_SOURCE_DIR) + "/" + rel;
}

// An i64 reference tensor as token ids.
inline std::vector<int32_t> ids_of(const Tensor& t) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < t.numel(); ++i)
    out.push_back(static_cast<int32_t>(t.data<int64_t>()[i]));
  return out;
}

// Elementwise |got - want| <= tol + tol |want|; reports the first three misses and the worst.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what,
                         double tol = 1e-4) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, err);
    if (!(err <= tol + tol * std::abs(want[i])) && ++bad <= 3)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
  }
  EXPECT_EQ(bad, 0) << what << ": max abs error " << worst;
}

}  // namespace updraft::fixture_util
