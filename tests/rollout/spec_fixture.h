// The speculation tests' fixture: a tiny random policy with a 16-token vocabulary and a random
// drafter (draft vocabulary of 12 ids, so the d2t mapping is exercised; the small vocabulary
// makes acceptances frequent enough to exercise every commit path), and a run of requests
// through one engine, plain (spec null) or speculative.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "drafter/random_draft.h"
#include "kernels/ops.h"
#include "rollout/engine/engine.h"
#include "tests/drafter/test_drafts.h"
#include "tests/rollout/test_models.h"

namespace updraft::testing_spec {

// A deterministic prompt of `len` tokens, the p-th of a family (the speculation tests' prompts).
inline std::vector<int32_t> pattern_prompt(int p, int len, int64_t vocab) {
  std::vector<int32_t> prompt;
  for (int j = 0; j < len; ++j)
    prompt.push_back(static_cast<int32_t>((p * 7 + j * 3 + j * j) % vocab));
  return prompt;
}

// Suffix drafts on every step (no gate: its choices depend on timing), from matches of one token,
// at most `nodes` nodes, a lookup offering at most its match length's nodes (tests count them).
inline SuffixOptions both(int64_t nodes = 6) {
  SuffixOptions o;
  o.mode = SuffixMode::kBoth;
  o.max_nodes = nodes;
  o.min_prob = 0.05;
  o.gate = false;
  o.min_match = 1;
  o.spec_factor = 1;
  return o;
}

// Requests submitted in waves of `wave`, three steps apart, through one engine; results by id.
inline std::vector<GenResult> run_waves(const PolicyModel& m, const DraftModel* d, const std::vector<GenRequest>& reqs,
                                        EngineOptions o, size_t wave, EngineStats* stats = nullptr) {
  Engine e(m, o, d);
  std::vector<GenResult> out;
  for (size_t i = 0; i < reqs.size(); ++i) {
    e.submit(reqs[i]);
    if (i % wave == wave - 1)
      for (int k = 0; k < 3; ++k)
        for (GenResult& g : e.step())
          out.push_back(std::move(g));
  }
  for (GenResult& g : e.run())
    out.push_back(std::move(g));
  std::sort(out.begin(), out.end(), [](const GenResult& a, const GenResult& b) { return a.id < b.id; });
  if (stats != nullptr)
    *stats = e.stats();
  return out;
}

class SpecFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = testing_models::spec_config();
    model_ = std::make_unique<PolicyModel>(random_policy(cfg_, 21, DType::BF16));
    const DraftConfig dc = testing_models::tiny_draft_config(cfg_, 12);
    draft_ = std::make_unique<DraftModel>(
        random_draft(dc, spread_vocab(12, cfg_.vocab_size), model_->draft_target(), 4, DType::BF16));
  }
  static GenRequest req(std::vector<int32_t> prompt, float temp, int64_t max_new, uint64_t seed) {
    return testing_models::seeded_request(std::move(prompt), temp, max_new, seed);
  }
  // The greedy identity tests' 64 requests: prompts of 2-18 tokens, 6-34 new tokens, every third
  // with a stop token, so that stops and length limits fall inside rounds.
  std::vector<GenRequest> greedy_requests() const {
    std::vector<GenRequest> reqs;
    for (int i = 0; i < 64; ++i) {
      GenRequest r = req(pattern_prompt(i, 2 + (i * 5) % 17, cfg_.vocab_size), 0.f, 6 + (i * 11) % 29, 0);
      if (i % 3 == 0)
        r.params.stop_token_ids = {static_cast<int32_t>(i % cfg_.vocab_size)};
      reqs.push_back(r);
    }
    return reqs;
  }
  // The merged-tree tests' 30 greedy requests: 10 prompts, each three times (siblings whose
  // completions the group and history indexes draft from), every fourth with a stop token.
  std::vector<GenRequest> sibling_requests() const {
    std::vector<GenRequest> reqs;
    for (int i = 0; i < 30; ++i) {
      const int p = i % 10;
      GenRequest r = req(pattern_prompt(p, 2 + (p * 5) % 11, cfg_.vocab_size), 0.f, 8 + (i * 11) % 31, 0);
      if (i % 4 == 0)
        r.params.stop_token_ids = {static_cast<int32_t>(i % cfg_.vocab_size)};
      reqs.push_back(r);
    }
    return reqs;
  }
  std::vector<GenResult> run(const std::vector<GenRequest>& reqs, int64_t batch, const SpecSettings* spec,
                             AcceptRule rule = AcceptRule::Exact, SpecStats* stats = nullptr) {
    EngineOptions o;
    o.max_batch = batch;
    o.kv_cache_bytes = 64 << 20;
    o.prefill_chunk = 7;  // several chunks for the longer prompts, beside decoding sequences
    if (spec != nullptr)
      o.spec = *spec;
    o.accept_rule = rule;
    o.draft_sampling = drafts_;
    Engine e(*model_, o, spec != nullptr ? draft_.get() : nullptr);
    for (const auto& r : reqs)
      e.submit(r);
    auto out = e.run();
    if (stats != nullptr)
      *stats = e.stats().spec;
    return out;
  }

  DraftSampling drafts_ = DraftSampling::kOn;  // run()'s engines: sampling chains draw their drafts
  PolicyConfig cfg_;
  std::unique_ptr<PolicyModel> model_;
  std::unique_ptr<DraftModel> draft_;
};

// The exact joint distribution of the first two tokens after `prompt` (enumerating the first).
inline std::vector<double> exact_pairs(const PolicyModel& m, const std::vector<int32_t>& prompt, float temp, int32_t top_k,
                                float top_p) {
  const int64_t V = m.config().vocab_size;
  auto probs_after = [&](const std::vector<int32_t>& toks) {
    Tensor p = Tensor::empty({1, V}, DType::F32);
    ops::sampling_probs(Tensor::from_f32(testing_models::last_logits(m, toks), {1, V}), Tensor::from_f32({temp}, {1}),
                        Tensor::from_i32({top_k}, {1}), Tensor::from_f32({top_p}, {1}), p);
    return p.to_f32_vector();
  };
  const auto p0 = probs_after(prompt);
  std::vector<double> joint(static_cast<size_t>(V * V), 0.0);
  for (int32_t a = 0; a < V; ++a) {
    if (p0[a] == 0)
      continue;
    std::vector<int32_t> toks = prompt;
    toks.push_back(a);
    const auto p1 = probs_after(toks);
    for (int32_t b = 0; b < V; ++b)
      joint[a * V + b] = static_cast<double>(p0[a]) * p1[b];
  }
  return joint;
}

}  // namespace updraft::testing_spec
