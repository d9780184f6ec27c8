// Internal consistency of the policy forward on a random model: every way of feeding the same
// tokens (whole prompt, chunks, one token at a time, several sequences in one batch, a tree
// mask) must give the same logits, and KV compaction must leave the cache as if only the kept
// tokens had been fed. Agreement with the Hugging Face reference is in hf_reference_test.cc.
#include <gtest/gtest.h>

#include <random>

#include "kernels/ops.h"
#include "tests/rollout/test_models.h"

namespace updraft {
namespace {

using testing_models::tiny_config;

std::vector<int32_t> random_tokens(int64_t n, uint64_t seed, int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t)
    x = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return t;
}

void expect_rows_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
  EXPECT_LE(worst, tol) << what << ": max abs difference " << worst;
}

class PolicyForward : public ::testing::TestWithParam<PolicyArch> {
 protected:
  void SetUp() override {
    cfg_ = tiny_config(GetParam());
    model_ = std::make_unique<PolicyModel>(random_policy(cfg_, 7, DType::BF16));
    testing_models::ScopedKvPoison poison;  // every test below also checks that no unwritten entry is read
    cache_ = std::make_unique<KvCache>(model_->kv_shape(), 64, 4);
  }

  // Logits of every position of `tokens` fed in chunks of `chunk` to a fresh sequence.
  std::vector<float> run_chunked(const std::vector<int32_t>& tokens, int64_t chunk) {
    SeqKv kv;
    EXPECT_TRUE(cache_->reserve(kv, static_cast<int64_t>(tokens.size())));
    std::vector<float> all;
    for (size_t at = 0; at < tokens.size(); at += chunk) {
      const size_t n = std::min<size_t>(chunk, tokens.size() - at);
      std::vector<SeqStep> b(1);
      b[0].kv = &kv;
      b[0].tokens.assign(tokens.begin() + at, tokens.begin() + at + n);
      for (size_t i = 0; i < n; ++i)
        b[0].logit_rows.push_back(static_cast<int32_t>(i));
      auto out = model_->forward(*cache_, b);
      auto v = out.logits.to_f32_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    cache_->release(kv);
    return all;
  }

  PolicyConfig cfg_;
  std::unique_ptr<PolicyModel> model_;
  std::unique_ptr<KvCache> cache_;
};

TEST_P(PolicyForward, ChunkedPrefillAndDecodeMatchOneShot) {
  const auto toks = random_tokens(23, 1, cfg_.vocab_size);
  const auto whole = run_chunked(toks, 23);
  // With 16-bit weights every row goes through the same kernels in the same order (gemm.h,
  // paged_attention.h), so the logits are bitwise identical however the tokens are fed: the
  // property that makes greedy speculation token-identical to plain decoding.
  EXPECT_EQ(run_chunked(toks, 5), whole) << "chunks of 5";
  EXPECT_EQ(run_chunked(toks, 1), whole) << "one token at a time";
  EXPECT_EQ(cache_->free_blocks(), 64) << "blocks leaked";
}

TEST_P(PolicyForward, BatchedSequencesMatchSeparateRuns) {
  const std::vector<std::vector<int32_t>> prompts = {random_tokens(9, 2, cfg_.vocab_size),
                                                     random_tokens(3, 3, cfg_.vocab_size),
                                                     random_tokens(14, 4, cfg_.vocab_size)};
  std::vector<SeqKv> kvs(3);
  std::vector<SeqStep> b(3);
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE(cache_->reserve(kvs[s], 20));
    b[s].kv = &kvs[s];
    b[s].tokens = prompts[s];
    b[s].logit_rows = {static_cast<int32_t>(prompts[s].size() - 1), 0};
  }
  auto out = model_->forward(*cache_, b);
  ASSERT_EQ(out.logits.shape(), (Shape{6, cfg_.vocab_size}));
  const auto got = out.logits.to_f32_vector();
  const int64_t V = cfg_.vocab_size;
  for (int s = 0; s < 3; ++s) {
    const auto sep = run_chunked(prompts[s], 100);
    const int64_t last = static_cast<int64_t>(prompts[s].size()) - 1;
    expect_rows_close({got.begin() + (2 * s) * V, got.begin() + (2 * s + 1) * V},
                      {sep.begin() + last * V, sep.begin() + (last + 1) * V}, 1e-4, "last row of seq");
    expect_rows_close({got.begin() + (2 * s + 1) * V, got.begin() + (2 * s + 2) * V}, {sep.begin(), sep.begin() + V},
                      1e-4, "first row of seq");
  }
  // Batched decode: one more token for each, still equal to separate runs.
  for (int s = 0; s < 3; ++s) {
    b[s].tokens = {static_cast<int32_t>(5 + s)};
    b[s].logit_rows = {0};
  }
  const auto dec = model_->forward(*cache_, b).logits.to_f32_vector();
  for (int s = 0; s < 3; ++s) {
    auto p = prompts[s];
    p.push_back(5 + s);
    const auto sep = run_chunked(p, 100);
    const int64_t last = static_cast<int64_t>(p.size()) - 1;
    expect_rows_close({dec.begin() + s * V, dec.begin() + (s + 1) * V},
                      {sep.begin() + last * V, sep.begin() + (last + 1) * V}, 1e-4, "batched decode");
  }
}

// A tree of 6 nodes after a prefix: 0 -> {1, 2}, 1 -> {3, 4}, 2 -> {5}. Node i sits at
// position prefix + depth(i). Each node's logits must equal the causal run of its root path;
// keeping the path 0,1,4 must leave a cache equivalent to feeding just that path.
TEST_P(PolicyForward, TreeMaskAndKeepMatchTheCausalPath) {
  const auto prefix = random_tokens(7, 5, cfg_.vocab_size);
  const std::vector<int32_t> nodes = {11, 22, 33, 44, 55, 66}, parent = {-1, 0, 0, 1, 1, 2};
  const int64_t n = 6, P = 7, V = cfg_.vocab_size;
  Tensor mask = Tensor::zeros({n, n}, DType::Bool);
  std::vector<int32_t> depth(n), positions(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t a = i; a >= 0; a = parent[a]) {
      mask.data<uint8_t>()[i * n + a] = 1;
      if (a != i)
        ++depth[i];
    }
    positions[i] = static_cast<int32_t>(P + depth[i]);
  }
  SeqKv kv;
  ASSERT_TRUE(cache_->reserve(kv, P + n + 4));
  std::vector<SeqStep> b(1);
  b[0].kv = &kv;
  b[0].tokens = prefix;
  model_->forward(*cache_, b);
  b[0].tokens = nodes;
  b[0].positions = positions;
  b[0].tree_mask = mask;
  b[0].logit_rows = {0, 1, 2, 3, 4, 5};
  const auto got = model_->forward(*cache_, b).logits.to_f32_vector();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> path;
    for (int64_t a = i; a >= 0; a = parent[a])
      path.insert(path.begin(), nodes[a]);
    auto seq = prefix;
    seq.insert(seq.end(), path.begin(), path.end());
    const auto ref = run_chunked(seq, 100);
    const int64_t last = static_cast<int64_t>(seq.size()) - 1;
    expect_rows_close({got.begin() + i * V, got.begin() + (i + 1) * V},
                      {ref.begin() + last * V, ref.begin() + (last + 1) * V}, 1e-4, "tree node " + std::to_string(i));
  }
  // Accept the path 0 -> 1 -> 4, then decode one token on top.
  cache_->keep(kv, P, {0, 1, 4});
  EXPECT_EQ(kv.length, P + 3);
  b[0] = SeqStep{};
  b[0].kv = &kv;
  b[0].tokens = {77};
  b[0].logit_rows = {0};
  const auto after = model_->forward(*cache_, b).logits.to_f32_vector();
  auto seq = prefix;
  seq.insert(seq.end(), {11, 22, 55, 77});
  const auto ref = run_chunked(seq, 100);
  expect_rows_close(after, {ref.end() - V, ref.end()}, 1e-4, "decode after keep");
  cache_->release(kv);
}

TEST_P(PolicyForward, AuxCaptureAndBadTokens) {
  const auto toks = random_tokens(5, 9, cfg_.vocab_size);
  SeqKv kv;
  ASSERT_TRUE(cache_->reserve(kv, 10));
  std::vector<SeqStep> b(1);
  b[0].kv = &kv;
  b[0].tokens = toks;
  b[0].logit_rows = {4};
  EXPECT_EQ(model_->aux_layers(), (std::vector<int64_t>{2, 4, 5})) << "default {2, L/2, L-3} for L = 8";
  model_->set_aux_layers({0, 2, 5});
  auto out = model_->forward(*cache_, b, {.aux = true, .hidden = true, .aux_layers = {}});
  ASSERT_EQ(out.aux.shape(), (Shape{5, 3, cfg_.hidden_size}));
  ASSERT_EQ(out.hidden.shape(), (Shape{1, cfg_.hidden_size}));
  // Index 0 is the residual stream entering layer 0: the embedding rows themselves.
  const auto aux = out.aux.to_f32_vector();
  const auto table = model_->embedding_table().to_f32_vector();
  const int64_t H = cfg_.hidden_size;
  for (int64_t t = 0; t < 5; ++t)
    for (int64_t i = 0; i < H; ++i)
      ASSERT_EQ(aux[(t * 3 + 0) * H + i], table[toks[t] * H + i]) << "token " << t;
  EXPECT_THROW(model_->set_aux_layers({2, 2}), Error);
  EXPECT_THROW(model_->set_aux_layers({8}), Error);
  EXPECT_EQ(kv.length, 5);
  b[0].tokens = {3, static_cast<int32_t>(cfg_.vocab_size)};
  b[0].logit_rows = {};
  EXPECT_THROW(model_->forward(*cache_, b), Error);
  EXPECT_EQ(kv.length, 5) << "a rejected batch must not advance the cache";
  b[0].tokens = {-1};
  EXPECT_THROW(model_->forward(*cache_, b), Error);
}

INSTANTIATE_TEST_SUITE_P(Archs, PolicyForward,
                         ::testing::Values(PolicyArch::Llama, PolicyArch::Qwen2, PolicyArch::Qwen3),
                         [](const auto& info) { return std::string(arch_name(info.param)); });

}  // namespace
}  // namespace updraft
