// Property test of the engine's scheduling (rollout/engine/scheduler.h) over thousands of steps:
// random arrivals, prompt and output lengths, sampling settings, aborts, a KV cache small enough
// to force preemptions, drafter hot-swaps (including to and from none), a random speculation
// depth every step, and requests that repeat an earlier prompt (a sibling) or extend it with its
// output (a next turn), so that prefix reuse takes prefixes from running and finished requests. Invariants: every
// request comes back exactly once (finished, or aborted when it was aborted), the KV blocks of both caches return to
// their pools, and every greedy request that finished has the tokens and logprobs of a solo plain run of it (an aborted
// one, a prefix).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "drafter/random_draft.h"
#include "rollout/engine/engine.h"
#include "tests/drafter/test_drafts.h"
#include "tests/rollout/random_depth.h"
#include "tests/rollout/test_models.h"

namespace updraft {
namespace {

class SchedulerProperty : public ::testing::TestWithParam<SpecSettings> {
 protected:
  void SetUp() override {
    cfg_ = testing_models::spec_config();
    model_ = std::make_unique<PolicyModel>(random_policy(cfg_, 21, DType::BF16));
    const DraftConfig dc = testing_models::tiny_draft_config(cfg_, 12);
    for (uint64_t seed : {4, 9})
      drafts_.push_back(std::make_unique<DraftModel>(
          random_draft(dc, spread_vocab(12, cfg_.vocab_size), model_->draft_target(), seed, DType::BF16)));
  }
  GenResult solo(const GenRequest& r) {
    EngineOptions o;
    o.kv_cache_bytes = 1 << 20;
    Engine e(*model_, o);
    e.submit(r);
    return e.run().at(0);
  }
  PolicyConfig cfg_;
  std::unique_ptr<PolicyModel> model_;
  std::vector<std::unique_ptr<DraftModel>> drafts_;
};

TEST_P(SchedulerProperty, EveryRequestEndsOnceBlocksReturnAndGreedyMatchesSoloRuns) {
  const SpecSettings spec = GetParam();
  EngineOptions o;
  o.block_size = 4;
  o.prefill_chunk = 9;
  o.max_batch = 12;
  o.spec = spec;
  o.kv_cache_bytes = 28 * KvCache::block_bytes(model_->kv_shape(), o.block_size);
  o.draft_kv_cache_bytes = 40 * KvCache::block_bytes(drafts_[0]->kv_shape(), o.block_size);
  o.draft_backlog = 5;
  Engine e(*model_, o, drafts_[0].get());
  RandomDepth chooser(spec, 7);
  e.set_depth_chooser(&chooser);
  ASSERT_EQ(e.cache().num_blocks(), 28);
  ASSERT_EQ(e.draft_cache()->num_blocks(), 40);
  std::mt19937_64 rng(2024);
  auto uni = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  std::map<uint64_t, GenRequest> submitted;
  std::set<uint64_t> aborted, live;
  std::map<uint64_t, GenResult> results;
  const int kSteps = 2500;
  int swaps = 0;
  for (int step = 0; step < kSteps || e.has_work(); ++step) {
    if (step < kSteps && uni(0, 2) == 0)
      for (int64_t k = uni(1, 3); k > 0; --k) {
        GenRequest r;
        const int64_t kind = uni(0, 5);
        if (kind <= 1 && !submitted.empty()) {  // a sibling of an earlier request, or its next turn
          auto it = submitted.end();            // one of the last 8 (ids ascend): still running, or kept
          std::advance(it, -uni(1, std::min<int64_t>(8, static_cast<int64_t>(submitted.size()))));
          r.prompt = it->second.prompt;
          const auto done = results.find(it->first);
          if (kind == 1 && done != results.end())
            r.prompt.insert(r.prompt.end(), done->second.tokens.begin(), done->second.tokens.end());
          r.prompt.resize(std::min<size_t>(r.prompt.size(), 40));
        }
        for (int64_t j = kind == 2 ? uni(16, 30) : uni(r.prompt.empty() ? 1 : 0, kind <= 1 ? 3 : 14); j > 0; --j)
          r.prompt.push_back(static_cast<int32_t>(uni(0, cfg_.vocab_size - 1)));
        r.params.max_new_tokens = uni(1, 24);
        r.params.temperature = uni(0, 2) == 0 ? 0.9f : 0.f;
        r.params.has_seed = true;
        r.params.seed = rng();
        if (uni(0, 5) == 0)
          r.params.stop_token_ids = {static_cast<int32_t>(uni(0, cfg_.vocab_size - 1))};
        r.speculate = uni(0, 4) != 0;
        const uint64_t id = e.submit(r);
        submitted[id] = r;
        live.insert(id);
      }
    if (step < kSteps && !live.empty() && uni(0, 30) == 0) {
      auto it = live.begin();
      std::advance(it, uni(0, static_cast<int64_t>(live.size()) - 1));
      if (e.abort(*it))
        aborted.insert(*it);
    }
    if (step < kSteps && step % 300 == 150) {  // a -> b -> none -> a ...
      const DraftModel* next = swaps % 3 == 0 ? drafts_[1].get() : swaps % 3 == 1 ? nullptr : drafts_[0].get();
      e.set_drafter(next);
      ++swaps;
    }
    for (GenResult& g : e.step()) {
      ASSERT_TRUE(submitted.count(g.id)) << "unknown result " << g.id;
      ASSERT_FALSE(results.count(g.id)) << "request " << g.id << " came back twice";
      live.erase(g.id);
      results[g.id] = std::move(g);
    }
    ASSERT_LT(step, kSteps * 4) << "the engine does not drain";
  }
  ASSERT_EQ(results.size(), submitted.size());
  e.drop_prefix_donors();
  EXPECT_EQ(e.cache().free_blocks(), e.cache().num_blocks());
  if (e.draft_cache() != nullptr) {
    EXPECT_EQ(e.draft_cache()->free_blocks(), e.draft_cache()->num_blocks());
  }
  EXPECT_GT(e.stats().preemptions, 10) << "the cache should be small enough to force preemptions";
  EXPECT_GT(e.stats().reused_tokens, 1000) << "siblings and next turns should take prefixes from the caches";
  EXPECT_GT(e.stats().spec.rounds, 500);
  EXPECT_GE(swaps, 8);
  EXPECT_GT(chooser.observed, 1000);
  EXPECT_EQ(chooser.changes, swaps);
  int checked = 0, checked_aborted = 0, preempted = 0;
  for (const auto& [id, g] : results) {
    const bool was_aborted = aborted.count(id) > 0;
    EXPECT_EQ(g.finish_reason == "abort", was_aborted) << "request " << id;
    preempted += g.preemptions > 0;
    const GenRequest& r = submitted[id];
    if (r.params.temperature != 0)
      continue;
    const GenResult want = solo(r);
    if (was_aborted) {
      ASSERT_LE(g.tokens.size(), want.tokens.size());
      EXPECT_TRUE(std::equal(g.tokens.begin(), g.tokens.end(), want.tokens.begin())) << "aborted request " << id;
      ++checked_aborted;
      continue;
    }
    ASSERT_EQ(g.tokens, want.tokens) << "request " << id << " (preempted " << g.preemptions << " times)";
    ASSERT_EQ(g.finish_reason, want.finish_reason) << "request " << id;
    for (size_t j = 0; j < g.logprobs.size(); ++j)
      ASSERT_NEAR(g.logprobs[j], want.logprobs[j], 1e-5) << "request " << id << " token " << j;
    ++checked;
  }
  EXPECT_GT(checked, 300);
  EXPECT_GT(checked_aborted, 3);
  EXPECT_GT(preempted, 10);
}

INSTANTIATE_TEST_SUITE_P(Settings, SchedulerProperty, ::testing::Values(SpecSettings{4, 1, 5}, SpecSettings{3, 3, 8}),
                         [](const auto& info) { return info.param.chain() ? "chain" : "tree"; });

}  // namespace
}  // namespace updraft
