// Helpers for tests that compare against committed reference fixtures (tests/fixtures/*).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/core/tensor.h"

namespace updraft::fixture_util {

// A file or directory of the source tree: the test target's UPDRAFT_SOURCE_DIR, or the
// environment's UPDRAFT_SOURCE_DIR where set (binaries run from another checkout of the same
// commit, as tools/gpu_check.sh does on a GPU host).
inline std::string source_path(const std::string& rel) {
  const char* env = std::getenv("UPDRAFT_SOURCE_DIR");
  return std::string(env != nullptr && *env != '\0' ? env : UPDRAFT_SOURCE_DIR) + "/" + rel;
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

// The tolerance for outputs computed with bf16 activations against an f32 reference: 3e-2 times
// the larger of 1 and the reference's RMS, absolute and relative. Each bf16 rounding has a
// relative error up to 2^-9, a chain of layers compounds a few of them, and the errors scale with
// the residual stream, which grows through the layers.
inline double bf16_tol(const std::vector<float>& want) {
  double ss = 0;
  for (float v : want)
    ss += static_cast<double>(v) * v;
  return 3e-2 * std::max(1.0, std::sqrt(ss / static_cast<double>(std::max<size_t>(want.size(), 1))));
}

}  // namespace updraft::fixture_util
