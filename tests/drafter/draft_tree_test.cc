// Draft trees and proposals: a hand-built dynamic tree (pool, frontier, global selection,
// parents, depths, mask), and the batched proposer against references that run the drafter one
// row at a time: a chain equals the step-by-step argmax chain, and every tree node's score equals
// the log-probability of its path computed by feeding that path alone. The draft cache returns
// to its committed length.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "drafter/proposer.h"
#include "kernels/ops.h"
#include "tests/drafter/test_drafts.h"
#include "tests/rollout/chi2.h"
#include "tests/rollout/test_models.h"

namespace updraft {
namespace {

TEST(DraftTree, DynamicTreeKeepsTheBestNodesInPoolOrder) {
  const SpecSettings s{3, 2, 6};
  TreeBuilder b(7, s);
  b.expand({10, 11}, {-0.1f, -2.0f});
  EXPECT_EQ(b.frontier(), (std::vector<int32_t>{0, 1}));
  b.expand({20, 21, 22, 23}, {-0.2f, -1.0f, -0.1f, -3.0f});  // scores -0.3 -1.1 | -2.1 -5.0
  EXPECT_EQ(b.frontier(), (std::vector<int32_t>{2, 3}));
  b.expand({30, 31, 32, 33}, {-0.5f, -0.6f, -0.05f, -4.0f});  // -0.8 -0.9 | -1.15 -5.1
  const DraftTree t = b.finish();  // best 5: pool 0 (-0.1), 2 (-0.3), 6 (-0.8), 7 (-0.9), 3 (-1.1)
  EXPECT_EQ(t.tokens, (std::vector<int32_t>{7, 10, 20, 21, 30, 31}));
  EXPECT_EQ(t.parent, (std::vector<int32_t>{-1, 0, 1, 1, 2, 2}));
  EXPECT_EQ(t.depth, (std::vector<int32_t>{0, 1, 2, 2, 3, 3}));
  EXPECT_NEAR(t.score[4], -0.8f, 1e-6);
  EXPECT_EQ(t.children(1), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(t.children(2), (std::vector<int32_t>{4, 5}));
  EXPECT_TRUE(t.children(3).empty());
  const Tensor m = t.mask();
  const std::vector<std::vector<int>> want = {{1, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 0, 0}, {1, 1, 1, 0, 0, 0},
                                              {1, 1, 0, 1, 0, 0}, {1, 1, 1, 0, 1, 0}, {1, 1, 1, 0, 0, 1}};
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j)
      EXPECT_EQ(m.data<uint8_t>()[i * 6 + j], want[i][j]) << i << "," << j;
}

TEST(DraftTree, ChainIsTopOneAtEveryLevel) {
  TreeBuilder b(1, {3, 1, 4});
  b.expand({5}, {-0.5f});
  b.expand({6}, {-0.25f});
  b.expand({9}, {-1.f});
  const DraftTree t = b.finish();
  EXPECT_EQ(t.tokens, (std::vector<int32_t>{1, 5, 6, 9}));
  EXPECT_EQ(t.parent, (std::vector<int32_t>{-1, 0, 1, 2}));
  EXPECT_NEAR(t.score[3], -1.75f, 1e-6);
}

TEST(DraftTree, SettingsAreValidated) {
  EXPECT_THROW((SpecSettings{0, 1, 2}.validate()), Error);
  EXPECT_THROW((SpecSettings{3, 1, 5}.validate()), Error);  // a 3-chain holds 4 tokens with the root
  EXPECT_THROW((SpecSettings{2, 2, 1}.validate()), Error);
  EXPECT_NO_THROW((SpecSettings{2, 2, 7}.validate()));  // 1 + 2 + 4
  EXPECT_EQ((SpecSettings{4, 3, 10}.scratch_entries()), 9);
  EXPECT_NO_THROW((SpecSettings{6, 1, 7, 0.3}.validate()));
  EXPECT_THROW((SpecSettings{3, 2, 7, 0.3}.validate()), Error);  // chains only
  EXPECT_THROW((SpecSettings{6, 1, 7, -0.1}.validate()), Error);
  EXPECT_THROW((SpecSettings{6, 1, 7, 1.0}.validate()), Error);
}

// A tiny policy and a random drafter; committed pairs come from random features.
class Proposer : public ::testing::Test {
 protected:
  void SetUp() override {
    pcfg_ = testing_models::tiny_config(PolicyArch::Llama);
    policy_ = std::make_unique<PolicyModel>(random_policy(pcfg_, 5, DType::BF16));
    const DraftConfig dc = testing_models::tiny_draft_config(pcfg_, 40);
    draft_ = std::make_unique<DraftModel>(
        random_draft(dc, spread_vocab(40, pcfg_.vocab_size), policy_->draft_target(), 9, DType::BF16));
  }
  // Extends a fresh sequence in `cache` over n pairs; returns the last row's state and logits.
  std::pair<Tensor, Tensor> commit(KvCache& cache, SeqKv& kv, int64_t n, uint64_t seed) {
    const int64_t H = pcfg_.hidden_size;
    std::vector<float> f(static_cast<size_t>(n * 3 * H));
    for (size_t i = 0; i < f.size(); ++i)
      f[i] = 2.f * ops::uniform01(seed, i) - 1.f;
    std::vector<SeqStep> s(1);
    s[0].kv = &kv;
    for (int64_t i = 0; i < n; ++i)
      s[0].tokens.push_back(static_cast<int32_t>((seed * 7 + i * 13) % pcfg_.vocab_size));
    s[0].logit_rows = {static_cast<int32_t>(n - 1)};
    DraftOut o = draft_->forward(cache, s, Tensor::from_f32(f, {n, 3 * H}));
    return {o.state.rows(n - 1, n), o.logits};
  }
  // Log-probability of `path` (target ids) after the committed pairs, fed one token at a time.
  double path_logprob(int64_t n, uint64_t seed, const std::vector<int32_t>& path) {
    KvCache cache(draft_->kv_shape(), 16, 4);
    SeqKv kv;
    EXPECT_TRUE(cache.reserve(kv, n + 8));
    auto [state, logits] = commit(cache, kv, n, seed);
    double total = 0;
    for (size_t i = 0; i < path.size(); ++i) {
      Tensor lp = Tensor::empty(logits.shape(), DType::F32);
      ops::log_softmax(logits, lp);
      const int32_t d = draft_->vocab().to_draft(path[i]);
      EXPECT_GE(d, 0);
      total += lp.data<float>()[d];
      if (i + 1 == path.size())
        break;
      std::vector<SeqStep> s(1);
      s[0].kv = &kv;
      s[0].tokens = {path[i]};
      s[0].positions = {static_cast<int32_t>(n + i)};
      s[0].logit_rows = {0};
      DraftOut o = draft_->forward(cache, s, state);
      state = o.state;
      logits = o.logits;
    }
    return total;
  }

  PolicyConfig pcfg_;
  std::unique_ptr<PolicyModel> policy_;
  std::unique_ptr<DraftModel> draft_;
};

// The absorbing pass computes past the KV writes only at the logit rows (states_at_logit_rows):
// three sequences absorbing 5, 1 and 3 pairs, the first asking for its last row, the second for
// none, the third for its last two. The states and logits at those rows, the cache's entries and a
// draft step after it are bitwise those of the full pass; a step with a tree mask or with logit
// rows that are not a suffix runs the full pass and gives every row's state.
TEST_F(Proposer, AStatesAtLogitRowsPassEqualsTheFullPassAtThoseRows) {
  const int64_t H = pcfg_.hidden_size;
  const std::vector<int64_t> lens = {5, 1, 3};
  const std::vector<std::vector<int32_t>> rows = {{4}, {}, {1, 2}};
  std::vector<float> f(static_cast<size_t>(9 * 3 * H));
  for (size_t i = 0; i < f.size(); ++i)
    f[i] = 2.f * ops::uniform01(77, i) - 1.f;
  const Tensor feats = Tensor::from_f32(f, {9, 3 * H});
  auto pass = [&](KvCache& cache, std::vector<SeqKv>& kv, bool compact) {
    std::vector<SeqStep> s(3);
    for (size_t b = 0; b < 3; ++b) {
      EXPECT_TRUE(cache.reserve(kv[b], lens[b] + 1));
      s[b].kv = &kv[b];
      for (int64_t i = 0; i < lens[b]; ++i)
        s[b].tokens.push_back(static_cast<int32_t>((b * 31 + i * 7) % pcfg_.vocab_size));
      s[b].logit_rows = rows[b];
    }
    return draft_->forward(cache, s, feats, compact);
  };
  KvCache full_cache(draft_->kv_shape(), 16, 4), part_cache(draft_->kv_shape(), 16, 4);
  std::vector<SeqKv> full_kv(3), part_kv(3);
  const DraftOut full = pass(full_cache, full_kv, false), part = pass(part_cache, part_kv, true);
  ASSERT_EQ(full.state.size(0), 9);
  ASSERT_EQ(part.state.size(0), 3);
  const std::vector<int64_t> global = {4, 7, 8};  // the logit rows among the 9
  const auto fs = full.state.to_f32_vector(), ps = part.state.to_f32_vector();
  for (size_t r = 0; r < global.size(); ++r)
    for (int64_t j = 0; j < H; ++j)
      ASSERT_EQ(ps[r * H + j], fs[global[r] * H + j]) << "state row " << r << " column " << j;
  EXPECT_EQ(part.logits.to_f32_vector(), full.logits.to_f32_vector());
  const int64_t row = draft_->kv_shape().kv_heads * draft_->kv_shape().head_dim;
  for (const bool keys : {true, false}) {
    const auto a = (keys ? part_cache.layer(0).k_cache : part_cache.layer(0).v_cache).to_f32_vector();
    const auto b = (keys ? full_cache.layer(0).k_cache : full_cache.layer(0).v_cache).to_f32_vector();
    for (size_t q = 0; q < 3; ++q) {
      ASSERT_EQ(part_kv[q].length, lens[q]);
      for (int64_t p = 0; p < lens[q]; ++p)
        for (int64_t j = 0; j < row; ++j)
          ASSERT_EQ(a[part_cache.slot(part_kv[q], p) * row + j], b[full_cache.slot(full_kv[q], p) * row + j])
              << (keys ? "key" : "value") << " of sequence " << q << " at " << p;
    }
  }
  // A draft step after each pass, from the first sequence's state, is the same too.
  auto step = [&](KvCache& cache, SeqKv& kv, const Tensor& state) {
    std::vector<SeqStep> s(1);
    s[0].kv = &kv;
    s[0].tokens = {3};
    s[0].logit_rows = {0};
    return draft_->forward(cache, s, state).logits.to_f32_vector();
  };
  EXPECT_EQ(step(part_cache, part_kv[0], part.state.rows(0, 1)), step(full_cache, full_kv[0], full.state.rows(4, 5)));
  // Logit rows that are not each sequence's last rows, or a tree mask: the full pass.
  const Tensor three = Tensor::from_f32(std::vector<float>(f.begin(), f.begin() + 3 * 3 * H), {3, 3 * H});
  for (const bool tree : {false, true}) {
    KvCache other(draft_->kv_shape(), 16, 4);
    std::vector<SeqKv> okv(1);
    ASSERT_TRUE(other.reserve(okv[0], 4));
    std::vector<SeqStep> st(1);
    st[0].kv = &okv[0];
    st[0].tokens = {1, 2, 3};
    st[0].logit_rows = tree ? std::vector<int32_t>{2} : std::vector<int32_t>{0, 2};
    if (tree) {
      st[0].tree_mask = Tensor::zeros({3, 3}, DType::Bool);
      for (int64_t i = 0; i < 3; ++i)
        st[0].tree_mask.data<uint8_t>()[i * 3 + i] = 1;
    }
    EXPECT_EQ(draft_->forward(other, st, three, true).state.size(0), 3) << (tree ? "tree mask" : "logit rows {0, 2}");
  }
}

TEST_F(Proposer, ChainAndTreeMatchOneRowAtATimeReferences) {
  for (const SpecSettings s : {SpecSettings{4, 1, 5}, SpecSettings{3, 3, 9}, SpecSettings{4, 2, 12}}) {
    // Two sequences of different lengths, batched.
    KvCache cache(draft_->kv_shape(), 32, 4);
    const std::vector<int64_t> lens = {6, 11};
    std::vector<SeqKv> kv(2);
    std::vector<Tensor> states, logits;
    for (size_t b = 0; b < 2; ++b) {
      ASSERT_TRUE(cache.reserve(kv[b], lens[b] + s.scratch_entries()));
      auto [st, lg] = commit(cache, kv[b], lens[b], 100 + b);
      states.push_back(st);
      logits.push_back(lg);
    }
    Tensor h = Tensor::empty({2, pcfg_.hidden_size}, DType::F32), z = Tensor::empty({2, 40}, DType::F32);
    for (int64_t b = 0; b < 2; ++b) {
      std::copy_n(states[b].data<float>(), pcfg_.hidden_size, h.data<float>() + b * pcfg_.hidden_size);
      std::copy_n(logits[b].data<float>(), 40, z.data<float>() + b * 40);
    }
    const auto trees = propose(*draft_, cache, {{&kv[0], 3}, {&kv[1], 4}}, h, z, s);
    for (size_t b = 0; b < 2; ++b) {
      EXPECT_EQ(kv[b].length, lens[b]) << "speculative entries left in the draft cache";
      const DraftTree& t = trees[b];
      ASSERT_EQ(t.size(), s.draft_tokens);
      for (int64_t i = 1; i < t.size(); ++i) {
        std::vector<int32_t> path;
        for (int64_t a = i; a > 0; a = t.parent[a])
          path.insert(path.begin(), t.tokens[a]);
        ASSERT_EQ(static_cast<int64_t>(path.size()), t.depth[i]);
        EXPECT_NEAR(t.score[i], path_logprob(lens[b], 100 + b, path), 2e-4) << "sequence " << b << " node " << i;
      }
      if (s.chain()) {  // each link is the argmax after its predecessors: the best path of its length
        for (int64_t i = 1; i < t.size(); ++i)
          EXPECT_EQ(t.parent[i], i - 1);
      }
    }
  }
}

// A chain with stop_below drafts the full chain's first m tokens, where m - 1 is how many of them
// lead it with a joint probability of stop_below or more (the first draft always runs), and a
// sequence that stops does not change another's drafts.
TEST_F(Proposer, ChainsStopOnceTheirDraftsAreJointlyUnlikely) {
  const int64_t steps = 6;
  const std::vector<int64_t> lens = {6, 11};
  auto run = [&](double stop) {
    KvCache cache(draft_->kv_shape(), 32, 4);
    std::vector<SeqKv> kv(2);
    Tensor h = Tensor::empty({2, pcfg_.hidden_size}, DType::F32), z = Tensor::empty({2, 40}, DType::F32);
    for (int64_t b = 0; b < 2; ++b) {
      EXPECT_TRUE(cache.reserve(kv[b], lens[b] + steps));
      auto [st, lg] = commit(cache, kv[b], lens[b], 200 + b);
      std::copy_n(st.data<float>(), pcfg_.hidden_size, h.data<float>() + b * pcfg_.hidden_size);
      std::copy_n(lg.data<float>(), 40, z.data<float>() + b * 40);
    }
    const auto trees = propose(*draft_, cache, {{&kv[0], 3}, {&kv[1], 4}}, h, z, {steps, 1, steps + 1, stop});
    for (int64_t b = 0; b < 2; ++b)
      EXPECT_EQ(kv[b].length, lens[b]) << "speculative entries left in the draft cache";
    return trees;
  };
  const auto full = run(0.0);
  ASSERT_EQ(full[0].size(), steps + 1);
  // Stop sequence 0 after its second draft: halfway (in log terms) between its 1st and 2nd scores.
  const double stop = std::exp(0.5 * (full[0].score[1] + full[0].score[2]));
  const auto cut = run(stop);
  for (size_t b = 0; b < 2; ++b) {
    int64_t m = 1;
    while (m < steps && full[b].score[static_cast<size_t>(m)] >= std::log(stop))
      ++m;
    ASSERT_EQ(cut[b].size(), m + 1) << "sequence " << b;
    for (int64_t i = 1; i <= m; ++i) {
      EXPECT_EQ(cut[b].tokens[i], full[b].tokens[i]) << "sequence " << b << " node " << i;
      EXPECT_NEAR(cut[b].score[i], full[b].score[i], 1e-5) << "sequence " << b << " node " << i;
    }
  }
  EXPECT_EQ(cut[0].size(), 3);
  EXPECT_EQ(run(1e-30)[1].tokens, full[1].tokens);  // a threshold nothing falls below stops nothing
}

// A sequence that samples draws its chain's drafts from q: the drafter's distribution at its
// temperature (here over all 40 draft tokens), filtered by its top_k and top_p. Over many seeds the
// first draft follows q (and not the untempered distribution); each node records its q (rows that
// sum to 1, its score the log q of its draw). A greedy sequence beside it keeps the argmax chain,
// and a tree never samples.
TEST_F(Proposer, ASamplingChainDrawsItsDraftsFromTheDraftersDistribution) {
  const int64_t V = pcfg_.vocab_size, H = pcfg_.hidden_size, steps = 4;
  KvCache cache(draft_->kv_shape(), 32, 4);
  std::vector<SeqKv> kv(2);
  Tensor h = Tensor::empty({2, H}, DType::F32), z = Tensor::empty({2, 40}, DType::F32);
  for (int64_t b = 0; b < 2; ++b) {
    ASSERT_TRUE(cache.reserve(kv[b], 8 + 9));
    auto [st, lg] = commit(cache, kv[b], 8, 300 + b);
    std::copy_n(st.data<float>(), H, h.data<float>() + b * H);
    std::copy_n(lg.data<float>(), 40, z.data<float>() + b * 40);
  }
  // q over the target vocabulary from the first row's logits, as the proposer should build it.
  auto q_of = [&](float t, int32_t top_k, float top_p) {
    std::vector<int> order(40);
    std::iota(order.begin(), order.end(), 0);
    const float* zr = z.data<float>();
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return zr[a] > zr[b]; });
    const int n = top_k > 0 ? top_k : 40;
    std::vector<double> w(static_cast<size_t>(n));
    double total = 0, cum = 0;
    for (int j = 0; j < n; ++j)
      total += w[j] = std::exp((zr[order[j]] - zr[order[0]]) / t);
    int keep = n;
    for (int j = 0; j < n && top_p < 1; ++j)
      if ((cum += w[j]) >= top_p * total) {
        keep = j + 1;
        break;
      }
    std::vector<double> q(static_cast<size_t>(V), 0.0);
    double kept = 0;
    for (int j = 0; j < keep; ++j)
      kept += w[j];
    for (int j = 0; j < keep; ++j)
      q[static_cast<size_t>(draft_->vocab().to_target(order[j]))] = w[j] / kept;
    return q;
  };
  struct Filter {
    int32_t top_k;
    float top_p;
  };
  for (const Filter f : {Filter{0, 1.f}, Filter{3, 1.f}, Filter{0, 0.6f}}) {
    std::vector<int64_t> counts(static_cast<size_t>(V), 0);
    const int64_t N = 6000;
    for (int64_t i = 0; i < N; ++i) {  // one level: the draft from the given logits
      const ProposeSeq ps{&kv[0], 3, 0.7f, f.top_k, f.top_p, static_cast<uint64_t>(i), 5};
      ++counts[static_cast<size_t>(propose(*draft_, cache, {ps}, h.rows(0, 1), z.rows(0, 1), {1, 1, 2})[0].tokens[1])];
    }
    const auto [stat, df] = testing_chi2::chi2_fit(counts, q_of(0.7f, f.top_k, f.top_p), N);
    EXPECT_LT(stat, testing_chi2::chi2_critical(df)) << "top_k " << f.top_k << ", top_p " << f.top_p;
    if (f.top_k == 0 && f.top_p == 1.f) {
      const auto [ustat, udf] = testing_chi2::chi2_fit(counts, q_of(1.f, 0, 1.f), N);
      EXPECT_GT(ustat, testing_chi2::chi2_critical(udf)) << "the untempered distribution fits too: no power";
    }
  }
  const std::vector<ProposeSeq> two = {{&kv[0], 3, 0.7f, 0, 1.f, 42, 5}, {&kv[1], 4}};
  const auto trees = propose(*draft_, cache, two, h, z, {steps, 1, steps + 1});
  const DraftTree& t = trees[0];
  ASSERT_EQ(t.size(), steps + 1);
  EXPECT_EQ(t.q_row, (std::vector<int32_t>{-1, 0, 1, 2, 3}));
  for (int32_t i = 1; i < t.size(); ++i) {
    double sum = 0, qx = 0;
    for (int64_t j = 0; j < DraftTree::kSampledSupport; ++j) {
      const size_t at = static_cast<size_t>((i - 1) * DraftTree::kSampledSupport + j);
      sum += t.q_probs[at];
      if (t.q_tokens[at] == t.tokens[static_cast<size_t>(i)])
        qx = t.q_probs[at];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << "node " << i;
    EXPECT_NEAR(t.score[static_cast<size_t>(i)] - t.score[static_cast<size_t>(i - 1)], std::log(qx), 1e-5);
  }
  const auto greedy = propose(*draft_, cache, {{&kv[0], 3}, {&kv[1], 4}}, h, z, {steps, 1, steps + 1});
  EXPECT_EQ(trees[1].tokens, greedy[1].tokens);
  EXPECT_TRUE(trees[1].q_row.empty());
  EXPECT_TRUE(propose(*draft_, cache, two, h, z, {2, 2, 5})[0].q_row.empty()) << "a tree samples nothing";
  EXPECT_TRUE(t.drawn);
  SpecSettings top{steps, 1, steps + 1};  // the top tokens, q only measured
  top.sample_drafts = false;
  const auto measured = propose(*draft_, cache, two, h, z, top);
  EXPECT_EQ(measured[0].tokens, greedy[0].tokens);
  EXPECT_FALSE(measured[0].drawn);
  EXPECT_EQ(measured[0].q_row, t.q_row);
  // Neither drawn nor measured (--spec-sampled-drafts off): the greedy chain's tree, without q.
  for (const double stop : {0.0, 0.3}) {
    SpecSettings off{steps, 1, steps + 1, stop};
    off.sample_drafts = off.measure_drafts = false;
    const auto plain = propose(*draft_, cache, two, h, z, off);
    const auto want = propose(*draft_, cache, {{&kv[0], 3}, {&kv[1], 4}}, h, z, {steps, 1, steps + 1, stop});
    EXPECT_EQ(plain[0].tokens, want[0].tokens) << "stop_below " << stop;
    EXPECT_EQ(plain[0].score, want[0].score) << "stop_below " << stop;
    EXPECT_TRUE(plain[0].q_row.empty());
    EXPECT_FALSE(plain[0].drawn);
  }
}

}  // namespace
}  // namespace updraft
