// One parameterised test runs every op on every available backend against the naive
// double-precision references in reference.h, over several shapes and dtypes.
//
// Backends: cpu (f32 activations, f32/bf16/f16 weights), cuda-f32, cuda-bf16. CUDA cases are
// reported as SKIPPED (not passed) when no GPU is usable.
//
// Inputs are rounded to the dtype they are stored in *before* the reference sees them, so a
// comparison measures only the arithmetic of the backend, not the storage rounding:
//  * f32 math: sums of up to a few hundred terms in a different order than the double
//    reference: relative error ~ K * 2^-24 ~ 1e-5; we allow atol 1e-4 + rtol 1e-4.
//  * bf16 activations: outputs (and intermediates such as normalised rows or attention
//    probabilities) are rounded to 8 significant bits: relative error up to 2^-8 ~ 4e-3 per
//    rounding, a few roundings in a chain: atol 3e-2 + rtol 3e-2.
//
// The op cases are in backend_parity_dense_cases.cc and backend_parity_attention_cases.cc; the
// shared helpers in backend_parity.h.
#include "tests/kernels/backend_parity.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

namespace updraft {
namespace parity {

const std::vector<Backend>& backends() {
  static const std::vector<Backend> b = {
      {"cpu", Device::CPU, DType::F32, DType::F32},          {"cpu_wbf16", Device::CPU, DType::F32, DType::BF16},
      {"cpu_wf16", Device::CPU, DType::F32, DType::F16},     {"cuda_f32", Device::CUDA, DType::F32, DType::F32},
      {"cuda_bf16", Device::CUDA, DType::BF16, DType::BF16},
  };
  return b;
}

}  // namespace parity

namespace {

using parity::Backend;
using parity::backends;
using parity::OpCase;

std::vector<OpCase> op_cases() {
  std::vector<OpCase> c;
  parity::append_dense_cases(c);
  parity::append_attention_cases(c);
  parity::append_lookup_and_loss_cases(c);
  return c;
}

// ---- the parameterised test --------------------------------------------------------------

struct Param {
  size_t op;
  size_t backend;
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << "op " << p.op << " on backend " << backends()[p.backend].name;
}

class BackendParity : public ::testing::TestWithParam<Param> {};

TEST_P(BackendParity, MatchesReference) {
  static const std::vector<OpCase> cases = op_cases();
  const OpCase& c = cases[GetParam().op];
  const Backend& b = backends()[GetParam().backend];
  if (b.device == Device::CUDA && !cuda_available())
    GTEST_SKIP() << "no usable CUDA device on this machine ("
                 << (cuda_compiled() ? "CUDA backend built" : "built without CUDA") << ")";
  c.run(b);
}

std::vector<Param> all_params() {
  std::vector<Param> out;
  const auto cases = op_cases();
  for (size_t i = 0; i < cases.size(); ++i)
    for (size_t j = 0; j < backends().size(); ++j) {
      const Backend& b = backends()[j];
      if (!cases[i].uses_weights && b.weight != b.act)
        continue;  // same computation as another backend
      out.push_back({i, j});
    }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Ops, BackendParity, ::testing::ValuesIn(all_params()), [](const auto& info) {
  static const std::vector<OpCase> cases = op_cases();
  return cases[info.param.op].name + "__" + backends()[info.param.backend].name;
});

}  // namespace
}  // namespace updraft
