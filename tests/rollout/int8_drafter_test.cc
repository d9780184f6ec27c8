// Drafters with int8 weights (--draft-weights int8): speculation stays lossless, and the shipped
// drafter proposes as well as with its bf16 weights.
#include <gtest/gtest.h>

#include "rollout/tokenizer.h"
#include "tests/rollout/spec_fixture.h"
#include "trainer/corpus.h"

namespace updraft {
namespace {

using testing_models::DraftWeightsScope;

using Int8Drafter = testing_spec::SpecFixture;

TEST_F(Int8Drafter, GreedyIsTokenIdenticalToPlainDecoding) {
  // Widths that are multiples of 64 (the AMX-INT8 tiles where the CPU has them) and that are not
  // (the reference loop): both must leave the output the policy's.
  for (const int64_t inter : {cfg_.intermediate_size, int64_t{64}}) {
    cfg_.intermediate_size = inter;
    model_ = std::make_unique<PolicyModel>(random_policy(cfg_, 31, DType::BF16));
    {
      DraftWeightsScope int8(DraftWeights::kInt8);
      draft_ = std::make_unique<DraftModel>(random_draft(testing_models::tiny_draft_config(cfg_, 12),
                                                         spread_vocab(12, cfg_.vocab_size), model_->draft_target(), 4,
                                                         DType::BF16));
    }
    ASSERT_EQ(draft_->weights(), DraftWeights::kInt8);
    std::vector<GenRequest> reqs;
    for (int i = 0; i < 24; ++i)
      reqs.push_back(req(testing_spec::pattern_prompt(i, 2 + (i * 5) % 13, cfg_.vocab_size), 0.f, 6 + (i * 7) % 19, 0));
    const auto plain = run(reqs, 24, nullptr);
    for (const SpecSettings s : {SpecSettings{4, 1, 5}, SpecSettings{3, 3, 8}}) {
      std::vector<std::vector<GenResult>> by_batch;
      for (int64_t batch : {1, 24}) {
        SpecStats st;
        by_batch.push_back(run(reqs, batch, &s, AcceptRule::Exact, &st));
        ASSERT_NO_FATAL_FAILURE(testing_models::expect_same_outputs(
            by_batch.back(), plain,
            "int8 drafter, intermediate " + std::to_string(inter) + ", batch " + std::to_string(batch)));
        EXPECT_GT(st.accepted, 5) << "the int8 drafter's proposals should be accepted at times";
      }
      // Its rows do not depend on the batch (exact int32 sums), so neither do its proposals.
      for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(by_batch[0][i].spec.rounds, by_batch[1][i].spec.rounds) << "request " << i;
        EXPECT_EQ(by_batch[0][i].spec.accepted, by_batch[1][i].spec.accepted) << "request " << i;
      }
    }
  }
}

// The shipped pair, greedy, chain of 4, on held-out prompts of both domains: the int8 drafter's
// acceptance stays within 5% of the bf16 one's (deterministic: no timing involved).
TEST(Int8DrafterShipped, KeepsTheBf16DraftersAcceptance) {
  const std::string root = std::string(UPDRAFT_SOURCE_DIR) + "/models/";
  const PolicyModel policy = PolicyModel::load(root + "small");
  const Tokenizer tok = Tokenizer::load(root + "small");
  const DraftModel bf16 = DraftModel::load(root + "small-eagle3", policy.draft_target());
  std::unique_ptr<DraftModel> int8;
  {
    DraftWeightsScope scope(DraftWeights::kInt8);
    int8 = std::make_unique<DraftModel>(DraftModel::load(root + "small-eagle3", policy.draft_target()));
  }
  std::vector<GenRequest> reqs;
  for (const corpus::Sample& smp : corpus::make_samples(corpus::Mix{}, corpus::Split::kHeldOut, 8, 3))
    reqs.push_back(testing_models::seeded_request(tok.encode(smp.prompt), 0.f, 48, 0));
  std::vector<double> tau;
  std::vector<std::vector<GenResult>> outs;
  for (const DraftModel* d : {&bf16, static_cast<const DraftModel*>(int8.get())}) {
    EngineOptions o;
    o.max_batch = 1;
    o.kv_cache_bytes = 64 << 20;
    o.spec = SpecSettings{4, 1, 5};
    Engine e(policy, o, d);
    for (const auto& r : reqs)
      e.submit(r);
    outs.push_back(e.run());
    tau.push_back(e.stats().spec.tau());
  }
  ASSERT_NO_FATAL_FAILURE(testing_models::expect_same_outputs(outs[1], outs[0], "int8 against bf16 drafter"));
  EXPECT_GT(tau[0], 3.0) << "the shipped pair should accept most chain drafts";
  EXPECT_GT(tau[1], 0.95 * tau[0]) << "int8 weights cost the drafter its acceptance: tau " << tau[1] << " against "
                                   << tau[0];
}

}  // namespace
}  // namespace updraft
