// Helpers for tests that compare against committed reference fixtures (tests/fixtures/*).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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

// Outputs of a stack of layers computed entirely in bf16 (every activation stored as bf16 between
// ops, the residual stream included, as on the CUDA backend) against an f32 reference. Each
// layer rounds the stream at its own magnitude, so elements beside the stream's largest entries
// carry errors of a few bf16_tol. Two bounds instead of one per element: the error's RMS within
// 3% of the reference's RMS (a few dozen roundings of at most 2^-9 each, compounding through the
// layers), and no element off by more than 4 bf16_tol. Prints both figures, so that a log shows
// the margin.
inline void expect_close_bf16_stack(const std::vector<float>& got, const std::vector<float>& want,
                                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double se = 0, sw = 0, worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = static_cast<double>(got[i]) - want[i];
    se += e * e;
    sw += static_cast<double>(want[i]) * want[i];
    worst = std::max(worst, std::abs(e));
  }
  const double rel = std::sqrt(se / std::max(sw, 1e-30)), bound = 4 * bf16_tol(want);
  std::printf("%s: relative RMS error %.4f (bound 0.03), max abs error %.4f (bound %.4f)\n", what.c_str(), rel, worst,
              bound);
  EXPECT_LE(rel, 3e-2) << what;
  EXPECT_LE(worst, bound) << what;
}

}  // namespace updraft::fixture_util
