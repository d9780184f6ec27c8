// The demo's generation phases (app/demo/phase.h): requests reach the workers in pulls of whole
// groups, each worker taking the next pull when it is done, or in a fixed split; either way every
// request's completion is found at its index, a group stays on one worker, a worker's completions
// come in request order, and the tokens are the ones a single engine decodes for the same requests.
// (Which worker takes which pull depends on timing, so only the fixed split's is checked.)
#include "app/demo/phase.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include "tests/rollout/test_models.h"

namespace updraft::demo {
namespace {

struct Workers {
  std::shared_ptr<const PolicyModel> policy;
  std::vector<std::unique_ptr<Worker>> w;
  explicit Workers(size_t n) {
    policy = std::make_shared<const PolicyModel>(random_policy(testing_models::tiny_config(), 5, DType::F32));
    for (size_t i = 0; i < n; ++i) {
      WorkerOptions o;
      o.id = static_cast<uint32_t>(i + 1);
      o.speculate = false;
      o.threads = 1;
      o.engine.max_batch = 1;
      o.engine.kv_cache_bytes = int64_t{8} << 20;
      w.push_back(std::make_unique<Worker>(o, policy, 1, nullptr, 0, nullptr));
    }
  }
};

// Groups of `group` siblings (one prompt each, seeds of their own), lengths that differ from group
// to group so that the workers finish their pulls at different times.
std::vector<GenRequest> grouped(int64_t groups, int64_t group) {
  std::vector<GenRequest> v;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t j = 0; j < group; ++j) {
      GenRequest r;
      r.prompt = {static_cast<int32_t>(3 + g), 7, static_cast<int32_t>(11 + g % 3)};
      r.params.temperature = 1.0f;
      r.params.has_seed = true;
      r.params.seed = static_cast<uint64_t>(100 * g + j + 1);
      r.params.max_new_tokens = 4 + 5 * (g % 4);
      r.params.ignore_eos = true;
      v.push_back(r);
    }
  return v;
}

// The worker whose batch holds completion c.
size_t worker_of(const Phase& ph, const Completion* c) {
  for (size_t w = 0; w < ph.batches.size(); ++w) {
    const auto& cs = ph.batches[w].completions;
    if (!cs.empty() && c >= cs.data() && c < cs.data() + cs.size())
      return w;
  }
  ADD_FAILURE() << "a completion in no worker's batch";
  return 0;
}

TEST(DemoPhase, PullsOfWholeGroupsReturnEveryCompletionAtItsIndex) {
  Workers ws(2);
  const int64_t groups = 7, group = 3;
  const std::vector<GenRequest> reqs = grouped(groups, group);
  Engine alone(*ws.policy, EngineOptions{}, nullptr);
  for (const GenRequest& r : reqs)
    alone.submit(r);
  std::vector<GenResult> want = alone.run();
  std::sort(want.begin(), want.end(), [](const GenResult& a, const GenResult& b) { return a.id < b.id; });
  ASSERT_EQ(want.size(), reqs.size());
  for (const size_t pull : {size_t{0}, size_t{3}, size_t{6}}) {
    const Phase ph = run_phase(ws.w, reqs, GenMode::kPlain, group, pull);
    ASSERT_EQ(ph.ordered.size(), reqs.size());
    int64_t tokens = 0;
    std::set<size_t> used;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const Completion* c = ph.ordered[i];
      ASSERT_NE(c, nullptr);
      EXPECT_EQ(c->result.prompt, reqs[i].prompt) << "pull " << pull << ", request " << i;
      EXPECT_EQ(c->result.tokens, want[i].tokens) << "pull " << pull << ", request " << i;
      tokens += static_cast<int64_t>(c->result.tokens.size());
      used.insert(worker_of(ph, c));
      if (i % group > 0) {
        EXPECT_EQ(worker_of(ph, c), worker_of(ph, ph.ordered[i - 1])) << "pull " << pull << ": a group was split";
      }
      if (pull == 0) {
        EXPECT_EQ(worker_of(ph, c), (i / group) % 2) << "the fixed split moved request " << i;
      }
    }
    EXPECT_EQ(ph.tokens, tokens);
    if (pull == 0) {
      EXPECT_EQ(used.size(), 2u) << "the fixed split left a worker idle";
    }
    // A worker runs its pulls in the order it takes them: its completions in request order.
    for (size_t i = 1; i < reqs.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (worker_of(ph, ph.ordered[j]) == worker_of(ph, ph.ordered[i])) {
          EXPECT_LT(ph.ordered[j], ph.ordered[i]) << "pull " << pull << ": requests " << j << " and " << i;
        }
    for (const BatchReport& b : ph.batches)
      EXPECT_EQ(b.policy_version, 1u);
  }
}

TEST(DemoPhase, APullThatSplitsAGroupIsRefused) {
  Workers ws(1);
  EXPECT_THROW(run_phase(ws.w, grouped(2, 4), GenMode::kPlain, 4, 6), CheckFailure);
}

}  // namespace
}  // namespace updraft::demo
