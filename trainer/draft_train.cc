#include "trainer/draft_train.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "kernels/ops/sampling.h"
#include "trainer/adamw.h"

namespace updraft::train {

VocabMap choose_draft_vocab(const TttDataset& data, int64_t draft_vocab, int64_t target_vocab, double* coverage) {
  UPD_REQUIRE(draft_vocab >= 1 && draft_vocab <= target_vocab)
      << "draft vocabulary size " << draft_vocab << " must be in [1, " << target_vocab << "]";
  std::vector<int64_t> counts(static_cast<size_t>(target_vocab), 0);
  for (size_t i = 0; i < data.size(); ++i) {
    const TttSample s = data.get(i);
    for (size_t j = static_cast<size_t>(s.prompt_length); j < s.tokens.size(); ++j) {
      const int32_t t = s.tokens[j];
      UPD_REQUIRE(t >= 0 && t < target_vocab) << "draft vocabulary: token " << t << " outside the vocabulary";
      ++counts[static_cast<size_t>(t)];
    }
  }
  VocabMap m = VocabMap::from_counts(counts, draft_vocab);
  if (coverage != nullptr)
    *coverage = m.coverage(counts);
  return m;
}

DraftConfig draft_config_for(const PolicyConfig& p, int64_t draft_vocab) {
  DraftConfig c;
  c.format = DraftFormat::Eagle;
  c.hidden_size = p.hidden_size;
  c.target_hidden_size = p.hidden_size;
  c.intermediate_size = p.intermediate_size;
  c.num_heads = p.num_heads;
  c.num_kv_heads = p.num_kv_heads;
  c.head_dim = p.head_dim;
  c.vocab_size = p.vocab_size;
  c.draft_vocab_size = draft_vocab;
  c.max_position_embeddings = p.max_position_embeddings;
  c.rms_norm_eps = p.rms_norm_eps;
  c.rope = p.rope;
  c.dtype = DType::BF16;
  return c;
}

double estimated_chain_tau(const TttStats& s) {
  double tau = 1.0, run = 1.0;
  for (size_t k = 0; k < s.rows.size(); ++k) {
    run *= s.accuracy(k);
    tau += run;
  }
  return tau;
}

TttStats evaluate_drafter(const TrainableDraft& draft, const TttDataset& data, const TttOptions& o) {
  return draft.evaluate(data, o);
}

std::string accuracy_line(const TttStats& s) {
  std::string out = "acc";
  for (size_t k = 0; k < s.rows.size(); ++k) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%s%.0f", k == 0 ? " " : "/", 100.0 * s.accuracy(k));
    out += buf;
  }
  return out + "%";
}

DraftTrainResult train_drafter(TrainableDraft& draft, const TttDataset& train, const TttDataset& heldout,
                               const DraftTrainOptions& o) {
  UPD_REQUIRE(train.size() > 0) << "drafter training: no training samples";
  UPD_REQUIRE(o.steps > 0 && o.samples_per_step > 0) << "drafter training: steps and samples per step must be positive";
  auto say = [&](const std::string& s) {
    if (o.progress)
      o.progress(s);
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  char buf[256];
  DraftTrainResult res;
  res.heldout_before = evaluate_drafter(draft, heldout, o.ttt);
  std::snprintf(buf, sizeof buf, "held-out before training: loss %.3f ", res.heldout_before.mean_loss());
  say(buf + accuracy_line(res.heldout_before));

  AdamWOptions ao;
  ao.beta1 = 0.9;
  ao.beta2 = 0.95;
  ao.weight_decay = 0;
  AdamW opt(draft.params(), ao);
  LrScheduleOptions so;
  so.peak_lr = o.lr;
  so.total_steps = o.steps;
  so.warmup_steps = std::min(o.warmup_steps, o.steps / 5);
  so.min_lr_ratio = 0.1;
  const LrSchedule sched(so);

  // Seeded epochs over a shuffled order (Fisher-Yates with counter-based draws).
  std::vector<size_t> order(train.size());
  size_t cursor = order.size();
  uint64_t epoch = 0;
  auto next_index = [&] {
    if (cursor == order.size()) {
      std::iota(order.begin(), order.end(), size_t{0});
      for (size_t i = order.size(); i > 1; --i) {
        const uint64_t r = ops::mix64(o.seed ^ ops::mix64(epoch * 0x9e3779b97f4a7c15ULL + i));
        std::swap(order[i - 1], order[r % i]);
      }
      ++epoch;
      cursor = 0;
    }
    return order[cursor++];
  };

  TttStats window;
  for (int64_t step = 0; step < o.steps; ++step) {
    draft.params().zero_grad();
    for (int64_t i = 0; i < o.samples_per_step; ++i)
      window.add(draft.forward_backward(train.get(next_index()), o.ttt, 1.0f / static_cast<float>(o.samples_per_step)));
    double gnorm = 0;
    const float clip = clip_scale(draft.params(), o.clip, &gnorm);
    if (!std::isfinite(gnorm)) {
      ++res.skipped;
      continue;
    }
    opt.step(sched.lr(step), clip);
    const bool last = step + 1 == o.steps;
    if ((step + 1) % 25 == 0 || last) {
      std::snprintf(buf, sizeof buf, "step %lld/%lld  loss %.3f  lr %.2e  |g| %.2f  ", static_cast<long long>(step + 1),
                    static_cast<long long>(o.steps), window.mean_loss(), sched.lr(step), gnorm);
      say(buf + accuracy_line(window) + "  (" + std::to_string(static_cast<int>(seconds())) + " s)");
      window = TttStats{};
    }
    if ((o.eval_every > 0 && (step + 1) % o.eval_every == 0 && !last)) {
      const TttStats h = evaluate_drafter(draft, heldout, o.ttt);
      std::snprintf(buf, sizeof buf, "  held-out: loss %.3f  tau-hat %.2f  ", h.mean_loss(), estimated_chain_tau(h));
      say(buf + accuracy_line(h));
    }
  }
  res.steps = o.steps;
  res.heldout_after = evaluate_drafter(draft, heldout, o.ttt);
  res.seconds = seconds();
  std::snprintf(buf, sizeof buf, "held-out after training: loss %.3f ", res.heldout_after.mean_loss());
  say(buf + accuracy_line(res.heldout_after));
  return res;
}

}  // namespace updraft::train
