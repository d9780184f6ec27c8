// The drafter fixtures' two reference steps (tests/fixtures/drafter: speculators' own forward):
// step 0 runs the target features through fc with causal attention; step 1 feeds back the step-0
// states, and row p attends to the step-0 entries 0..p and to itself (the training-time-test
// pattern, as a masked window over the draft cache). Runs on the drafter's device.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "drafter/draft_model.h"
#include "kernels/io/safetensors.h"
#include "tests/fixture_util.h"

namespace updraft::testing_drafts {

using fixture_util::ids_of;

struct TwoSteps {
  std::vector<float> state0, logits0, logits1, state1;
};

// Step 0 over all rows, then step 1 with the TTT diagonal pattern, in one draft cache. The
// target features are the reference's unless `features` is given.
inline TwoSteps run_two_steps(const DraftModel& m, const SafetensorsFile& ref, const Tensor& features = Tensor()) {
  const Tensor hidden = features.defined() ? features : ref.get("hidden_in");
  const int64_t T = hidden.size(0);
  KvCache cache(m.kv_shape(), 8, 4);
  SeqKv kv;
  EXPECT_TRUE(cache.reserve(kv, 2 * T));
  std::vector<SeqStep> s(1);
  s[0].kv = &kv;
  s[0].tokens = ids_of(ref.get("input_ids"));
  s[0].positions = ids_of(ref.get("positions"));
  for (int64_t t = 0; t < T; ++t)
    s[0].logit_rows.push_back(static_cast<int32_t>(t));
  DraftOut o0 = m.forward(cache, s, hidden.to_dtype(m.act_dtype()).to(m.device()));
  s[0].tokens = ids_of(ref.get("step1_ids"));
  s[0].positions = ids_of(ref.get("step1_positions"));
  s[0].tree_mask = Tensor::zeros({T, 2 * T}, DType::Bool);
  for (int64_t p = 0; p < T; ++p) {
    for (int64_t j = 0; j <= p; ++j)
      s[0].tree_mask.data<uint8_t>()[p * 2 * T + j] = 1;
    s[0].tree_mask.data<uint8_t>()[p * 2 * T + T + p] = 1;
  }
  DraftOut o1 = m.forward(cache, s, o0.state);
  return {o0.state.to_f32_vector(), o0.logits.to_f32_vector(), o1.logits.to_f32_vector(), o1.state.to_f32_vector()};
}

}  // namespace updraft::testing_drafts
