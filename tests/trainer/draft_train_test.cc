// Offline drafter training end to end on a tiny policy: rollouts, capture, vocabulary, TTT
// training, then acceptance measured by the speculative engine on held-out prompts.
#include "trainer/draft_train.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "rollout/engine/engine.h"
#include "rollout/random_policy.h"
#include "tests/rollout/test_models.h"
#include "rollout/capture/capture.h"

namespace updraft::train {
namespace {

struct TinyPolicy {
  PolicyConfig pc = testing_models::tiny_config(PolicyArch::Llama);
  PolicyModel policy = random_policy(pc, 21, DType::F32);

  std::vector<std::vector<int32_t>> prompts(size_t n, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::vector<std::vector<int32_t>> out(n);
    for (auto& p : out)
      for (int i = 0; i < 6; ++i)
        p.push_back(static_cast<int32_t>(1 + rng() % 96));
    return out;
  }

  std::vector<Rollout> rollouts(const std::vector<std::vector<int32_t>>& ps) const {
    Engine e(policy);
    for (const auto& p : ps) {
      GenRequest r;
      r.prompt = p;
      r.params.temperature = 0;
      r.params.max_new_tokens = 40;
      r.params.ignore_eos = true;
      e.submit(r);
    }
    auto res = e.run();
    std::sort(res.begin(), res.end(), [](const GenResult& a, const GenResult& b) { return a.id < b.id; });
    std::vector<Rollout> out;
    for (const auto& r : res)
      out.push_back({r.prompt, r.tokens});
    return out;
  }

  // Greedy speculative decoding of the prompts with the drafter: the engine's statistics.
  SpecStats acceptance(const DraftModel& d, const std::vector<std::vector<int32_t>>& ps) const {
    EngineOptions eo;
    eo.spec = SpecSettings{4, 1, 5};
    Engine e(policy, eo, &d);
    for (const auto& p : ps) {
      GenRequest r;
      r.prompt = p;
      r.params.temperature = 0;
      r.params.max_new_tokens = 40;
      r.params.ignore_eos = true;
      e.submit(r);
    }
    e.run();
    return e.stats().spec;
  }
};

InMemoryDataset capture(const TinyPolicy& s, const std::vector<Rollout>& r) {
  CaptureOptions co;
  co.teacher_k = 8;
  return InMemoryDataset(capture_samples(s.policy, r, co));
}

TEST(DraftTrain, CaptureMatchesThePolicy) {
  TinyPolicy s;
  const auto r = s.rollouts(s.prompts(3, 1));
  const InMemoryDataset data = capture(s, r);
  ASSERT_EQ(data.size(), 3u);
  for (size_t i = 0; i < data.size(); ++i) {
    const TttSample x = data.get(i);
    x.validate(3 * s.pc.hidden_size, s.pc.vocab_size, "captured");
    // Greedy rollouts: every response token is the teacher's top-1.
    for (int64_t j = 0; j < x.response_length(); ++j) {
      int64_t best = 0;
      for (int64_t k = 1; k < x.teacher_k; ++k)
        if (x.teacher_logprobs[j * x.teacher_k + k] > x.teacher_logprobs[j * x.teacher_k + best])
          best = k;
      EXPECT_EQ(x.teacher_ids[j * x.teacher_k + best], x.tokens[x.prompt_length + j]) << "sample " << i << " row " << j;
    }
  }
}

TEST(DraftTrain, TrainingRaisesAcceptance) {
  TinyPolicy s;
  const auto train_prompts = s.prompts(160, 2), held_prompts = s.prompts(16, 3);
  const InMemoryDataset train = capture(s, s.rollouts(train_prompts));
  const InMemoryDataset held = capture(s, s.rollouts(held_prompts));
  double coverage = 0;
  const VocabMap vocab = choose_draft_vocab(train, 64, s.pc.vocab_size, &coverage);
  EXPECT_GT(coverage, 0.9);
  TrainableDraft draft(draft_config_for(s.pc, 64), vocab, s.policy.draft_target(), s.policy.lm_head(), 3);
  const double tau_before = s.acceptance(draft.to_draft(), held_prompts).tau();

  DraftTrainOptions o;
  o.ttt.steps = 3;
  o.steps = 300;
  o.lr = 2e-3;
  o.eval_every = 0;
  const DraftTrainResult r = train_drafter(draft, train, held, o);
  EXPECT_LT(r.heldout_after.mean_loss(), r.heldout_before.mean_loss());
  EXPECT_GT(r.heldout_after.accuracy(0), r.heldout_before.accuracy(0) + 0.2);
  // Serving runs the bf16 copy; round the trained weights the same way before comparing.
  for (auto& [name, t] : draft.params().copy_values(DType::BF16))
    draft.params().find(name)->value.copy_from(t.to_dtype(DType::F32));
  const SpecStats after = s.acceptance(draft.to_draft(), held_prompts);
  // The engine's acceptance must be what the training-time-test logits predict: simulate greedy
  // chain rounds of 4 from the step-k logits (row m-1 at step k drafts token m+1+k).
  int64_t rounds = 0, accepted = 0;
  for (size_t i = 0; i < held.size(); ++i) {
    const TttSample x = held.get(i);
    const auto logits = draft.step_logits(x, 4);
    const int64_t n = x.length(), Vd = draft.vocab().draft_vocab();
    for (int64_t m = x.prompt_length; m + 1 < n;) {
      int64_t a = 0;
      while (a < 4 && m + 1 + a < n) {
        const auto row = logits[static_cast<size_t>(a)].row(m - 1).to_f32_vector();
        const int64_t best = std::max_element(row.begin(), row.end()) - row.begin();
        if (best >= Vd || draft.vocab().to_target(best) != x.tokens[static_cast<size_t>(m + 1 + a)])
          break;
        ++a;
      }
      ++rounds;
      accepted += a;
      m += a + 1;
    }
  }
  const double simulated = 1.0 + static_cast<double>(accepted) / static_cast<double>(rounds);
  EXPECT_NEAR(simulated, after.tau(), 0.03) << "training and serving disagree";
  std::printf("tau before %.3f after %.3f; n-alpha %.2f %.2f %.2f %.2f\n", tau_before, after.tau(), after.alpha(0),
              after.alpha(1), after.alpha(2), after.alpha(3));
  EXPECT_LT(tau_before, 1.1);
  EXPECT_GT(after.tau(), tau_before + 0.3);
}

// The paper's Fig. 7 effect: training with TTT steps k >= 1 raises the acceptance of later
// draft positions (n-alpha, n >= 1) over a drafter trained on step 0 only.
TEST(DraftTrain, TrainingTimeTestHelpsLaterPositions) {
  TinyPolicy s;
  const auto train_prompts = s.prompts(160, 2), held_prompts = s.prompts(16, 3);
  const InMemoryDataset train = capture(s, s.rollouts(train_prompts));
  const InMemoryDataset held = capture(s, s.rollouts(held_prompts));
  const VocabMap vocab = choose_draft_vocab(train, 64, s.pc.vocab_size, nullptr);
  std::vector<SpecStats> st;
  for (int64_t K : {1, 3}) {
    TrainableDraft draft(draft_config_for(s.pc, 64), vocab, s.policy.draft_target(), s.policy.lm_head(), 3);
    DraftTrainOptions o;
    o.ttt.steps = K;
    o.steps = 300;
    o.lr = 2e-3;
    o.eval_every = 0;
    train_drafter(draft, train, held, o);
    st.push_back(s.acceptance(draft.to_draft(), held_prompts));
    std::printf("K=%lld: tau %.3f n-alpha %.2f %.2f %.2f %.2f\n", static_cast<long long>(K), st.back().tau(),
                st.back().alpha(0), st.back().alpha(1), st.back().alpha(2), st.back().alpha(3));
  }
  auto later = [](const SpecStats& x) { return (x.alpha(1) + x.alpha(2) + x.alpha(3)) / 3; };
  EXPECT_GT(later(st[1]), later(st[0]) + 0.05);
  EXPECT_GE(st[1].alpha(3), st[0].alpha(3));
}

TEST(DraftTrain, VocabularyAndConfigChecks) {
  TinyPolicy s;
  const InMemoryDataset data = capture(s, s.rollouts(s.prompts(2, 4)));
  EXPECT_THROW(choose_draft_vocab(data, 0, s.pc.vocab_size, nullptr), Error);
  EXPECT_THROW(choose_draft_vocab(data, s.pc.vocab_size + 1, s.pc.vocab_size, nullptr), Error);
  // Fewer distinct response tokens than the draft vocabulary: padded, still valid.
  const VocabMap m = choose_draft_vocab(data, 90, s.pc.vocab_size, nullptr);
  EXPECT_EQ(m.draft_vocab(), 90);
}

}  // namespace
}  // namespace updraft::train
