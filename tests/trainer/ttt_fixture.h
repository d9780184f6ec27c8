// Shared by the TTT objective's tests: a tiny policy and drafter (the draft vocabulary holds the
// even ids), random samples with a top-k teacher, and weights scaled so the loss is not flat.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "rollout/random_policy.h"
#include "tests/drafter/test_drafts.h"
#include "tests/rollout/test_models.h"
#include "trainer/ttt_model.h"

namespace updraft::train::testing_ttt {

using testing_models::tiny_config;
using testing_models::tiny_draft_config;

struct Fixture {
  PolicyConfig pc = tiny_config(PolicyArch::Llama);
  PolicyModel policy = random_policy(pc, 11, DType::F32);
  DraftConfig dc = tiny_draft_config(pc, 40);
  VocabMap vocab = VocabMap::from_ids(ids(), pc.vocab_size, "test");

  static std::vector<int32_t> ids() {
    std::vector<int32_t> v;
    for (int32_t i = 0; i < 40; ++i)
      v.push_back(i * 2);  // even ids only: odd teacher ids fall outside the draft vocabulary
    return v;
  }
};

inline TttSample make_sample(int64_t n, int64_t prompt, int64_t k, int64_t aux_width, uint32_t seed) {
  std::mt19937 rng(seed);
  TttSample s;
  s.prompt_length = prompt;
  for (int64_t i = 0; i < n; ++i)
    s.tokens.push_back(static_cast<int32_t>(rng() % 80));
  std::vector<float> aux(static_cast<size_t>(n * aux_width));
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& x : aux)
    x = nd(rng);
  s.aux = Tensor::from_f32(aux, {n, aux_width});
  s.teacher_k = k;
  for (int64_t r = 0; r < n - prompt; ++r) {
    float total = 0;
    std::vector<float> w;
    for (int64_t i = 0; i < k; ++i) {
      // Mostly even ids (in the draft vocabulary); the top-1 is the sampled token rounded even.
      s.teacher_ids.push_back(i == 0 ? (s.tokens[prompt + r] & ~1) : static_cast<int32_t>(rng() % 80));
      w.push_back(i == 0 ? 3.f : 1.f / static_cast<float>(i + 1));
      total += w.back();
    }
    for (float x : w)
      s.teacher_logprobs.push_back(std::log(x / total));
  }
  return s;
}

inline void scale_weights(TrainableDraft& d, float factor) {
  for (Param* p : d.params()) {
    float* v = p->value.data<float>();
    const bool norm = p->name.find("norm") != std::string::npos;
    for (int64_t i = 0; i < p->value.numel(); ++i)
      v[i] = norm ? v[i] + 0.05f * std::sin(1.7f * static_cast<float>(i)) : v[i] * factor;
  }
}

// Checks the gradients forward_backward left in d's params (zeroed before it, grad_scale 1)
// against central differences of evaluate(s, o).loss, 6 elements per parameter; returns how many.
inline int expect_gradients_match(TrainableDraft& d, const TttSample& s, const TttOptions& o) {
  const float h = 2e-3f;
  int checked = 0;
  for (Param* p : d.params()) {
    float* v = p->value.data<float>();
    const float* g = p->grad.data<float>();
    for (int64_t s_ = 0; s_ < 6; ++s_) {
      const int64_t i = (s_ * 7919 + 31) % p->value.numel();
      const float keep = v[i];
      v[i] = keep + h;
      const double up = d.evaluate(s, o).loss;
      v[i] = keep - h;
      const double down = d.evaluate(s, o).loss;
      v[i] = keep;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(g[i], numeric, 3e-3 + 3e-2 * std::fabs(numeric)) << p->name << "[" << i << "]";
      ++checked;
    }
  }
  return checked;
}

}  // namespace updraft::train::testing_ttt
