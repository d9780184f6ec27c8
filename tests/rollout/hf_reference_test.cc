// The policy against the Hugging Face reference implementation: tests/fixtures/policy holds tiny
// random-weight Llama (bf16, sharded, llama3 RoPE scaling, untied), Qwen2 (f32, biases, tied)
// and Qwen3 (f16, q/k norm, head_dim 32, tied) models with outputs that transformers computed
// in float32 (tools/make_policy_fixtures.py). Tolerance: 1e-4 absolute + 1e-4 relative (f32
// math over the same rounded weights) for the f32 and f16 models; for the bf16 one 3e-2 times
// the larger of 1 and the reference's RMS, absolute and relative, because with bf16 weights the
// CPU, like the GPU, rounds each linear's input to bf16 (relative error 2^-9 per input, a chain
// of 8 layers over a residual stream that grows: errors scale with the stream); greedy continuations must match token for token (the
// fixtures' smallest top-1/top-2 logit margin is 2.8e-3). Also: damaged copies of a fixture
// must be rejected with an error that names what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include "kernels/core/device.h"
#include "kernels/io/safetensors.h"
#include "rollout/engine/engine.h"
#include "tests/fixture_util.h"

namespace updraft {
namespace {

namespace fs = std::filesystem;

using fixture_util::expect_close;
using fixture_util::ids_of;

std::string fixture(const std::string& name) {
  return fixture_util::source_path("tests/fixtures/policy/" + name);
}

// Rows [begin, end) of a flattened float tensor.
std::vector<float> slice(const std::vector<float>& v, int64_t begin, int64_t end) {
  return {v.begin() + begin, v.begin() + end};
}

class HfReference : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = std::make_unique<PolicyModel>(PolicyModel::load(fixture(GetParam())));
    ref_ = std::make_unique<SafetensorsFile>(SafetensorsFile::open(fixture(GetParam()) + "/reference.safetensors"));
  }
  // The tolerance for this fixture's weights and a reference tensor (see the top of the file).
  double tol(const std::vector<float>& want) const {
    return model_->config().dtype != DType::BF16 ? 1e-4 : fixture_util::bf16_tol(want);
  }
  std::unique_ptr<PolicyModel> model_;
  std::unique_ptr<SafetensorsFile> ref_;
};

using Compare = std::function<void(const std::vector<float>& got, const std::vector<float>& want, const std::string&)>;

// Logits at every position, every layer's hidden state and the final normed one of `m` against
// the reference, each compared by `close`.
void expect_forward_matches(PolicyModel& m, const SafetensorsFile& ref, const Compare& close) {
  const auto& cfg = m.config();
  const auto ids = ids_of(ref.get("input_ids"));
  const int64_t T = static_cast<int64_t>(ids.size()), H = cfg.hidden_size, L = cfg.num_layers;
  std::vector<int64_t> all_layers;
  for (int64_t l = 0; l < L; ++l)
    all_layers.push_back(l);
  m.set_aux_layers(all_layers);
  KvCache cache(m.kv_shape(), 8, 16);
  SeqKv kv;
  ASSERT_TRUE(cache.reserve(kv, T));
  std::vector<SeqStep> b(1);
  b[0].kv = &kv;
  b[0].tokens = ids;
  for (int64_t t = 0; t < T; ++t)
    b[0].logit_rows.push_back(static_cast<int32_t>(t));
  auto out = m.forward(cache, b, {.aux = true, .hidden = true, .aux_layers = {}});
  const auto want_logits = ref.get("logits").to_f32_vector();
  close(out.logits.to_f32_vector(), want_logits, "logits");
  const auto hs = ref.get("hidden_states").to_f32_vector();  // [L+1, T, H]
  const auto aux = out.aux.to_f32_vector();                  // [T, L, H]
  for (int64_t l = 0; l < L; ++l) {
    std::vector<float> got;
    for (int64_t t = 0; t < T; ++t) {
      auto row = slice(aux, (t * L + l) * H, (t * L + l + 1) * H);
      got.insert(got.end(), row.begin(), row.end());
    }
    const auto want = slice(hs, l * T * H, (l + 1) * T * H);
    close(got, want, "hidden_states[" + std::to_string(l) + "]");
  }
  const auto want_final = slice(hs, L * T * H, (L + 1) * T * H);
  close(out.hidden.to_f32_vector(), want_final, "final normed hidden");
}

TEST_P(HfReference, LogitsAndEveryHiddenState) {
  expect_forward_matches(*model_, *ref_, [this](const auto& got, const auto& want, const std::string& what) {
    expect_close(got, want, what, tol(want));
  });
}

// The CUDA backend computes with bf16 weights and activations whatever the checkpoint's dtype,
// the residual stream included: every fixture is held to the bounds of a bf16 stack there
// (fixture_util::expect_close_bf16_stack). Skipped without a usable GPU.
TEST_P(HfReference, LogitsAndEveryHiddenStateOnCuda) {
  if (!cuda_available())
    GTEST_SKIP() << "no usable CUDA device on this machine";
  PolicyModel gpu = PolicyModel::load(fixture(GetParam()), {.device = Device::CUDA});
  ASSERT_EQ(gpu.act_dtype(), DType::BF16);
  expect_forward_matches(gpu, *ref_, fixture_util::expect_close_bf16_stack);
}

// Greedy decoding on CUDA through the engine (prefill, then one token a step over the paged KV
// cache): each token it picks is the argmax, within bf16's tolerance, of one full forward over
// the prompt and the tokens before it. A wrong cache (keys at the wrong position, a stale block)
// picks tokens far below the maximum. Bitwise argmax equality is not asked: a one-token step and
// a full pass may sum in other orders, and bf16 ties are common in a random-weight model.
TEST_P(HfReference, GreedyDecodingOnCudaAgreesWithFullForwards) {
  if (!cuda_available())
    GTEST_SKIP() << "no usable CUDA device on this machine";
  const PolicyModel gpu = PolicyModel::load(fixture(GetParam()), {.device = Device::CUDA});
  GenRequest r;
  r.prompt = ids_of(ref_->get("greedy_prompt"));
  r.params.temperature = 0;
  r.params.max_new_tokens = 24;
  r.params.ignore_eos = true;
  Engine e(gpu);
  e.submit(r);
  const auto res = e.run();
  ASSERT_EQ(res.size(), 1u);
  ASSERT_EQ(res[0].tokens.size(), 24u);
  std::vector<int32_t> seq = r.prompt;
  seq.insert(seq.end(), res[0].tokens.begin(), res[0].tokens.end());
  const int64_t P = static_cast<int64_t>(r.prompt.size()), V = gpu.config().vocab_size;
  KvCache cache(gpu.kv_shape(), 8, 16);
  SeqKv kv;
  ASSERT_TRUE(cache.reserve(kv, static_cast<int64_t>(seq.size())));
  std::vector<SeqStep> b(1);
  b[0].kv = &kv;
  b[0].tokens = seq;
  for (int64_t t = P - 1; t + 1 < static_cast<int64_t>(seq.size()); ++t)
    b[0].logit_rows.push_back(static_cast<int32_t>(t));
  const auto logits = gpu.forward(cache, b).logits.to_f32_vector();  // [24, V]
  int agree = 0;
  for (int64_t i = 0; i < 24; ++i) {
    const std::vector<float> row = slice(logits, i * V, (i + 1) * V);
    const float best = *std::max_element(row.begin(), row.end());
    const float picked = row[static_cast<size_t>(res[0].tokens[static_cast<size_t>(i)])];
    EXPECT_GE(picked, best - fixture_util::bf16_tol(row)) << "token " << i << " is far from the argmax";
    agree += picked == best;
  }
  EXPECT_GE(agree, 20) << "most steps should pick the full pass's argmax exactly";
}

TEST_P(HfReference, DefaultAuxLayersAreHfIndices2HalfAndLMinus3) {
  EXPECT_EQ(model_->aux_layers(), (std::vector<int64_t>{2, 4, 5}));
  const auto ids = ids_of(ref_->get("input_ids"));
  const int64_t T = static_cast<int64_t>(ids.size()), H = model_->config().hidden_size;
  KvCache cache(model_->kv_shape(), 8, 16);
  SeqKv kv;
  ASSERT_TRUE(cache.reserve(kv, T));
  std::vector<SeqStep> b(1);
  b[0].kv = &kv;
  b[0].tokens = ids;
  const auto aux =
      model_->forward(cache, b, {.aux = true, .hidden = false, .aux_layers = {}}).aux.to_f32_vector();  // [T, 3, H]
  const auto hs = ref_->get("hidden_states").to_f32_vector();
  const int64_t idx[3] = {2, 4, 5};
  for (int64_t t = 0; t < T; ++t)
    for (int a = 0; a < 3; ++a) {
      const auto want = slice(hs, (idx[a] * T + t) * H, (idx[a] * T + t + 1) * H);
      expect_close(slice(aux, (t * 3 + a) * H, (t * 3 + a + 1) * H), want, "aux", tol(want));
    }
}

TEST_P(HfReference, GreedyContinuationMatchesTokenForToken) {
  GenRequest r;
  r.prompt = ids_of(ref_->get("greedy_prompt"));
  r.params.temperature = 0;
  r.params.max_new_tokens = 32;
  r.params.ignore_eos = true;
  Engine e(*model_);
  e.submit(r);
  const auto res = e.run();
  ASSERT_EQ(res.size(), 1u);
  EXPECT_EQ(res[0].tokens, ids_of(ref_->get("greedy_tokens")));
}

TEST_P(HfReference, BatchOfPromptsMatchesSeparateReferenceRuns) {
  const Tensor ids = ref_->get("batch_ids");
  const int64_t B = ids.size(0), T = ids.size(1), V = model_->config().vocab_size;
  KvCache cache(model_->kv_shape(), 16, 4);
  std::vector<SeqKv> kvs(B);
  std::vector<SeqStep> b(B);
  const auto all = ids_of(ids);
  for (int64_t s = 0; s < B; ++s) {
    ASSERT_TRUE(cache.reserve(kvs[s], T));
    b[s].kv = &kvs[s];
    b[s].tokens.assign(all.begin() + s * T, all.begin() + (s + 1) * T);
    b[s].logit_rows = {static_cast<int32_t>(T - 1)};
  }
  const auto got = model_->forward(cache, b).logits.to_f32_vector();
  const auto want_last = ref_->get("batch_last_logits").to_f32_vector();
  expect_close(got, want_last, "batch last logits", tol(want_last));
  (void)V;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfReference, ::testing::Values("llama", "qwen2", "qwen3"),
                         [](const auto& info) { return info.param; });

// ---- damaged checkpoints ------------------------------------------------------------------

class DamagedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("updraft_damaged_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const auto& e : fs::directory_iterator(fixture("llama")))
      fs::copy_file(e.path(), dir_ / e.path().filename());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string read(const std::string& f) {
    std::ifstream in(dir_ / f, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  void write(const std::string& f, const std::string& s) { std::ofstream(dir_ / f, std::ios::binary) << s; }
  void replace(const std::string& f, const std::string& from, const std::string& to) {
    std::string s = read(f);
    const size_t at = s.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    write(f, s.replace(at, from.size(), to));
  }
  void expect_error(const std::string& needle) {
    try {
      PolicyModel::load(dir_.string());
      ADD_FAILURE() << "loaded a damaged checkpoint (expected an error mentioning " << needle << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  fs::path dir_;
};

TEST_F(DamagedCheckpoint, IntactCopyLoads) {
  EXPECT_NO_THROW(PolicyModel::load(dir_.string()));
}

TEST_F(DamagedCheckpoint, UnsupportedArchitectureIsNamed) {
  replace("config.json", "LlamaForCausalLM", "MixtralForCausalLM");
  expect_error("MixtralForCausalLM");
}

TEST_F(DamagedCheckpoint, ConfigThatDisagreesWithTheTensorsNamesTheTensor) {
  replace("config.json", "\"intermediate_size\": 160", "\"intermediate_size\": 128");
  expect_error("model.layers.0.mlp.gate_proj.weight");
}

TEST_F(DamagedCheckpoint, TruncatedShardNamesTheFile) {
  const std::string s = read("model-00002-of-00002.safetensors");
  write("model-00002-of-00002.safetensors", s.substr(0, s.size() - 100));
  expect_error("model-00002-of-00002.safetensors");
}

TEST_F(DamagedCheckpoint, IndexMissingATensorIsReported) {
  replace("model.safetensors.index.json", "\"lm_head.weight\"", "\"lm_head.weight_gone\"");
  expect_error("lm_head.weight");
}

TEST_F(DamagedCheckpoint, MissingShardIsReported) {
  fs::remove(dir_ / "model-00001-of-00002.safetensors");
  expect_error("model-00001-of-00002.safetensors");
}

TEST_F(DamagedCheckpoint, UnsupportedRopeScalingIsNamed) {
  replace("config.json", "\"llama3\"", "\"yarn\"");
  expect_error("yarn");
}

}  // namespace
}  // namespace updraft
