// Prefix reuse (rollout/engine/prefix_reuse.h): a request whose context begins like one already
// cached takes that prefix over instead of prefilling it, and nothing it returns changes.
//
// Every test runs the same requests through an engine with reuse and one without, and asserts
// bitwise-equal outputs (tokens, logprobs, finish reasons, speculation rounds, captured aux states
// and teacher rows, input logprobs) and that the prefix was actually taken (cached_tokens).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "rollout/engine/engine.h"
#include "tests/rollout/spec_fixture.h"

namespace updraft {
namespace {

using testing_spec::pattern_prompt;

class PrefixReuse : public testing_spec::SpecFixture {
 protected:
  struct Run {
    std::vector<GenResult> results;
    EngineStats stats;
    int64_t donors = 0;
  };
  // `reqs` submitted at once (or, with `one_by_one`, each after the previous finished).
  Run go(const std::vector<GenRequest>& reqs, bool reuse, const SpecSettings* spec, int64_t batch,
         bool one_by_one = false) {
    EngineOptions o;
    o.max_batch = batch;
    o.kv_cache_bytes = 16 << 20;
    o.prefill_chunk = 7;  // a leader's prompt takes several steps: its followers wait for it
    o.prefix_reuse = reuse;
    if (spec != nullptr)
      o.spec = *spec;
    Engine e(*model_, o, spec != nullptr ? draft_.get() : nullptr);
    Run r;
    if (one_by_one) {
      for (const GenRequest& q : reqs) {
        e.submit(q);
        for (GenResult& g : e.run())
          r.results.push_back(std::move(g));
      }
    } else {
      for (const GenRequest& q : reqs)
        e.submit(q);
      r.results = e.run();
    }
    r.stats = e.stats();
    r.donors = e.prefix_donors();
    return r;
  }

  static void expect_identical(const std::vector<GenResult>& a, const std::vector<GenResult>& b,
                               const std::string& where) {
    ASSERT_EQ(a.size(), b.size()) << where;
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string at = where + ", request " + std::to_string(i);
      ASSERT_EQ(a[i].tokens, b[i].tokens) << at;
      ASSERT_EQ(a[i].finish_reason, b[i].finish_reason) << at;
      ASSERT_EQ(a[i].logprobs.size(), b[i].logprobs.size()) << at;
      EXPECT_EQ(0, std::memcmp(a[i].logprobs.data(), b[i].logprobs.data(), a[i].logprobs.size() * sizeof(float)))
          << at << ": logprobs differ in their bits";
      EXPECT_EQ(a[i].spec.rounds, b[i].spec.rounds) << at;
      EXPECT_EQ(a[i].spec.accepted, b[i].spec.accepted) << at;
      ASSERT_EQ(a[i].input_logprobs.size(), b[i].input_logprobs.size()) << at;
      for (size_t j = 0; j < a[i].input_logprobs.size(); ++j) {
        if (!std::isnan(b[i].input_logprobs[j])) {
          EXPECT_EQ(a[i].input_logprobs[j], b[i].input_logprobs[j]) << at << " input position " << j;
        }
      }
      EXPECT_EQ(a[i].teacher_ids, b[i].teacher_ids) << at;
      EXPECT_EQ(a[i].teacher_logprobs, b[i].teacher_logprobs) << at;
      ASSERT_EQ(a[i].aux.defined(), b[i].aux.defined()) << at;
      if (b[i].aux.defined()) {
        ASSERT_EQ(a[i].aux.shape(), b[i].aux.shape()) << at;
        EXPECT_EQ(0, std::memcmp(a[i].aux.raw(), b[i].aux.raw(), b[i].aux.nbytes()))
            << at << ": captured aux states differ";
      }
    }
  }

  // n siblings of one 20-token prompt (seeds differ), with two unrelated requests among them.
  std::vector<GenRequest> group(int n, float temp, bool capture) const {
    std::vector<GenRequest> reqs;
    const std::vector<int32_t> prompt = pattern_prompt(3, 20, cfg_.vocab_size);
    for (int i = 0; i < n; ++i) {
      reqs.push_back(req(prompt, temp, 12 + 3 * i, 700 + static_cast<uint64_t>(i)));
      reqs.back().capture = capture;
      if (i == 1)
        reqs.push_back(req(pattern_prompt(5, 9, cfg_.vocab_size), temp, 10, 9));
    }
    reqs.push_back(req(pattern_prompt(6, 17, cfg_.vocab_size), temp, 10, 11));
    return reqs;
  }
};

const SpecSettings kChain{4, 1, 5}, kTree{3, 3, 8};

TEST_F(PrefixReuse, SiblingsSubmittedTogetherPrefillTheirPromptOnceWithIdenticalOutputs) {
  for (const SpecSettings* spec : {static_cast<const SpecSettings*>(nullptr), &kChain, &kTree})
    for (const float temp : {0.f, 0.9f})
      for (const bool capture : {false, true}) {
        const std::string where = std::string(spec == nullptr   ? "plain"
                                              : spec == &kChain ? "chain"
                                                                : "tree") +
                                  ", temperature " + std::to_string(temp) + (capture ? ", capture" : "");
        const auto reqs = group(5, temp, capture);
        const Run off = go(reqs, false, spec, 8), on = go(reqs, true, spec, 8);
        ASSERT_NO_FATAL_FAILURE(expect_identical(on.results, off.results, where));
        // The leader (request 0) prefills the prompt; its four siblings take all but its last token.
        EXPECT_EQ(on.results[0].cached_tokens, 0) << where;
        int64_t takers = 0;
        for (const GenResult& g : on.results)
          if (g.prompt == reqs[0].prompt && g.cached_tokens == 19)
            ++takers;
        EXPECT_EQ(takers, 4) << where;
        EXPECT_EQ(off.stats.reused_tokens, 0) << where;
        EXPECT_GE(on.stats.reused_tokens, 4 * 19) << where;
      }
}

TEST_F(PrefixReuse, FinishedRequestsAreKeptAsDonorsForSiblingsAndNextTurns) {
  for (const SpecSettings* spec : {static_cast<const SpecSettings*>(nullptr), &kChain}) {
    const std::string where = spec == nullptr ? "plain" : "chain";
    std::vector<GenRequest> reqs = group(3, 0.8f, true);
    const Run first = go(reqs, false, spec, 1, true);
    // A next turn: the first sibling's context, its answer, and four new tokens.
    GenRequest turn = reqs[0];
    turn.prompt.insert(turn.prompt.end(), first.results[0].tokens.begin(), first.results[0].tokens.end());
    turn.prompt.insert(turn.prompt.end(), {1, 2, 3, 4});
    reqs.push_back(turn);
    const Run off = go(reqs, false, spec, 1, true), on = go(reqs, true, spec, 1, true);
    ASSERT_NO_FATAL_FAILURE(expect_identical(on.results, off.results, where));
    // reqs: sibling 0, sibling 1, an unrelated request, sibling 2, another unrelated one, the turn.
    EXPECT_EQ(on.results[0].cached_tokens, 0) << where;
    EXPECT_EQ(on.results[1].cached_tokens, 19) << where;
    EXPECT_EQ(on.results[3].cached_tokens, 19) << where << ": the sibling after an unrelated request";
    // The turn takes what its first sibling had cached: the prompt and all but its last token
    // (a speculating sibling's pairs of its last round included).
    const auto cached_by_first = static_cast<int64_t>(reqs[0].prompt.size() + first.results[0].tokens.size()) - 1;
    EXPECT_EQ(on.results.back().cached_tokens, cached_by_first) << where;
    EXPECT_GT(on.donors, 0) << where;
    EXPECT_EQ(off.donors, 0) << where;
  }
}

TEST_F(PrefixReuse, InputLogprobsAreComputedNotTaken) {
  std::vector<GenRequest> reqs = group(3, 0.f, false);
  reqs[3].input_logprobs_from = 6;  // the third sibling (after an unrelated request)
  const Run off = go(reqs, false, &kChain, 1, true), on = go(reqs, true, &kChain, 1, true);
  ASSERT_NO_FATAL_FAILURE(expect_identical(on.results, off.results, "input logprobs"));
  EXPECT_EQ(on.results[1].cached_tokens, 19);
  EXPECT_EQ(on.results[3].cached_tokens, 5) << "position 6's logprob needs row 5's logits";
  for (size_t j = 0; j < on.results[3].input_logprobs.size(); ++j)
    EXPECT_FALSE(std::isnan(on.results[3].input_logprobs[j])) << "input position " << j;
}

TEST_F(PrefixReuse, RequestsThatCouldTakeNothingAreNotHeldBack) {
  // Input logprobs from position 0 on: nothing of the prompt can be taken, so the siblings of a
  // 20-token prompt start together rather than each behind the one before.
  std::vector<GenRequest> reqs = group(3, 0.f, false);
  for (GenRequest& r : reqs)
    r.input_logprobs_from = 0;
  const Run off = go(reqs, false, &kChain, 8), on = go(reqs, true, &kChain, 8);
  ASSERT_NO_FATAL_FAILURE(expect_identical(on.results, off.results, "input logprobs from 0"));
  for (size_t i = 0; i < on.results.size(); ++i) {
    EXPECT_EQ(on.results[i].admitted_step, 0) << "request " << i;
    EXPECT_EQ(on.results[i].cached_tokens, 0) << "request " << i;
  }
}

TEST_F(PrefixReuse, SiblingsHoldTheirPromptsWholeBlocksOnce) {
  // 4 siblings of a 40-token prompt, blocks of 16: two whole blocks shared, 8 entries copied.
  int64_t peak[2] = {0, 0};
  for (const bool reuse : {false, true}) {
    EngineOptions o;
    o.prefix_reuse = reuse;
    o.kv_cache_bytes = 1 << 20;
    Engine e(*model_, o);
    for (int i = 0; i < 4; ++i)
      e.submit(req(pattern_prompt(2, 40, cfg_.vocab_size), 0.8f, 4, 50 + static_cast<uint64_t>(i)));
    while (e.has_work()) {
      e.step();
      if (e.running() == 4)
        peak[reuse] = std::max(peak[reuse], e.cache().num_blocks() - e.cache().free_blocks());
    }
  }
  EXPECT_EQ(peak[0], 4 * 3) << "each sibling holds the 3 blocks of its 44 positions";
  EXPECT_EQ(peak[1], 3 + 3 * 1) << "the followers hold only their partial third block";
}

TEST_F(PrefixReuse, DonorsGoWhenTheDrafterChangesOrTheirBlocksAreNeeded) {
  EngineOptions o;
  o.max_batch = 1;
  o.kv_cache_bytes = KvCache::block_bytes(model_->kv_shape(), o.block_size) * 8;  // 128 positions
  o.spec = kChain;
  Engine e(*model_, o, draft_.get());
  const int64_t blocks = e.cache().num_blocks();
  for (int i = 0; i < 4; ++i)
    e.submit(req(pattern_prompt(i, 10, cfg_.vocab_size), 0.f, 6, 0));
  e.run();
  EXPECT_EQ(e.prefix_donors(), 4);
  EXPECT_LT(e.cache().free_blocks(), blocks);
  e.set_drafter(nullptr);
  EXPECT_EQ(e.prefix_donors(), 0) << "pairs of the old drafter must not be taken";
  EXPECT_EQ(e.cache().free_blocks(), blocks);
  // Requests that need the whole cache in turn: donors are given back for them.
  for (int i = 0; i < 3; ++i)  // 80 + 32 tokens and a round's tree: all 8 blocks
    e.submit(req(pattern_prompt(i, 80, cfg_.vocab_size), 0.f, 32, 0));
  const auto out = e.run();
  ASSERT_EQ(out.size(), 3u);
  for (const GenResult& g : out)
    EXPECT_EQ(g.finish_reason, "length");
  EXPECT_EQ(e.stats().preemptions, 0) << "donors go before anything is preempted";
  e.drop_prefix_donors();
  EXPECT_EQ(e.cache().free_blocks(), blocks);
}

}  // namespace
}  // namespace updraft
