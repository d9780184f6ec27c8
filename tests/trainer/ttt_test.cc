// The TTT drafter objective: its gradient against finite differences, and its step logits
// against the drafter's own inference path (a step-k row of training is a k-step chain draft).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/ops.h"
#include "tests/trainer/ttt_fixture.h"
#include "trainer/ttt_model.h"

namespace updraft::train {
namespace {

using testing_ttt::Fixture;
using testing_ttt::make_sample;
using testing_ttt::scale_weights;

TEST(Ttt, GradientMatchesFiniteDifferences) {
  Fixture f;
  TrainableDraft d(f.dc, f.vocab, f.policy.draft_target(), f.policy.lm_head(), 5);
  scale_weights(d, 15.f);
  const TttSample s = make_sample(9, 3, 4, 3 * f.pc.hidden_size, 6);
  const TttOptions o{3, 0.8};
  d.params().zero_grad();
  const TttStats base = d.forward_backward(s, o, 1.f);
  ASSERT_GT(base.rows[0], 0);
  ASSERT_GT(base.rows[2], 0);
  EXPECT_LT(base.rows[2], base.rows[0]);  // later steps run out of response tokens
  const int checked = testing_ttt::expect_gradients_match(d, s, o);
  EXPECT_GT(checked, 60);
}

// Zeroes the gradients, runs one forward-backward; the statistics, and every gradient flattened.
TttStats gradients(TrainableDraft& d, const TttSample& s, const TttOptions& o, std::vector<float>& grads) {
  d.params().zero_grad();
  const TttStats st = d.forward_backward(s, o, 1.f);
  grads.clear();
  for (Param* p : d.params())
    for (float g : p->grad.to_f32_vector())
      grads.push_back(g);
  return st;
}

// Skipping the rows that predict nothing (a long prompt's, the last ones) gives the loss, the
// statistics and the gradients of running every row.
TEST(Ttt, SkippingIdleRowsKeepsLossAndGradients) {
  Fixture f;
  TrainableDraft d(f.dc, f.vocab, f.policy.draft_target(), f.policy.lm_head(), 5);
  scale_weights(d, 8.f);
  const TttSample s = make_sample(20, 11, 4, 3 * f.pc.hidden_size, 9);
  TttOptions skip{4, 0.8}, every_row = skip;
  every_row.skip_idle_rows = false;
  std::vector<float> gs, ga;
  const TttStats skipped = gradients(d, s, skip, gs), all = gradients(d, s, every_row, ga);
  EXPECT_NEAR(skipped.loss, all.loss, 1e-5 * std::fabs(all.loss));
  EXPECT_EQ(skipped.rows, all.rows);
  EXPECT_EQ(skipped.correct, all.correct);
  ASSERT_GT(all.rows[3], 0);
  ASSERT_EQ(gs.size(), ga.size());
  size_t nonzero = 0;
  for (size_t j = 0; j < ga.size(); ++j) {
    EXPECT_NEAR(gs[j], ga[j], 1e-5 + 1e-4 * std::fabs(ga[j])) << "gradient element " << j;
    nonzero += ga[j] != 0.f;
  }
  EXPECT_GT(nonzero, ga.size() / 2);
  // Evaluation takes the same path.
  TttOptions o{4, 0.8};
  const double e1 = d.evaluate(s, o).loss;
  o.skip_idle_rows = false;
  EXPECT_NEAR(e1, d.evaluate(s, o).loss, 1e-5 * std::fabs(e1));
}

// bf16 products (operands rounded, f32 sums): the loss and the gradients follow the f32 ones within
// bf16 rounding, on the vector kernels and on AMX tiles where the CPU has them; a stale bf16 copy
// (the weights changed without a run) is not possible because every run remakes the copies.
TEST(Ttt, Bf16MatmulsFollowF32) {
  Fixture f;
  TrainableDraft d(f.dc, f.vocab, f.policy.draft_target(), f.policy.lm_head(), 5);
  scale_weights(d, 8.f);
  const TttSample s = make_sample(40, 6, 4, 3 * f.pc.hidden_size, 10);
  auto run = [&](TttMatmul m, std::vector<float>& grads) {
    TttOptions o{4, 0.8};
    o.matmul = m;
    return gradients(d, s, o, grads);
  };
  const ops::CpuBf16Kernel before = ops::cpu_bf16_kernel();
  std::vector<ops::CpuBf16Kernel> kernels = {before};
  if (ops::cpu_bf16_kernel_available(ops::CpuBf16Kernel::kAmx) && before != ops::CpuBf16Kernel::kAmx)
    kernels.push_back(ops::CpuBf16Kernel::kAmx);
  std::vector<float> g32, g16;
  const TttStats ref = run(TttMatmul::F32, g32);
  for (ops::CpuBf16Kernel k : kernels) {
    ops::set_cpu_bf16_kernel(k);
    const TttStats low = run(TttMatmul::BF16, g16);
    EXPECT_NEAR(low.loss, ref.loss, 2e-2 * std::fabs(ref.loss)) << ops::cpu_bf16_kernel_name(k);
    EXPECT_EQ(low.rows, ref.rows);
    double diff = 0, norm = 0, dot = 0, norm16 = 0;
    for (size_t i = 0; i < g32.size(); ++i) {
      diff += (g16[i] - g32[i]) * (g16[i] - g32[i]);
      norm += static_cast<double>(g32[i]) * g32[i];
      norm16 += static_cast<double>(g16[i]) * g16[i];
      dot += static_cast<double>(g16[i]) * g32[i];
    }
    EXPECT_LT(std::sqrt(diff / norm), 0.03) << ops::cpu_bf16_kernel_name(k);  // bf16 keeps 8 bits
    EXPECT_GT(dot / std::sqrt(norm * norm16), 0.999) << ops::cpu_bf16_kernel_name(k);
    EXPECT_NE(g16, g32);  // the bf16 path did run
  }
  ops::set_cpu_bf16_kernel(before);
  // The copies follow the weights: after a change, bf16 sees the new weights.
  std::vector<float> again;
  run(TttMatmul::BF16, again);
  scale_weights(d, 0.5f);
  std::vector<float> changed;
  run(TttMatmul::BF16, changed);
  EXPECT_NE(again, changed);
  std::vector<float> changed32;
  run(TttMatmul::F32, changed32);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < changed.size(); ++i) {
    diff += (changed[i] - changed32[i]) * (changed[i] - changed32[i]);
    norm += static_cast<double>(changed32[i]) * changed32[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 0.03);
  // A dataset's evaluation makes the copies once: the same sums as sample by sample, and after a
  // change of the weights it sees the new ones.
  TttOptions o{4, 0.8};
  o.matmul = TttMatmul::BF16;
  const TttSample s2 = make_sample(30, 4, 4, 3 * f.pc.hidden_size, 11);
  const InMemoryDataset data({s, s2});
  const double loss0 = d.evaluate(data, o).loss;
  EXPECT_DOUBLE_EQ(loss0, d.evaluate(s, o).loss + d.evaluate(s2, o).loss);
  scale_weights(d, 0.5f);
  EXPECT_NE(d.evaluate(data, o).loss, loss0);
  EXPECT_DOUBLE_EQ(d.evaluate(data, o).loss, d.evaluate(s, o).loss + d.evaluate(s2, o).loss);
}

// Row p at TTT step k must give the logits the inference path gives for the k-th draft step
// after the committed pairs (g_0, x_1) .. (g_p, x_{p+1}).
TEST(Ttt, StepLogitsEqualChainDraftInference) {
  Fixture f;
  TrainableDraft d(f.dc, f.vocab, f.policy.draft_target(), f.policy.lm_head(), 7);
  scale_weights(d, 10.f);
  // Round to bf16 so that the served copy holds exactly the trained weights.
  for (auto& [name, t] : d.params().copy_values(DType::BF16))
    d.params().find(name)->value.copy_from(t.to_dtype(DType::F32));
  const int64_t n = 8, K = 3;
  const TttSample s = make_sample(n, 2, 3, 3 * f.pc.hidden_size, 8);
  const auto train_logits = d.step_logits(s, K);
  // Served with f32 weights: with bf16 weights the CPU rounds activations to bf16 in every
  // linear (as the GPU does), which would hide a structural difference behind rounding noise.
  const DraftModel served = d.to_draft(DType::F32);
  const int64_t Vd = f.dc.draft_vocab_size;

  for (int64_t p : {0, 2, 4}) {
    KvCache cache(served.kv_shape(), 16, 4);
    SeqKv kv;
    ASSERT_TRUE(cache.reserve(kv, p + 1 + K));
    std::vector<SeqStep> steps(1);
    steps[0].kv = &kv;
    for (int64_t i = 0; i <= p; ++i)
      steps[0].tokens.push_back(s.tokens[static_cast<size_t>(i + 1)]);
    steps[0].logit_rows = {static_cast<int32_t>(p)};
    DraftOut out = served.forward(cache, steps, s.aux.rows(0, p + 1));
    for (int64_t k = 0; k < K && p + 1 + k < n; ++k) {
      const auto got = out.logits.to_f32_vector();
      const auto want = train_logits[static_cast<size_t>(k)].row(p).to_f32_vector();
      ASSERT_EQ(got.size(), static_cast<size_t>(Vd));
      double worst = 0;
      for (int64_t c = 0; c < Vd; ++c)
        worst = std::max(worst, static_cast<double>(std::fabs(got[c] - want[c])));
      EXPECT_LT(worst, 2e-3) << "row " << p << " step " << k;
      if (p + 2 + k >= n)
        break;
      // Next chain step: the fed-back state of the last row, the next ground-truth token.
      const Tensor state = out.state.row(out.state.size(0) - 1);
      std::vector<SeqStep> next(1);
      next[0].kv = &kv;
      next[0].tokens = {s.tokens[static_cast<size_t>(p + 2 + k)]};
      next[0].logit_rows = {0};
      out = served.forward(cache, next, state);
    }
  }
}

TEST(Ttt, TrainingLowersTheLossAndRaisesAccuracy) {
  Fixture f;
  TrainableDraft d(f.dc, f.vocab, f.policy.draft_target(), f.policy.lm_head(), 9);
  // One repeated sample: the draft must be able to fit it.
  TttSample s = make_sample(24, 4, 1, 3 * f.pc.hidden_size, 10);
  const TttOptions o{3, 0.8};
  const TttStats before = d.evaluate(s, o);
  for (int step = 0; step < 150; ++step) {
    d.params().zero_grad();
    d.forward_backward(s, o, 1.f);
    for (Param* p : d.params()) {
      float* v = p->value.data<float>();
      const float* g = p->grad.data<float>();
      for (int64_t i = 0; i < p->value.numel(); ++i)
        v[i] -= 0.3f * g[i];
    }
  }
  const TttStats after = d.evaluate(s, o);
  EXPECT_LT(after.loss, 0.5 * before.loss);
  EXPECT_GT(after.accuracy(0), before.accuracy(0));
  EXPECT_GT(after.accuracy(0), 0.5);
}

TEST(Ttt, RejectsBadSamplesAndVariants) {
  Fixture f;
  TrainableDraft d(f.dc, f.vocab, f.policy.draft_target(), f.policy.lm_head(), 1);
  TttSample s = make_sample(6, 2, 2, 3 * f.pc.hidden_size, 2);
  s.teacher_ids.pop_back();
  EXPECT_THROW(d.evaluate(s, {}), Error);
  s = make_sample(6, 2, 2, 3 * f.pc.hidden_size, 2);
  s.aux = s.aux.rows(0, 5);
  EXPECT_THROW(d.evaluate(s, {}), Error);
  s = make_sample(6, 2, 2, 3 * f.pc.hidden_size, 2);
  s.tokens[3] = 1000;
  EXPECT_THROW(d.evaluate(s, {}), Error);
  DraftConfig nbr = f.dc;
  nbr.norm_before_residual = true;
  EXPECT_THROW(TrainableDraft(nbr, f.vocab, f.policy.draft_target(), f.policy.lm_head(), 1), Error);
}

}  // namespace
}  // namespace updraft::train
