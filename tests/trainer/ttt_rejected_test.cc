// The TTT objective's weighting of the positions where the serving speculation was rejected
// (TttSample::rejected, TttOptions::rejected_weight): the weighted loss is the weighted mean of
// the rows' soft cross-entropies, recomputed here from the step logits; its gradient matches
// finite differences; and the weights move emphasis between positions, never the loss's scale.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/core/error.h"
#include "tests/trainer/ttt_fixture.h"
#include "trainer/ttt_teacher.h"

namespace updraft::train {
namespace {

using testing_ttt::Fixture;
using testing_ttt::make_sample;
using testing_ttt::scale_weights;

// -Σ_v p_v log softmax(z)_v over one row.
double soft_ce(const float* z, const float* p, int64_t V) {
  double mx = z[0];
  for (int64_t v = 1; v < V; ++v)
    mx = std::max(mx, static_cast<double>(z[v]));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v)
    sum += std::exp(z[v] - mx);
  const double lse = mx + std::log(sum);
  double ce = 0;
  for (int64_t v = 0; v < V; ++v)
    ce -= p[v] * (z[v] - lse);
  return ce;
}

TEST(TttRejected, LossIsTheWeightedMeanOfTheRowsCrossEntropies) {
  Fixture f;
  TrainableDraft d(f.dc, f.vocab, f.policy.draft_target(), f.policy.lm_head(), 5);
  scale_weights(d, 10.f);
  TttSample s = make_sample(24, 6, 4, 3 * f.pc.hidden_size, 3);
  s.rejected = {0, 3, 4, 9, 17};
  const double W = 4.0, decay = 0.8;
  const int64_t K = 3, T = s.length() - 1, Vd = f.dc.draft_vocab_size;
  const std::vector<Tensor> logits = d.step_logits(s, K);
  double expected = 0, norm = 0;
  for (int64_t k = 0; k < K; ++k) {
    const StepTeacher te = make_teacher(s, f.vocab, k);  // weights recomputed below, not taken from it
    double sum = 0;
    for (int64_t p = 0; p < T; ++p) {
      if (te.top[static_cast<size_t>(p)] < 0)
        continue;
      const auto r = static_cast<int32_t>(p + 2 + k - s.prompt_length);
      const double w = std::count(s.rejected.begin(), s.rejected.end(), r) ? W : 1.0;
      sum += w * soft_ce(logits[static_cast<size_t>(k)].data<float>() + p * Vd, te.probs.data<float>() + p * Vd, Vd);
      if (k == 0)
        norm += w;
    }
    expected += std::pow(decay, static_cast<double>(k)) * sum;
  }
  expected /= norm;
  TttOptions o{K, decay};
  o.rejected_weight = W;
  const double got = d.evaluate(s, o).loss;
  EXPECT_NEAR(got, expected, 1e-4 * std::fabs(expected));
  o.rejected_weight = 1;
  EXPECT_GT(std::fabs(d.evaluate(s, o).loss - got), 1e-3 * std::fabs(got));  // the weights mattered
}

TEST(TttRejected, GradientMatchesFiniteDifferences) {
  Fixture f;
  TrainableDraft d(f.dc, f.vocab, f.policy.draft_target(), f.policy.lm_head(), 5);
  scale_weights(d, 15.f);
  TttSample s = make_sample(9, 3, 4, 3 * f.pc.hidden_size, 6);
  s.rejected = {1, 4};
  TttOptions o{3, 0.8};
  o.rejected_weight = 5;
  d.params().zero_grad();
  ASSERT_GT(d.forward_backward(s, o, 1.f).rows[0], 0);
  EXPECT_GT(testing_ttt::expect_gradients_match(d, s, o), 60);
}

TEST(TttRejected, WeightsMoveEmphasisNotScale) {
  Fixture f;
  TrainableDraft d(f.dc, f.vocab, f.policy.draft_target(), f.policy.lm_head(), 5);
  scale_weights(d, 10.f);
  TttSample s = make_sample(20, 5, 4, 3 * f.pc.hidden_size, 8);
  const TttOptions plain{3, 0.8};
  const double base = d.evaluate(s, plain).loss;
  TttOptions o = plain;
  o.rejected_weight = 3;
  EXPECT_EQ(d.evaluate(s, o).loss, base);  // nothing marked: nothing to weigh
  for (int32_t r = 0; r < s.response_length(); ++r)
    s.rejected.push_back(r);
  EXPECT_NEAR(d.evaluate(s, o).loss, base, 1e-6 * std::fabs(base));  // everything marked alike
}

TEST(TttRejected, BadMarksAndWeightsAreRefused) {
  Fixture f;
  TrainableDraft d(f.dc, f.vocab, f.policy.draft_target(), f.policy.lm_head(), 5);
  TttSample s = make_sample(12, 4, 4, 3 * f.pc.hidden_size, 2);
  TttOptions o{2, 0.8};
  o.rejected_weight = 0;
  EXPECT_THROW(d.evaluate(s, o), Error);
  o.rejected_weight = 2;
  s.rejected = {8};  // the response holds 8 tokens: indices 0..7
  EXPECT_THROW(d.evaluate(s, o), Error);
  s.rejected = {3, 2};
  EXPECT_THROW(d.evaluate(s, o), Error);
  s.rejected = {2, 7};
  EXPECT_NO_THROW(d.evaluate(s, o));
}

}  // namespace
}  // namespace updraft::train
