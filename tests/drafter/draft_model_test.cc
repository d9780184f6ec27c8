// The drafter against the speculators package: tests/fixtures/drafter holds two tiny random
// drafters for the policy fixture tests/fixtures/policy/llama, in the speculators format, with
// the outputs of the package's own forward (tools/make_drafter_fixtures.py; semantics in the
// fixtures' README). spec_default is the original EAGLE-3 layer; spec_variant turns on
// norm_before_residual, norm_before_fc and norm_output. Step 0 runs the target features through
// fc with causal attention; step 1 feeds back the step-0 states, and row p attends to the step-0
// entries 0..p and to itself (the training-time-test pattern, expressed as a masked window over
// the draft cache). Tolerance 1e-4 absolute + 1e-4 relative (f32 math; the reference is f32 too).
// The same tensors saved in the EAGLE format load to the same outputs; damaged or mismatched
// checkpoints are refused with errors that say what is wrong.
#include "drafter/draft_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kernels/io/hf_checkpoint.h"
#include "kernels/io/hf_config.h"
#include "kernels/io/safetensors.h"
#include "rollout/policy_model.h"
#include "tests/drafter/draft_golden.h"
#include "tests/drafter/test_drafts.h"
#include "tests/fixture_util.h"

namespace updraft {
namespace {

namespace fs = std::filesystem;
using Named = std::vector<std::pair<std::string, Tensor>>;

using fixture_util::expect_close;
using fixture_util::ids_of;
using testing_drafts::run_two_steps;
using testing_drafts::TwoSteps;
std::string source(const std::string& rel) {
  return fixture_util::source_path(rel);
}

class DraftGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    policy_ = std::make_unique<PolicyModel>(PolicyModel::load(source("tests/fixtures/policy/llama")));
    dir_ = source("tests/fixtures/drafter/" + GetParam());
    ref_ = std::make_unique<SafetensorsFile>(SafetensorsFile::open(dir_ + "/reference.safetensors"));
  }
  std::unique_ptr<PolicyModel> policy_;
  std::string dir_;
  std::unique_ptr<SafetensorsFile> ref_;
};

TEST_P(DraftGolden, MatchesTheSpeculatorsForwardAtBothSteps) {
  const DraftModel m = DraftModel::load(dir_, policy_->draft_target());
  EXPECT_EQ(m.config().format, DraftFormat::Speculators);
  EXPECT_EQ(m.config().rope.theta, 50000.0);  // from transformer_layer_config.rope_parameters
  EXPECT_EQ(m.aux_layers(), (std::vector<int64_t>{2, 4, 5}));
  EXPECT_EQ(m.vocab().ids(), ids_of(ref_->get("selected_target_ids")));
  const TwoSteps got = run_two_steps(m, *ref_);
  const bool normed = GetParam() == "spec_variant";
  EXPECT_EQ(m.config().feed_back_normed, normed);
  expect_close(got.state0, ref_->get(normed ? "step0_feedback" : "step0_prenorm").to_f32_vector(), "step-0 state");
  expect_close(got.logits0, ref_->get("step0_logits").to_f32_vector(), "step-0 logits");
  expect_close(got.logits1, ref_->get("step1_logits").to_f32_vector(), "step-1 logits");
  if (!normed)
    expect_close(got.state1, ref_->get("step1_prenorm").to_f32_vector(), "step-1 state");
}

TEST_P(DraftGolden, EagleFormatRoundTripGivesTheSameOutputs) {
  const DraftModel m = DraftModel::load(dir_, policy_->draft_target());
  const std::string out =
      (fs::temp_directory_path() / ("updraft_eagle_" + std::to_string(::getpid()) + GetParam())).string();
  fs::remove_all(out);
  m.save(out);
  const DraftModel back = DraftModel::load(out, policy_->draft_target());
  EXPECT_EQ(back.config().format, DraftFormat::Eagle);
  const CheckpointDir ck = CheckpointDir::open(out);
  for (const char* name : {"fc.weight", "midlayer.hidden_norm.weight", "midlayer.self_attn.q_proj.weight",
                           "norm.weight", "lm_head.weight", "d2t", "t2d"})
    EXPECT_TRUE(ck.has(name)) << name;
  EXPECT_EQ(ck.info("d2t").dtype, DType::I64);
  EXPECT_EQ(ck.info("t2d").dtype, DType::Bool);
  // The keys SGLang and vLLM read to recognise and size an EAGLE-3 drafter.
  const hf::Json cfg = hf::read_object_file(out + "/config.json");
  EXPECT_EQ(cfg["architectures"], hf::Json::array({"LlamaForCausalLMEagle3"}));
  EXPECT_EQ(cfg["model_type"], "llama");
  EXPECT_EQ(cfg["num_hidden_layers"], 1);
  EXPECT_EQ(cfg["draft_vocab_size"], 96);
  EXPECT_EQ(cfg["vocab_size"], 512);
  EXPECT_EQ(cfg["hidden_size"], 64);
  EXPECT_EQ(cfg["target_hidden_size"], 64);
  EXPECT_EQ(cfg["torch_dtype"], "float32");
  EXPECT_FALSE(cfg.contains("speculators_model_type"));
  EXPECT_EQ(cfg.value("norm_before_residual", false), GetParam() == "spec_variant");
  EXPECT_EQ(cfg.value("norm_before_fc", false), GetParam() == "spec_variant");
  const TwoSteps a = run_two_steps(m, *ref_), b = run_two_steps(back, *ref_);
  EXPECT_EQ(a.state0, b.state0);
  EXPECT_EQ(a.logits0, b.logits0);
  EXPECT_EQ(a.logits1, b.logits1);
  fs::remove_all(out);
}

// A policy update replaces the embedding table under the drafter: rebind must give what a fresh
// load against the new table gives (the embedding enters every step's token rows), whether it
// shares the prepared weights (same sizes, dtype and precision) or rebuilds them (another precision).
TEST_P(DraftGolden, RebindToANewEmbeddingGivesAFreshLoadsOutputs) {
  const DraftTarget t0 = policy_->draft_target();
  const DraftModel m = DraftModel::load(dir_, t0);
  DraftTarget t1 = t0;
  std::vector<float> e = t0.embedding.to_f32_vector();
  for (size_t i = 0; i < e.size(); ++i)
    e[i] = -0.5f * e[i] + 0.01f * static_cast<float>(i % 7);
  t1.embedding = Tensor::from_f32(e, t0.embedding.shape()).to_dtype(t0.embedding.dtype());
  const DraftModel shared = m.rebind(t1);
  EXPECT_TRUE(shared.shares_prepared_weights(m)) << "same sizes and precision: the weights must be shared";
  EXPECT_FALSE(DraftModel::load(dir_, t1).shares_prepared_weights(m));
  const TwoSteps before = run_two_steps(m, *ref_), rebound = run_two_steps(shared, *ref_),
                 fresh = run_two_steps(DraftModel::load(dir_, t1), *ref_);
  EXPECT_EQ(rebound.logits0, fresh.logits0);
  EXPECT_EQ(rebound.logits1, fresh.logits1);
  EXPECT_EQ(rebound.state1, fresh.state1);
  EXPECT_NE(rebound.logits1, before.logits1);                  // the new table is what they read
  EXPECT_EQ(run_two_steps(m, *ref_).logits1, before.logits1);  // the original is untouched

  // Another weight precision in force (int8, the scalar loop where the CPU lacks the tiles): the
  // weights are prepared again, in it.
  auto build_int8 = [&] {
    const testing_models::DraftWeightsScope scope(DraftWeights::kInt8);
    return std::make_pair(m.rebind(t1), DraftModel::load(dir_, t1));
  };
  const auto [rebuilt, fresh_int8] = build_int8();
  EXPECT_EQ(rebuilt.weights(), DraftWeights::kInt8);
  EXPECT_FALSE(rebuilt.shares_prepared_weights(m)) << "another precision: the weights must be prepared again";
  const TwoSteps r8 = run_two_steps(rebuilt, *ref_), f8 = run_two_steps(fresh_int8, *ref_);
  EXPECT_EQ(r8.logits1, f8.logits1);
  EXPECT_NE(r8.logits1, rebound.logits1);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DraftGolden, ::testing::Values("spec_default", "spec_variant"));

// A copy of spec_default with one change, loaded against the policy fixture.
class DraftDamage : public ::testing::Test {
 protected:
  void SetUp() override {
    policy_ = std::make_unique<PolicyModel>(PolicyModel::load(source("tests/fixtures/policy/llama")));
    src_ = source("tests/fixtures/drafter/spec_default");
    dir_ = (fs::temp_directory_path() / ("updraft_draft_damage_" + std::to_string(::getpid()) + "_" +
                                         std::string(::testing::UnitTest::GetInstance()->current_test_info()->name())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(src_ + "/config.json", dir_ + "/config.json");
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Writes model.safetensors from the fixture's tensors after `edit`.
  void write_tensors(const std::function<void(Named&)>& edit) {
    const SafetensorsFile f = SafetensorsFile::open(src_ + "/model.safetensors");
    std::vector<std::pair<std::string, Tensor>> t;
    for (const auto& n : f.names())
      t.emplace_back(n, f.get(n));
    edit(t);
    save_safetensors(dir_ + "/model.safetensors", t);
  }
  void set_config(const std::string& from, const std::string& to) {
    std::ifstream in(dir_ + "/config.json");
    std::string s((std::istreambuf_iterator<char>(in)), {});
    const size_t at = s.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    s.replace(at, from.size(), to);
    std::ofstream(dir_ + "/config.json") << s;
  }
  void expect_refused(const std::string& needle) {
    try {
      DraftModel::load(dir_, policy_->draft_target());
      ADD_FAILURE() << "loaded, expected an error containing: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  std::unique_ptr<PolicyModel> policy_;
  std::string src_, dir_;
};

// fc_norm (three RMSNorms, one per target layer's Ht features, before fc): no fixture of the
// package covers it (it excludes norm_before_fc), so the check is by equivalence. The fixture
// with fc_norm on and weights w must give what the plain fixture gives on features normed by
// hand; and written in the EAGLE format it must say fc_norm and load to the same outputs.
TEST_F(DraftDamage, FcNormIsOneNormPerTargetLayerBeforeFc) {
  const int64_t Ht = 64;
  std::vector<std::vector<float>> w(3);
  write_tensors([&](Named& t) {
    for (int i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < Ht; ++j)
        w[i].push_back(0.5f + 0.1f * static_cast<float>((j * 7 + i * 3) % 11));
      t.emplace_back("fc_norm." + std::to_string(i) + ".weight", Tensor::from_f32(w[i], {Ht}));
    }
  });
  set_config("\"fc_norm\": false", "\"fc_norm\": true");
  const DraftModel with = DraftModel::load(dir_, policy_->draft_target());
  ASSERT_TRUE(with.config().fc_norm);
  const DraftModel plain = DraftModel::load(src_, policy_->draft_target());
  const SafetensorsFile ref = SafetensorsFile::open(src_ + "/reference.safetensors");
  const Tensor hidden = ref.get("hidden_in");
  const int64_t T = hidden.size(0);
  ASSERT_EQ(hidden.size(1), 3 * Ht);
  std::vector<float> h = hidden.to_f32_vector(), normed(h.size());
  const double eps = with.config().rms_norm_eps;
  for (int64_t t = 0; t < T; ++t)
    for (int i = 0; i < 3; ++i) {
      const float* x = h.data() + t * 3 * Ht + i * Ht;
      double ss = 0;
      for (int64_t j = 0; j < Ht; ++j)
        ss += static_cast<double>(x[j]) * x[j];
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(Ht) + eps);
      for (int64_t j = 0; j < Ht; ++j)
        normed[t * 3 * Ht + i * Ht + j] = static_cast<float>(x[j] * inv * w[i][j]);
    }
  const TwoSteps got = run_two_steps(with, ref), want = run_two_steps(plain, ref, Tensor::from_f32(normed, {T, 3 * Ht}));
  expect_close(got.state0, want.state0, "fc_norm step-0 state");
  expect_close(got.logits0, want.logits0, "fc_norm step-0 logits");
  expect_close(got.logits1, want.logits1, "fc_norm step-1 logits");
  const TwoSteps unnormed = run_two_steps(plain, ref);  // and the norms do change the outputs
  double diff = 0;
  for (size_t i = 0; i < got.logits0.size(); ++i)
    diff = std::max(diff, static_cast<double>(std::abs(got.logits0[i] - unnormed.logits0[i])));
  EXPECT_GT(diff, 1e-2);
  const std::string out = dir_ + "_eagle";
  fs::remove_all(out);
  with.save(out);
  EXPECT_TRUE(hf::read_object_file(out + "/config.json").value("fc_norm", false));
  EXPECT_TRUE(CheckpointDir::open(out).has("fc_norm.2.weight"));
  const TwoSteps back = run_two_steps(DraftModel::load(out, policy_->draft_target()), ref);
  EXPECT_EQ(back.logits0, got.logits0);
  EXPECT_EQ(back.logits1, got.logits1);
  fs::remove_all(out);
}

TEST_F(DraftDamage, D2tPointingOutsideTheVocabulary) {
  write_tensors([](Named& t) {
    for (auto& [n, x] : t)
      if (n == "d2t") {
        std::vector<int64_t> v(x.data<int64_t>(), x.data<int64_t>() + x.numel());
        v[95] = 1000;
        x = Tensor::from_i64(v, x.shape());
      }
  });
  expect_refused("d2t[95] = 1000");
}

TEST_F(DraftDamage, D2tThatIsNotAscending) {
  write_tensors([](Named& t) {
    for (auto& [n, x] : t)
      if (n == "d2t") {
        std::vector<int64_t> v(x.data<int64_t>(), x.data<int64_t>() + x.numel());
        std::swap(v[3], v[4]);  // offsets swapped: ids no longer ascending
        v[3] += 1;
        v[4] -= 1;
        x = Tensor::from_i64(v, x.shape());
      }
  });
  expect_refused("ascending");
}

TEST_F(DraftDamage, MissingD2tWithASmallerDraftVocabulary) {
  write_tensors([](Named& t) { std::erase_if(t, [](const auto& p) { return p.first == "d2t"; }); });
  expect_refused("no d2t tensor");
}

TEST_F(DraftDamage, HiddenSizeOfAnotherPolicy) {
  write_tensors([](Named&) {});
  set_config("\"target_hidden_size\": null", "\"target_hidden_size\": 128");
  expect_refused("target_hidden_size");
}

TEST_F(DraftDamage, VocabularyOfAnotherPolicy) {
  write_tensors([](Named&) {});
  set_config("\"vocab_size\": 512", "\"vocab_size\": 1024");
  expect_refused("differs from the policy's vocabulary");
}

TEST_F(DraftDamage, AuxLayerBeyondThePolicy) {
  write_tensors([](Named&) {});
  set_config("\"eagle_aux_hidden_state_layer_ids\": [\n    2,\n    4,\n    5\n  ]",
             "\"eagle_aux_hidden_state_layer_ids\": [2, 4, 9]");
  expect_refused("aux layer (hidden_states index) 9");
}

TEST_F(DraftDamage, WronglyShapedWeight) {
  write_tensors([](Named& t) {
    for (auto& [n, x] : t)
      if (n == "layers.0.self_attn.q_proj.weight")
        x = Tensor::zeros({64, 64}, DType::F32);
  });
  expect_refused("layers.0.self_attn.q_proj.weight has shape [64,64]");
}

TEST_F(DraftDamage, TensorOfAnotherArchitecture) {
  write_tensors([](Named& t) { t.emplace_back("layers.1.mlp.up_proj.weight", Tensor::zeros({4}, DType::F32)); });
  expect_refused("unexpected tensor layers.1.mlp.up_proj.weight");
}

// A speculators config that leaves the optional keys out. The defaults are vLLM's reading of
// the format (eagle3.md B.3): norm_before_residual true, the other variants false, a draft
// vocabulary of 32000, target_hidden_size = hidden_size, aux layers the policy's default.
TEST(DraftConfigTest, SpeculatorsConfigDefaults) {
  const std::string layer = R"("transformer_layer_config": {"model_type": "llama", "hidden_size": 64,
    "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 40000})";
  const DraftConfig c = DraftConfig::from_json_text(R"({"speculators_model_type": "eagle3", )" + layer + "}", "cfg");
  EXPECT_EQ(c.format, DraftFormat::Speculators);
  EXPECT_TRUE(c.norm_before_residual);
  EXPECT_FALSE(c.norm_before_fc);
  EXPECT_FALSE(c.fc_norm);
  EXPECT_FALSE(c.feed_back_normed);
  EXPECT_EQ(c.draft_vocab_size, 32000);
  EXPECT_EQ(c.target_hidden_size, 64);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_TRUE(c.aux_layers.empty());
  EXPECT_EQ(c.speculative_tokens, 0);
  const DraftConfig e = DraftConfig::from_json_text(
      R"({"speculators_model_type": "eagle3", "norm_before_residual": false, "norm_output": true,
          "draft_vocab_size": 500, "eagle_aux_hidden_state_layer_ids": [1, 5, 9],
          "speculators_config": {"proposal_methods": [{"speculative_tokens": 3}]}, )" +
          layer + "}",
      "cfg");
  EXPECT_FALSE(e.norm_before_residual);
  EXPECT_TRUE(e.feed_back_normed);
  EXPECT_EQ(e.draft_vocab_size, 500);
  EXPECT_EQ(e.aux_layers, (std::vector<int64_t>{1, 5, 9}));  // hidden_states indices, as written
  EXPECT_EQ(e.speculative_tokens, 3);
  try {
    DraftConfig::from_json_text(R"({"speculators_model_type": "medusa", )" + layer + "}", "cfg");
    ADD_FAILURE() << "accepted a medusa config";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("not eagle3"), std::string::npos) << err.what();
  }
}

TEST(DraftConfigTest, NativeConfigDefaultsAndRefusals) {
  const std::string base = R"({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64,
    "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
    "draft_vocab_size": 96, "num_hidden_layers": 1, "rms_norm_eps": 1e-5)";
  const DraftConfig c = DraftConfig::from_json_text(base + "}", "cfg");
  EXPECT_EQ(c.format, DraftFormat::Eagle);
  EXPECT_EQ(c.rope.theta, 10000.0);  // absent theta: the drafters' 10000 (eagle3.md A.6)
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.target_hidden_size, 64);
  EXPECT_FALSE(c.norm_before_residual);
  EXPECT_TRUE(c.aux_layers.empty());
  // SGLang semantics for explicit ids: output of layer i = hidden_states index i + 1.
  const DraftConfig ids = DraftConfig::from_json_text(
      base + R"(, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}})", "cfg");
  EXPECT_EQ(ids.aux_layers, (std::vector<int64_t>{2, 4, 5}));
  // Written back, non-default ids round-trip; default ones are left out.
  EXPECT_EQ(DraftConfig::from_json_text(ids.to_eagle_json(12), "w").aux_layers, ids.aux_layers);
  EXPECT_TRUE(DraftConfig::from_json_text(ids.to_eagle_json(8), "w").aux_layers.empty());
  for (const auto& [extra, needle] : std::vector<std::pair<std::string, std::string>>{
           {R"(, "num_hidden_layers": 2)", "num_hidden_layers 2"},
           {R"(, "hidden_act": "gelu")", "hidden_act"},
           {R"(, "norm_before_fc": true, "fc_norm": true)", "exclude each other"},
           {R"(, "norm_output": false)", "norm_output false"},
           {R"(, "eagle_config": {"use_aux_hidden_state": false})", "use_aux_hidden_state"},
           {R"(, "draft_vocab_size": 600)", "exceeds vocab_size"}}) {
    const std::string text = base + extra + "}";  // a repeated key: the later value wins
    try {
      DraftConfig::from_json_text(text, "cfg");
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace updraft
