// Lossless speculative generation (the verifier's unit tests are spec_verify_test.cc).
//
// Engine tests on a tiny random policy with a 16-token vocabulary and a random drafter (draft
// vocabulary of 12 ids, so the d2t mapping is exercised; the small vocabulary makes acceptances
// frequent enough to exercise every commit path):
//  - temperature 0: tokens, finish reasons and logprobs identical to plain decoding for 64
//    prompts at batch sizes 1, 4, 16 and 64, chain and tree, with stop tokens and length limits
//    falling inside rounds;
//    (a chain that stops early too);
//  - temperature > 0: spec_sampling_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "drafter/random_draft.h"
#include "kernels/ops.h"
#include "rollout/engine/engine.h"
#include "rollout/spec/speculator.h"
#include "tests/drafter/test_drafts.h"
#include "tests/rollout/spec_fixture.h"
#include "tests/rollout/test_models.h"

namespace updraft {
namespace {

using SpecEngine = testing_spec::SpecFixture;

// The depth chooser's shallower chains keep the full settings' stop (SpecSettings::stop_below).
TEST(SpecDepth, ShallowerChainsKeepTheStop) {
  const SpecSettings full{8, 1, 9, 0.35};
  for (int64_t d : allowed_depths(full)) {
    if (d == 0)
      continue;
    const SpecSettings s = settings_at_depth(full, d);
    EXPECT_EQ(s.steps, d);
    EXPECT_EQ(s.draft_tokens, d + 1);
    EXPECT_EQ(s.stop_below, 0.35) << "depth " << d;
  }
}

// The same identity on every CPU bf16 kernel this machine has (each keeps a row's bits whatever
// the rows computed with it; with AMX the test model's K = 48 matmuls run the FMA kernel).
TEST_F(SpecEngine, GreedyIsTokenIdenticalToPlainDecodingOnEveryCpuKernel) {
  const ops::CpuBf16Kernel saved = ops::cpu_bf16_kernel();
  std::vector<GenRequest> reqs;
  for (int i = 0; i < 24; ++i) {
    std::vector<int32_t> prompt;
    for (int j = 0; j < 2 + (i * 5) % 13; ++j)
      prompt.push_back(static_cast<int32_t>((i * 7 + j * 3 + j * j) % cfg_.vocab_size));
    reqs.push_back(req(prompt, 0.f, 6 + (i * 11) % 23, 0));
  }
  for (ops::CpuBf16Kernel k : {ops::CpuBf16Kernel::kPortable, ops::CpuBf16Kernel::kAvx2, ops::CpuBf16Kernel::kFma,
                               ops::CpuBf16Kernel::kDot, ops::CpuBf16Kernel::kAmx}) {
    if (!ops::cpu_bf16_kernel_available(k))
      continue;
    ops::set_cpu_bf16_kernel(k);
    const auto plain = run(reqs, 24, nullptr);
    for (const SpecSettings s : {SpecSettings{4, 1, 5}, SpecSettings{3, 3, 8}})
      for (int64_t batch : {1, 24})
        ASSERT_NO_FATAL_FAILURE(testing_models::expect_same_outputs(run(reqs, batch, &s), plain,
                                                                    std::string(ops::cpu_bf16_kernel_name(k)) +
                                                                        " batch " + std::to_string(batch) + ", top_k " +
                                                                        std::to_string(s.top_k)));
  }
  ops::set_cpu_bf16_kernel(saved);
}

// With AMX every product of a policy and drafter whose widths are multiples of 32 reads its
// weights from tile panels (ops::prepare_linear at build), and q/k/v and gate/up run in one pass
// of the thread team: the identity holds there too.
TEST_F(SpecEngine, GreedyIsTokenIdenticalWithEveryProductOnAmxPanels) {
  if (!ops::cpu_bf16_kernel_available(ops::CpuBf16Kernel::kAmx))
    GTEST_SKIP() << "this CPU (or kernel) offers no AMX-BF16";
  const ops::CpuBf16Kernel saved = ops::cpu_bf16_kernel();
  ops::set_cpu_bf16_kernel(ops::CpuBf16Kernel::kAmx);
  cfg_.intermediate_size = 64;
  cfg_.head_dim = 8;  // q and o: 4 x 8 = 32 wide
  model_ = std::make_unique<PolicyModel>(random_policy(cfg_, 23, DType::BF16));
  draft_ = std::make_unique<DraftModel>(random_draft(testing_models::tiny_draft_config(cfg_, 12),
                                                     spread_vocab(12, cfg_.vocab_size), model_->draft_target(), 5,
                                                     DType::BF16));
  std::vector<GenRequest> reqs;
  for (int i = 0; i < 24; ++i)
    reqs.push_back(req(testing_spec::pattern_prompt(i, 2 + (i * 5) % 13, cfg_.vocab_size), 0.f, 6 + (i * 11) % 23, 0));
  const auto plain = run(reqs, 24, nullptr);
  for (const SpecSettings s : {SpecSettings{4, 1, 5}, SpecSettings{3, 3, 8}})
    for (int64_t batch : {1, 24})
      ASSERT_NO_FATAL_FAILURE(testing_models::expect_same_outputs(
          run(reqs, batch, &s), plain,
          "amx panels, batch " + std::to_string(batch) + ", top_k " + std::to_string(s.top_k)));
  ops::set_cpu_bf16_kernel(saved);
}

// Host KV caches are not cleared (kernels/nn/kv_cache.cc). Here every cache starts as NaN, so a
// forward that read an entry no forward, keep() or share_prefix() wrote would show in the
// logprobs: plain decoding, a chain, a tree and merged trees, with prefixes shared between siblings.
TEST_F(SpecEngine, NoStepReadsACacheEntryBeforeItIsWritten) {
  const std::vector<GenRequest> reqs = sibling_requests();
  const auto clean = run(reqs, 8, nullptr);
  testing_models::ScopedKvPoison poison;
  ASSERT_NO_FATAL_FAILURE(testing_models::expect_same_outputs(run(reqs, 8, nullptr), clean, "plain"));
  for (const SpecSettings s : {SpecSettings{4, 1, 5}, SpecSettings{3, 3, 8}}) {
    ASSERT_NO_FATAL_FAILURE(
        testing_models::expect_same_outputs(run(reqs, 8, &s), clean, "top_k " + std::to_string(s.top_k)));
    EngineOptions o;
    o.kv_cache_bytes = 64 << 20;
    o.spec = s;
    o.suffix = testing_spec::both();
    ASSERT_NO_FATAL_FAILURE(
        testing_models::expect_same_outputs(testing_spec::run_waves(*model_, draft_.get(), reqs, o, 10), clean,
                                            "merged, top_k " + std::to_string(s.top_k)));
  }
}

TEST_F(SpecEngine, GreedyIsTokenIdenticalToPlainDecoding) {
  const std::vector<GenRequest> reqs = greedy_requests();
  const auto plain = run(reqs, 64, nullptr);
  int stops = 0;
  for (const auto& r : plain)
    stops += r.finish_reason == "stop";
  EXPECT_GT(stops, 5) << "the prompts should exercise stop tokens";
  // The third: a chain that stops once its drafts are jointly unlikely (rounds of every depth).
  for (const SpecSettings s : {SpecSettings{4, 1, 5}, SpecSettings{3, 3, 8}, SpecSettings{6, 1, 7, 0.005}}) {
    for (int64_t batch : {1, 4, 16, 64}) {
      SpecStats st;
      const auto spec = run(reqs, batch, &s, AcceptRule::Exact, &st);
      if (s.stop_below > 0) {  // some rounds stopped early, not all of them at the first draft
        const double per_round = static_cast<double>(st.drafted) / static_cast<double>(st.rounds);
        EXPECT_GT(per_round, 1.5) << "batch " << batch;
        EXPECT_LT(per_round, static_cast<double>(s.steps) - 0.5) << "batch " << batch;
      }
      ASSERT_NO_FATAL_FAILURE(testing_models::expect_same_outputs(
          spec, plain, "batch " + std::to_string(batch) + ", top_k " + std::to_string(s.top_k)));
      EXPECT_GT(st.rounds, 0);
      EXPECT_GT(st.accepted, 20) << "too few acceptances to exercise the commit path (batch " << batch << ")";
      // Stops and length limits must land inside rounds (accepted tokens cut short), and every
      // request's share of the batched passes must add up to the engine's totals.
      int cut_by_stop = 0, cut_by_length = 0;
      double draft_s = 0, verify_s = 0;
      for (const auto& r : spec) {
        cut_by_stop += r.spec.truncated > 0 && r.finish_reason == "stop";
        cut_by_length += r.spec.truncated > 0 && r.finish_reason == "length";
        EXPECT_LE(r.spec.truncated, 1) << "a request ends in at most one round";
        draft_s += r.spec.draft_seconds;
        verify_s += r.spec.verify_seconds;
        int64_t drafted = 0, accepted = 0, emitted = 1;  // the prefill's token first
        for (size_t i = 0; i < r.rounds.size(); ++i) {
          const SpecRound& x = r.rounds[i];
          drafted += x.drafted;
          accepted += x.accepted;
          emitted += x.accepted + 1;
          // A round marks the token after its accepted path when drafts there were all turned
          // down: in a chain, whenever it stopped short of the chain's end and was not cut.
          const bool cut = i + 1 == r.rounds.size() && r.spec.truncated > 0;
          if (s.top_k == 1) {
            EXPECT_EQ(x.rejected_at >= 0, x.accepted < x.depth && !cut) << "round " << i;
          } else if (x.rejected_at >= 0) {
            EXPECT_LT(x.accepted, x.depth) << "round " << i;
          }
          if (x.rejected_at >= 0) {
            EXPECT_EQ(x.rejected_at, emitted - 1) << "round " << i;
          }
        }
        EXPECT_EQ(static_cast<int64_t>(r.rounds.size()), r.spec.rounds);
        EXPECT_EQ(drafted, r.spec.drafted);
        EXPECT_EQ(accepted, r.spec.accepted);
        if (r.spec.rounds > 0) {
          EXPECT_GT(r.spec.verify_seconds, 0.0);
          EXPECT_GT(r.spec.draft_seconds, 0.0);
        }
      }
      EXPECT_GT(cut_by_stop, 0) << "no stop token landed inside a round (batch " << batch << ")";
      EXPECT_GT(cut_by_length, 0) << "no length limit landed inside a round (batch " << batch << ")";
      EXPECT_EQ(cut_by_stop + cut_by_length, st.truncated);
      EXPECT_NEAR(verify_s, st.verify_seconds, 1e-9 + 1e-9 * st.verify_seconds);
      EXPECT_NEAR(draft_s, st.draft_seconds, 1e-9 + 1e-9 * st.draft_seconds);
      EXPECT_GT(st.verify_seconds, 0.0);
      EXPECT_GT(st.draft_seconds, 0.0);
      if (s.top_k == 1) {
        EXPECT_GT(st.accepted_at.size(), 1u) << "no round accepted two chain drafts";
      }
    }
  }
}

TEST_F(SpecEngine, BadRequestsDoNotDisturbSpeculatingOnes) {
  std::vector<GenRequest> good;
  for (int i = 0; i < 6; ++i)
    good.push_back(req({static_cast<int32_t>(i + 1), 2, 3}, i % 2 ? 0.f : 0.9f, 10, 40 + i));
  const SpecSettings s{4, 1, 5};
  const auto want = run(good, 8, &s);
  EngineOptions o;
  o.max_batch = 8;
  o.kv_cache_bytes = 64 << 20;
  o.prefill_chunk = 7;
  o.spec = s;
  Engine e(*model_, o, draft_.get());
  int refused = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    e.submit(good[i]);
    GenRequest bad = req({1, static_cast<int32_t>(cfg_.vocab_size + i)}, 0.f, 4, 0);
    try {
      e.submit(bad);
    } catch (const Error& err) {
      ++refused;
      EXPECT_NE(std::string(err.what()).find("outside the vocabulary"), std::string::npos) << err.what();
    }
  }
  EXPECT_EQ(refused, static_cast<int>(good.size()));
  const auto got = e.run();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << i;
    EXPECT_EQ(got[i].logprobs, want[i].logprobs) << i;
    EXPECT_GT(got[i].spec.rounds, 0) << i;
  }
}

TEST_F(SpecEngine, RequestsCanOptOutAndMixWithSpeculatingOnes) {
  std::vector<GenRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    GenRequest r = req({static_cast<int32_t>(i + 1), 2, 3}, i % 2 ? 0.f : 0.9f, 12, 77 + i);
    r.speculate = i % 4 != 0;
    reqs.push_back(r);
  }
  const SpecSettings s{4, 2, 7};
  SpecStats st;
  const auto mixed = run(reqs, 8, &s, AcceptRule::Exact, &st);
  const auto plain = run(reqs, 8, nullptr);
  double verify_s = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (!reqs[i].speculate || reqs[i].params.temperature == 0) {  // plain or greedy: the same tokens
      EXPECT_EQ(mixed[i].tokens, plain[i].tokens) << i;
    }
    if (!reqs[i].speculate) {
      EXPECT_EQ(mixed[i].spec.rounds, 0) << i;
      EXPECT_EQ(mixed[i].spec.verify_seconds, 0.0) << i;
    } else {
      EXPECT_GT(mixed[i].spec.rounds, 0) << i;
    }
    verify_s += mixed[i].spec.verify_seconds;
  }
  EXPECT_GT(st.rounds, 0);
  // Verification time is the speculating requests' share of each forward: the per-request
  // figures add up to the engine's, plain rows in the same batches counting in neither.
  EXPECT_NEAR(verify_s, st.verify_seconds, 1e-9 + 1e-9 * st.verify_seconds);
}

// A hot-swap between steps (Engine::set_drafter) with requests in flight: some mid-prompt,
// some decoding, some still waiting. Every speculating sequence's draft cache must then be what
// the new drafter would have built over its committed tokens: the tree it verifies in the next
// step equals the first tree of a fresh engine with the new drafter given those tokens as the
// prompt. Greedy tokens
// stay those of plain decoding. A drafter that does not fit is refused and the old one serves on.
TEST_F(SpecEngine, HotSwapRebuildsTheDraftCachesOfRequestsInFlight) {
  const DraftConfig dc = testing_models::tiny_draft_config(cfg_, 12);
  const DraftModel other = random_draft(dc, spread_vocab(12, cfg_.vocab_size), model_->draft_target(), 9, DType::BF16);
  PolicyConfig wide = cfg_;
  wide.vocab_size = 20;
  const PolicyModel wide_policy = random_policy(wide, 5, DType::BF16);
  const DraftModel misfit = random_draft(testing_models::tiny_draft_config(wide, 12), spread_vocab(12, wide.vocab_size),
                                         wide_policy.draft_target(), 3, DType::BF16);
  std::vector<GenRequest> reqs;
  for (int i = 0; i < 10; ++i) {
    std::vector<int32_t> prompt;
    for (int j = 0; j < 3 + (i * 7) % 18; ++j)
      prompt.push_back(static_cast<int32_t>((i * 5 + j * j + 1) % cfg_.vocab_size));
    reqs.push_back(req(prompt, 0.f, 24 + i * 3, 0));
  }
  const auto plain = run(reqs, 10, nullptr);
  const SpecSettings spec{4, 1, 5};
  EngineOptions o;
  o.max_batch = 6;
  o.kv_cache_bytes = 64 << 20;
  o.prefill_chunk = 7;
  o.spec = spec;
  for (const bool fits : {true, false}) {
    Engine a(*model_, o, draft_.get());
    std::vector<uint64_t> ids;
    for (const auto& r : reqs)
      ids.push_back(a.submit(r));
    std::vector<GenResult> out;
    for (int k = 0; k < 9; ++k)
      for (GenResult& g : a.step())
        out.push_back(std::move(g));
    if (!fits) {
      EXPECT_THROW(a.set_drafter(&misfit), Error);
      EXPECT_EQ(a.stats().drafter_swaps, 0);
    } else {
      std::vector<Engine::InFlight> before;
      int mid_prompt = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        before.push_back(a.in_flight(ids[i]));
        mid_prompt += before.back().cached > 0 && before.back().cached < static_cast<int64_t>(reqs[i].prompt.size());
      }
      EXPECT_GE(mid_prompt, 1) << "no request was mid-prompt at the swap";
      a.set_drafter(&other);
      EXPECT_EQ(a.stats().drafter_swaps, 1);
      for (GenResult& g : a.step())  // the first step drafts with the new drafter
        out.push_back(std::move(g));
      int checked = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        std::vector<int32_t> full = reqs[i].prompt;
        full.insert(full.end(), before[i].tokens.begin(), before[i].tokens.end());
        const Engine::InFlight f = a.in_flight(ids[i]);
        if (before[i].tokens.empty() || f.tree.tokens.empty())
          continue;  // not decoding at the swap, or finished in the step after it
        ASSERT_EQ(before[i].cached + 1, static_cast<int64_t>(full.size())) << "request " << i;
        Engine b(*model_, o, &other);
        const uint64_t id = b.submit(req({full.begin(), full.end() - 1}, 0.f, 8, 0));
        while (b.in_flight(id).tree.tokens.empty())
          b.step();
        const Engine::InFlight fresh = b.in_flight(id);
        ASSERT_EQ(fresh.tokens.front(), full.back()) << "request " << i;
        EXPECT_EQ(f.tree.tokens, fresh.tree.tokens) << "request " << i;
        EXPECT_EQ(f.tree.parent, fresh.tree.parent) << "request " << i;
        ASSERT_EQ(f.tree.score.size(), fresh.tree.score.size());
        for (size_t j = 0; j < f.tree.score.size(); ++j)  // the draft log-probabilities: same cache, same numbers
          EXPECT_NEAR(f.tree.score[j], fresh.tree.score[j], 1e-4) << "request " << i << " node " << j;
        ++checked;
      }
      EXPECT_GE(checked, 2) << "too few decoding requests at the swap";
    }
    for (GenResult& g : a.run())
      out.push_back(std::move(g));
    std::sort(out.begin(), out.end(), [](const GenResult& x, const GenResult& y) { return x.id < y.id; });
    ASSERT_EQ(out.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i)
      ASSERT_EQ(out[i].tokens, plain[i].tokens) << "request " << i << (fits ? " (swapped)" : " (refused)");
    EXPECT_GT(a.stats().spec.rounds, 0);
  }
}

}  // namespace
}  // namespace updraft
