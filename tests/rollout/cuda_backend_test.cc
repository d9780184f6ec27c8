// The CUDA backend end to end against the same references as the CPU: the drafter against the
// speculators package's forward (tests/fixtures/drafter), greedy speculation token-identical
// to plain decoding, and sampled speculation following the policy's distribution (chi-square). The policy against
// transformers is in hf_reference_test.cc (HfReference.*OnCuda) and every op in kernels/backend_parity_test.cc. Each
// test is skipped without a usable GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/core/device.h"
#include "kernels/io/safetensors.h"
#include "tests/drafter/draft_golden.h"
#include "tests/fixture_util.h"
#include "tests/rollout/chi2.h"
#include "tests/rollout/spec_fixture.h"

namespace updraft {
namespace {

using fixture_util::expect_close;
using testing_drafts::run_two_steps;
using testing_drafts::TwoSteps;

class CudaDraftGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fixture_util::source_path("tests/fixtures/drafter/" + GetParam());
    ref_ = std::make_unique<SafetensorsFile>(SafetensorsFile::open(dir_ + "/reference.safetensors"));
  }
  std::string dir_;
  std::unique_ptr<SafetensorsFile> ref_;
};

// The same two steps on the CUDA backend (bf16 activations and weights), held to the bf16
// tolerance (fixture_util::bf16_tol). Skipped without a usable GPU.
TEST_P(CudaDraftGolden, MatchesTheSpeculatorsForward) {
  if (!cuda_available())
    GTEST_SKIP() << "no usable CUDA device on this machine";
  const PolicyModel gpu =
      PolicyModel::load(fixture_util::source_path("tests/fixtures/policy/llama"), {.device = Device::CUDA});
  const DraftModel m = DraftModel::load(dir_, gpu.draft_target());
  ASSERT_EQ(m.device(), Device::CUDA);
  const TwoSteps got = run_two_steps(m, *ref_);
  const bool normed = GetParam() == "spec_variant";
  const auto check = [&](const std::vector<float>& g, const std::string& name, const std::string& what) {
    const auto want = ref_->get(name).to_f32_vector();
    expect_close(g, want, what, fixture_util::bf16_tol(want));
  };
  check(got.state0, normed ? "step0_feedback" : "step0_prenorm", "step-0 state");
  check(got.logits0, "step0_logits", "step-0 logits");
  check(got.logits1, "step1_logits", "step-1 logits");
  if (!normed)
    check(got.state1, "step1_prenorm", "step-1 state");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaDraftGolden, ::testing::Values("spec_default", "spec_variant"));

// The speculation fixture's policy and drafter, rebuilt from the same seeds on the GPU by to_cuda().
class CudaSpecEngine : public testing_spec::SpecFixture {
 protected:
  void to_cuda() {
    model_ = std::make_unique<PolicyModel>(random_policy(cfg_, 21, DType::BF16, {.device = Device::CUDA}));
    draft_ = std::make_unique<DraftModel>(random_draft(testing_models::tiny_draft_config(cfg_, 12),
                                                       spread_vocab(12, cfg_.vocab_size), model_->draft_target(), 4,
                                                       DType::BF16));
    ASSERT_EQ(draft_->device(), Device::CUDA);
  }
};

// The identity on the CUDA backend (bf16 activations): a verification pass over k rows must give
// each row the logits a one-row decode step gives it. Up to 256 rows the fixture's products run
// one kernel whose rows do not depend on the row count (kernels/ops/gemm_cuda.cu), so one sequence
// is identical by construction, logprobs included. Past 256 rows they go through cuBLAS, whose
// results depend on the shape (a row's last bits differ between a decode step of 64 rows and a
// verification of 320): at batch 64 the tokens must still agree (a flip needs a near-tie;
// this fixture has none) and the logprobs within bf16 noise: 0.05, below the largest logit error
// of these bf16 computations against f32 ones on the policy fixtures (0.057-0.066, HfReference
// on an H200), where the two runs on that GPU differed by up to 9.1e-3. Chain and tree, over the
// CPU speculation test's requests (stop tokens and length limits inside rounds). The drafter must also
// be as useful there as on the CPU: a drafter fed wrong features on CUDA would stay lossless but stop being accepted,
// so the accepted drafts must come to at least half the CPU's on the same weights. Skipped without a usable GPU.
TEST_F(CudaSpecEngine, GreedyIsTokenIdenticalToPlainDecoding) {
  if (!cuda_available())
    GTEST_SKIP() << "no usable CUDA device on this machine";
  const std::vector<GenRequest> reqs = greedy_requests();
  const std::vector<SpecSettings> settings = {{4, 1, 5}, {3, 3, 8}};
  std::vector<int64_t> cpu_accepted;
  for (const SpecSettings& s : settings) {
    SpecStats st;
    run(reqs, 64, &s, AcceptRule::Exact, &st);
    cpu_accepted.push_back(st.accepted);
  }
  ASSERT_NO_FATAL_FAILURE(to_cuda());
  for (int64_t batch : {1, 64}) {
    const auto plain = run(reqs, batch, nullptr);
    for (size_t k = 0; k < settings.size(); ++k) {
      SpecStats st;
      const auto spec = run(reqs, batch, &settings[k], AcceptRule::Exact, &st);
      const std::string where = "cuda, batch " + std::to_string(batch) + ", top_k " + std::to_string(settings[k].top_k);
      if (batch == 1) {
        ASSERT_NO_FATAL_FAILURE(testing_models::expect_same_outputs(spec, plain, where));
      } else {
        ASSERT_NO_FATAL_FAILURE(testing_models::expect_same_tokens(spec, plain, 0.05, where));
      }
      std::printf("%s: %lld drafts accepted (the CPU: %lld)\n", where.c_str(), static_cast<long long>(st.accepted),
                  static_cast<long long>(cpu_accepted[k]));
      EXPECT_GT(st.accepted, 20) << where;
      EXPECT_GE(2 * st.accepted, cpu_accepted[k]) << where;
    }
  }
}

// Merged trees on CUDA: suffix drafts from the siblings and the recent completions grafted onto the
// drafter's chain or tree (or alone), verified in one pass, give plain decoding's tokens, and
// bitwise its logprobs: at batch 1 a round verifies at most 1 + 8 + 6 = 15 rows, at batch 12 at
// most 180, and the fixture's products run the row-count-independent kernel up to 256 rows
// (kernels/ops/gemm_cuda.cu). The first run on an H200 sent rows past 16 to cuBLAS, whose
// results depend on the shape: one token at a near tie flipped at batch 12. Suffix drafts must be
// accepted, so that the grafted path ran (on the CPU these weights accept about 400 of them per
// run). Skipped without a usable GPU.
TEST_F(CudaSpecEngine, MergedTreesAreTokenIdenticalToPlainDecoding) {
  if (!cuda_available())
    GTEST_SKIP() << "no usable CUDA device on this machine";
  ASSERT_NO_FATAL_FAILURE(to_cuda());
  const std::vector<GenRequest> reqs = sibling_requests();
  const std::vector<std::optional<SpecSettings>> drafters = {std::nullopt, SpecSettings{4, 1, 5},
                                                             SpecSettings{3, 3, 8}};
  for (int64_t batch : {1, 12}) {
    EngineOptions o;
    o.max_batch = batch;
    o.kv_cache_bytes = 64 << 20;
    o.prefill_chunk = 7;
    const std::vector<GenResult> plain = testing_spec::run_waves(*model_, nullptr, reqs, o, 5);
    for (const std::optional<SpecSettings>& s : drafters) {
      EngineOptions so = o;
      so.suffix = testing_spec::both();
      if (s)
        so.spec = *s;
      EngineStats st;
      const auto got = testing_spec::run_waves(*model_, s ? draft_.get() : nullptr, reqs, so, 5, &st);
      const std::string where = "cuda, batch " + std::to_string(batch) + ", drafter " +
                                (!s           ? "none"
                                 : s->chain() ? "chain"
                                              : "tree");
      ASSERT_NO_FATAL_FAILURE(testing_models::expect_same_outputs(got, plain, where));
      std::printf("%s: accepted by source (eagle, group, history) %lld, %lld, %lld\n", where.c_str(),
                  static_cast<long long>(st.spec.accepted_by[0]), static_cast<long long>(st.spec.accepted_by[1]),
                  static_cast<long long>(st.spec.accepted_by[2]));
      EXPECT_GT(st.spec.accepted_by[1] + st.spec.accepted_by[2], 20) << "suffix drafts were rarely accepted: " << where;
      if (s) {  // the drafter's nodes were in the trees (the suffix drafts take most acceptances here)
        EXPECT_GT(st.spec.drafted_by[0], 0) << where;
      }
    }
  }
}

// Sampled speculation on CUDA (the verifier's rejection sampling over probabilities the GPU
// computed): 12000 seeded two-token samples, tree and chain, fit the CUDA policy's own joint
// distribution of the first two tokens; plain decoding fits it too, and the biased control
// (no residual after a rejection) must not. Skipped without a usable GPU.
TEST_F(CudaSpecEngine, SampledSpeculationFollowsThePolicyDistribution) {
  if (!cuda_available())
    GTEST_SKIP() << "no usable CUDA device on this machine";
  ASSERT_NO_FATAL_FAILURE(to_cuda());
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9};
  const int64_t N = 12000, V = cfg_.vocab_size;
  const float temp = 1.3f;
  const auto joint = testing_spec::exact_pairs(*model_, prompt, temp, 0, 1.f);
  auto fit = [&](const SpecSettings* s, AcceptRule rule, uint64_t seed0, SpecStats* st) {
    std::vector<GenRequest> reqs;
    for (int64_t i = 0; i < N; ++i)
      reqs.push_back(req(prompt, temp, 2, seed0 + static_cast<uint64_t>(i)));
    std::vector<int64_t> counts(static_cast<size_t>(V * V), 0);
    for (const auto& r : run(reqs, 64, s, rule, st))
      ++counts[r.tokens[0] * V + r.tokens[1]];
    return testing_chi2::chi2_fit(counts, joint, N);
  };
  const SpecSettings tree{3, 3, 8}, chain{4, 1, 5};
  SpecStats st, cst;
  const auto [stat, df] = fit(&tree, AcceptRule::Exact, 1'000'000, &st);
  EXPECT_LT(stat, testing_chi2::chi2_critical(df)) << "tree samples do not fit the policy";
  EXPECT_GT(st.accepted, N / 10) << "too few acceptances for the test to mean anything";
  const auto [cstat, cdf] = fit(&chain, AcceptRule::Exact, 4'000'000, &cst);
  EXPECT_LT(cstat, testing_chi2::chi2_critical(cdf)) << "chain samples do not fit the policy";
  EXPECT_GT(cst.accepted, N / 100) << "too few chain acceptances for the test to mean anything";
  const auto [pstat, pdf] = fit(nullptr, AcceptRule::Exact, 2'000'000, nullptr);
  EXPECT_LT(pstat, testing_chi2::chi2_critical(pdf)) << "plain samples do not fit: the reference is wrong";
  const auto [bstat, bdf] = fit(&tree, AcceptRule::NoResidual, 3'000'000, nullptr);
  EXPECT_GT(bstat, testing_chi2::chi2_critical(bdf)) << "the biased control passed: the test has no power";
}

}  // namespace
}  // namespace updraft
