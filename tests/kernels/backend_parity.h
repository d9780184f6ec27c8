// Shared declarations of the backend parity test (backend_parity_test.cc): the backends an op
// runs on, the helpers that build inputs and compare outputs, and the table of op cases, which is
// assembled from groups defined in backend_parity_dense_cases.cc and
// backend_parity_attention_cases.cc.
//
// Contract of an op case: `run(b)` builds its inputs with make()/make_i32() on backend b (so they
// are stored in b's dtypes and on b's device), computes the naive reference (reference.h) from
// the same inputs rounded with rounded(), and reports mismatches through expect_close() or gtest
// assertions. A case with uses_weights runs on every backend, else only where weight == act.
// The order in which the groups append their cases, and within each group the order of the
// cases, fixes the instantiated test names' order (Ops/BackendParity.MatchesReference/...): keep
// it when adding cases, append new cases at the end of a group.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/rand_vec.h"
#include "tests/kernels/reference.h"

namespace updraft::parity {

using ref::Vec;

struct Backend {
  std::string name;
  Device device;
  DType act;     // activation dtype
  DType weight;  // weight dtype (gemm b, linear w, norm w, embedding table)
};

// The backends, in the order of the instantiated test names (backend_parity_test.cc).
const std::vector<Backend>& backends();

// ---- helpers ---------------------------------------------------------------------------

using testing_kernels::rand_vec;

// Values exactly representable in dtype (as the backend will see them).
inline Vec rounded(const std::vector<float>& v, DType dt) {
  Vec out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    float f = v[i];
    if (dt == DType::BF16)
      f = bf16_to_f32(f32_to_bf16(f));
    if (dt == DType::F16)
      f = f16_to_f32(f32_to_f16(f));
    out[i] = f;
  }
  return out;
}

inline Tensor make(const std::vector<float>& v, const Shape& s, const Backend& b, DType dt) {
  return Tensor::from_f32(v, s).to_dtype(dt).to(b.device);
}

inline Tensor make_i32(const std::vector<int32_t>& v, const Shape& s, const Backend& b) {
  return Tensor::from_i32(v, s).to(b.device);
}

inline Vec fetch(const Tensor& t) {
  auto f = t.to_f32_vector();
  return Vec(f.begin(), f.end());
}

inline double atol(const Backend& b) {
  return b.act == DType::BF16 ? 3e-2 : 1e-4;
}
inline double rtol(const Backend& b) {
  return b.act == DType::BF16 ? 3e-2 : 1e-4;
}

inline void expect_close(const Vec& got, const Vec& want, double at, double rt, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = at + rt * std::abs(want[i]);
    if (!(std::abs(got[i] - want[i]) <= tol)) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (tol " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " values out of tolerance";
}

// ---- op cases --------------------------------------------------------------------------

struct OpCase {
  std::string name;
  bool uses_weights;  // run on every weight-dtype backend, else only where weight == act
  std::function<void(const Backend&)> run;
};

// The case groups, each appended to `c` in its fixed order; op_cases() (backend_parity_test.cc)
// calls them in the order dense, attention, lookup and loss.
// Matrix products, linear layers, norms, rope and pointwise ops (gemm ... softmax).
void append_dense_cases(std::vector<OpCase>& c);
// Attention over contiguous and paged KV, and copy_rows (attention_causal_prefill ... copy_rows).
void append_attention_cases(std::vector<OpCase>& c);
// Embedding lookup, top-k/argmax, sampling and cross entropy (embedding ... cross_entropy).
void append_lookup_and_loss_cases(std::vector<OpCase>& c);

}  // namespace updraft::parity
