// POST /update_weights_from_disk (rollout/serve/rollout_service.h): published versions are
// validated (manifest, sha256, format, finite values) and hot-swapped, bad ones leave the serving
// version; plain directories as RL frameworks write them (a Hugging Face policy saved by
// transformers' save_pretrained, tools/make_policy_fixtures.py; a speculators drafter) serve as
// the next version or the weight_version given, with their files' digests reported; truncated or
// non-finite ones are refused with the old version serving.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kernels/io/sha256.h"
#include "rollout/serve/rollout_service.h"
#include "tests/rollout/service_fixture.h"

namespace updraft {
namespace {

namespace fs = std::filesystem;
using namespace testing_online;
using namespace testing_service;
using nlohmann::json;

TEST(RolloutService, UpdateWeightsFromDiskHotSwapsAndRefusesBadVersions) {
  Bed b;
  auto update = [&](const std::string& path, bool draft, json version = json()) {
    json body = {{"model_path", path}, {"is_draft_model", draft}};
    if (!version.is_null())
      body["weight_version"] = version;
    return b.call("POST", "/update_weights_from_disk", body);
  };
  const std::string d2 = b.publish_draft(2, 2);
  auto [s, out] = update(d2, true);
  ASSERT_EQ(s, 200) << out;
  EXPECT_EQ(out["success"], true);
  EXPECT_EQ(out["drafter_version"], 2);
  EXPECT_EQ(b.call("GET", "/get_weight_version").second["drafter_version"], 2);

  // Damaged: refused with the reason, v2 still serving.
  const std::string d3 = b.publish_draft(3, 3);
  {
    std::fstream f(d3 + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    f.put('\x7f');
  }
  std::tie(s, out) = update(d3, true);
  EXPECT_EQ(s, 400);
  EXPECT_EQ(out["success"], false);
  EXPECT_NE(out["message"].get<std::string>().find("sha256"), std::string::npos) << out;
  std::tie(s, out) = update(b.publish_draft(4, 4), true, "5");
  EXPECT_EQ(s, 400);
  EXPECT_NE(out["message"].get<std::string>().find("does not match"), std::string::npos) << out;
  std::tie(s, out) = update(d2, true);  // not newer
  EXPECT_EQ(s, 400);
  EXPECT_EQ(b.worker->drafter_version(), 2u);

  // A policy version while paused: applied at once (nothing running), labelled from then on.
  EXPECT_EQ(b.call("POST", "/pause_generation").first, 200);
  const WeightVersion p2 = publish_policy(make_policy(5), b.dir.str() + "/v", 2);
  std::tie(s, out) = update(p2.dir, false, 2);
  ASSERT_EQ(s, 200) << out;
  EXPECT_EQ(out["policy_version"], 2);
  EXPECT_EQ(b.call("POST", "/continue_generation").first, 200);
  std::tie(s, out) = b.call("POST", "/generate", greedy_body({prompts(1, 3)[0]}, 4));
  ASSERT_EQ(s, 200) << out;
  EXPECT_EQ(out[0]["meta_info"]["policy_version"], 2);
  EXPECT_EQ(out[0]["meta_info"]["drafter_version"], 2);
  EXPECT_EQ(out[0]["meta_info"]["weight_version"], "2");
  const std::string metrics = b.raw("GET", "/metrics").body;
  EXPECT_NE(metrics.find("updraft_worker_generated_tokens_total{policy_version=\"2\",drafter_version=\"2\"} 4"),
            std::string::npos)
      << metrics;
  // Damaged, mislabelled and stale: each offer the worker refused is counted.
  EXPECT_NE(metrics.find("updraft_worker_rejected_versions_total{kind=\"drafter\"} 3"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("updraft_worker_canary_steps_total "), std::string::npos) << metrics;
}

// Suffix drafts through the API: the second call for a prompt drafts from the first call's
// completions (history), output unchanged at temperature 0; accepted drafts by source in each
// result's meta_info, /metrics and the dashboard's windows.
TEST(RolloutService, SuffixDraftsAreAccountedBySource) {
  Bed b(int64_t{64} << 20, 4096, nullptr, {}, SuffixMode::kBoth);
  json body = greedy_body({{5, 9, 2, 7, 1, 3}}, 24);
  body["sampling_params"]["n"] = 2;
  const auto [s1, first] = b.call("POST", "/generate", body);
  ASSERT_EQ(s1, 200) << first;
  const auto [s2, second] = b.call("POST", "/generate", body);
  ASSERT_EQ(s2, 200) << second;
  int64_t history = 0;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(second[i]["output_ids"], first[i]["output_ids"]);
    const json& by = second[i]["meta_info"]["spec_accepted_by_source"];
    history += by["history"].get<int64_t>();
    const int64_t sum = by["eagle"].get<int64_t>() + by["group"].get<int64_t>() + by["history"].get<int64_t>();
    const json& meta = second[i]["meta_info"];
    EXPECT_NEAR(static_cast<double>(sum),
                (meta["spec_accept_length"].get<double>() - 1) * meta["spec_verify_ct"].get<double>(), 1e-6)
        << "the sources' accepted drafts do not add up to the result's";
  }
  EXPECT_GT(history, 10) << "the repeated prompt drew little from the history: " << second;
  const std::string metrics = b.raw("GET", "/metrics").body;
  EXPECT_NE(metrics.find("updraft_worker_accepted_tokens_by_source_total{policy_version=\"1\",drafter_version=\"1\","
                         "source=\"history\"}"),
            std::string::npos)
      << metrics;
  EXPECT_EQ(metrics.find("updraft_suffix_gate_on"), std::string::npos) << "no gate, no gate metrics";
  EXPECT_NE(metrics.find("updraft_draft_draws "), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("updraft_draft_acceptance{draft=\"top\"} "), std::string::npos) << metrics;
  // Prefix reuse: the second call's two siblings took all but the last of their 6 prompt tokens
  // from the first call's kept requests (the first call's siblings, admitted together with a
  // prompt too short to wait for, prefilled theirs).
  EXPECT_NE(metrics.find("updraft_worker_prefill_tokens_total 14\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("updraft_worker_cached_prompt_tokens_total 10\n"), std::string::npos) << metrics;
  // With the gate, its state per live-batch bucket.
  Bed g(int64_t{64} << 20, 4096, nullptr, {}, SuffixMode::kBoth, true);
  ASSERT_EQ(g.call("POST", "/generate", body).first, 200);
  const std::string gm = g.raw("GET", "/metrics").body;
  EXPECT_NE(gm.find("updraft_suffix_gate_on{batch=\"1\"} "), std::string::npos) << gm;
  EXPECT_NE(gm.find("updraft_suffix_gate_tokens_per_second{batch=\"1\",suffix=\"on\"}"), std::string::npos) << gm;
}

// Writes a NaN over the first element of `tensor` in a safetensors file (f32, bf16 or f16).
void poison(const std::string& file, const std::string& tensor) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  const json t = json::parse(header).at(tensor);
  f.seekp(static_cast<std::streamoff>(8 + n + t["data_offsets"][0].get<uint64_t>()));
  const std::string dtype = t["dtype"];
  const std::string nan = dtype == "F32" ? std::string("\x00\x00\xc0\x7f", 4)
                          : dtype == "BF16" ? std::string("\xc0\x7f", 2)
                                            : std::string("\x00\x7e", 2);
  f.write(nan.data(), static_cast<std::streamsize>(nan.size()));
  ASSERT_TRUE(f.good()) << file;
}

// A version in a valid format whose weights hold a NaN is refused by name (a drafter or a
// policy alike), with the old version serving.
TEST(RolloutService, UpdateWeightsFromDiskRefusesNonFiniteWeights) {
  Bed b;
  const DraftModel d = fresh_draft(*b.policy, 2);
  const WeightVersion d2 = publish_version(b.dir.str() + "/v", "drafter", 2, [&](const std::string& dir) {
    d.save(dir);
    poison(dir + "/model.safetensors", "fc.weight");
  });
  auto [s, out] = b.call("POST", "/update_weights_from_disk", {{"model_path", d2.dir}, {"is_draft_model", true}});
  EXPECT_EQ(s, 400) << out;
  EXPECT_NE(out["message"].get<std::string>().find("fc.weight holds a non-finite value"), std::string::npos) << out;
  EXPECT_EQ(b.worker->drafter_version(), 1u);
  train::TrainableLlama m = make_policy(5);
  const WeightVersion p2 = publish_version(b.dir.str() + "/v", "policy", 2, [&](const std::string& dir) {
    m.save_hf(dir, DType::F32);
    poison(dir + "/model.safetensors", "model.norm.weight");
  });
  std::tie(s, out) = b.call("POST", "/update_weights_from_disk", {{"model_path", p2.dir}});
  EXPECT_EQ(s, 400) << out;
  EXPECT_NE(out["message"].get<std::string>().find("model.norm.weight holds a non-finite value"), std::string::npos)
      << out;
  EXPECT_EQ(b.worker->policy_version(), 1u);
  EXPECT_EQ(b.call("POST", "/generate", greedy_body({prompts(1, 3)[0]}, 4)).first, 200) << "v1 still serves";
}

// A service over the transformers-written fixture policy and its speculators drafter.
struct HfBed {
  TempDir dir{"hf_update"};
  std::string policy_dir = std::string(UPDRAFT_SOURCE_DIR) + "/tests/fixtures/policy/llama";
  std::string draft_dir = std::string(UPDRAFT_SOURCE_DIR) + "/tests/fixtures/drafter/spec_default";
  std::shared_ptr<const PolicyModel> policy = std::make_shared<const PolicyModel>(PolicyModel::load(policy_dir));
  std::unique_ptr<Worker> worker;
  std::unique_ptr<RolloutService> service;
  HfBed() {
    WorkerOptions o;
    o.engine.spec = SpecSettings{3, 1, 4};
    o.engine.kv_cache_bytes = int64_t{16} << 20;
    auto d = std::make_shared<const DraftModel>(DraftModel::load(draft_dir, policy->draft_target()));
    worker = std::make_unique<Worker>(o, policy, 1, d, 1, nullptr);
    service = std::make_unique<RolloutService>(RolloutServiceOptions{}, *worker, policy->config(), nullptr, nullptr);
  }
  std::pair<int, json> call(const std::string& path, const json& body) {
    http::Request r;
    r.method = "POST";
    r.path = path;
    r.body = body.dump();
    const http::Response resp = service->handle(r);
    return {resp.status, json::parse(resp.body)};
  }
  std::string copy(const std::string& from, const std::string& name) {  // a checkpoint as a trainer saved it
    const std::string to = dir.str() + "/" + name;
    fs::copy(from, to, fs::copy_options::recursive);
    return to;
  }
  std::vector<int32_t> greedy() {
    const auto [s, out] = call("/generate", greedy_body({{5, 9, 2, 7}}, 8));
    EXPECT_EQ(s, 200) << out;
    return out[0]["output_ids"].get<std::vector<int32_t>>();
  }
};

TEST(UpdateWeights, PlainHuggingFaceAndSpeculatorsDirectoriesServeAsTheNextVersion) {
  HfBed b;
  const std::vector<int32_t> before = b.greedy();
  const std::string step100 = b.copy(b.policy_dir, "global_step_100");
  auto [s, out] = b.call("/update_weights_from_disk", {{"model_path", step100}});
  ASSERT_EQ(s, 200) << out;
  EXPECT_EQ(out["policy_version"], 2);
  EXPECT_EQ(out["weight_version"], "2");
  EXPECT_EQ(out["sha256"]["config.json"], sha256_file_hex(step100 + "/config.json"));
  EXPECT_EQ(out["sha256"]["model-00002-of-00002.safetensors"].get<std::string>().size(), 64u);
  EXPECT_EQ(b.greedy(), before) << "the same weights as v2 decode the same tokens";

  // An explicit weight_version (a number, or a string of digits as SGLang sends it).
  std::tie(s, out) = b.call("/update_weights_from_disk", {{"model_path", step100}, {"weight_version", "7"}});
  ASSERT_EQ(s, 200) << out;
  EXPECT_EQ(out["policy_version"], 7);
  std::tie(s, out) = b.call("/update_weights_from_disk", {{"model_path", step100}, {"weight_version", 5}});
  EXPECT_EQ(s, 400) << out;
  EXPECT_NE(out["message"].get<std::string>().find("not newer"), std::string::npos) << out;
  std::tie(s, out) = b.call("/update_weights_from_disk", {{"model_path", step100}, {"weight_version", "step_200"}});
  EXPECT_EQ(s, 400) << out;
  EXPECT_NE(out["error"]["message"].get<std::string>().find("weight_version \"step_200\" is not supported"),
            std::string::npos)
      << out;

  // A drafter in the speculators format, as a plain directory.
  const std::string draft = b.copy(b.draft_dir, "drafter_step_100");
  std::tie(s, out) = b.call("/update_weights_from_disk", {{"model_path", draft}, {"is_draft_model", true}});
  ASSERT_EQ(s, 200) << out;
  EXPECT_EQ(out["drafter_version"], 2);
  EXPECT_EQ(b.worker->drafter_version(), 2u);
  EXPECT_EQ(b.greedy(), before) << "speculation with the new drafter is lossless";
}

TEST(UpdateWeights, TruncatedOrNonFinitePlainDirectoriesAreRefusedWithTheOldVersionServing) {
  HfBed b;
  const std::string cut = b.copy(b.policy_dir, "truncated");
  const std::string shard = cut + "/model-00002-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 100);
  auto [s, out] = b.call("/update_weights_from_disk", {{"model_path", cut}});
  EXPECT_EQ(s, 400) << out;
  EXPECT_EQ(out["success"], false);
  EXPECT_EQ(b.worker->policy_version(), 1u);

  const std::string nan = b.copy(b.policy_dir, "nan");
  poison(nan + "/model-00002-of-00002.safetensors", "lm_head.weight");
  std::tie(s, out) = b.call("/update_weights_from_disk", {{"model_path", nan}});
  EXPECT_EQ(s, 400) << out;
  EXPECT_NE(out["message"].get<std::string>().find("lm_head.weight holds a non-finite value"), std::string::npos)
      << out;
  const std::string draft = b.copy(b.draft_dir, "nan_drafter");
  poison(draft + "/model.safetensors", "fc.weight");
  std::tie(s, out) = b.call("/update_weights_from_disk", {{"model_path", draft}, {"is_draft_model", true}});
  EXPECT_EQ(s, 400) << out;
  EXPECT_NE(out["message"].get<std::string>().find("non-finite"), std::string::npos) << out;
  std::tie(s, out) = b.call("/update_weights_from_disk", {{"model_path", b.dir.str() + "/missing"}});
  EXPECT_EQ(s, 400) << out;
  EXPECT_EQ(b.worker->policy_version(), 1u);
  EXPECT_EQ(b.worker->drafter_version(), 1u);
  EXPECT_EQ(b.greedy().size(), 8u) << "v1 still serves";
}

}  // namespace
}  // namespace updraft
