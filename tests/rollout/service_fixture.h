// A rollout service over a worker on the tiny test policy with a fresh drafter, driven through
// handle() (tests of rollout/serve/).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rollout/serve/rollout_service.h"
#include "tests/trainer/online_fixture.h"

namespace updraft::testing_service {

using namespace testing_online;
using nlohmann::json;

struct Bed {
  TempDir dir{"serve"};
  train::TrainableLlama m = make_policy(4);
  WeightVersion p1 = publish_policy(m, dir.str() + "/v", 1);
  std::shared_ptr<const PolicyModel> policy = std::make_shared<const PolicyModel>(PolicyModel::load(p1.dir));
  std::unique_ptr<Worker> worker;
  std::unique_ptr<RolloutService> service;

  std::shared_ptr<std::atomic<RolloutService*>> dashboard = std::make_shared<std::atomic<RolloutService*>>(nullptr);

  explicit Bed(int64_t kv_cache_bytes = int64_t{64} << 20, int64_t max_inflight = 4096,
               std::shared_ptr<const Tokenizer> tokenizer = nullptr, ChatSetup chat = {},
               SuffixMode suffix = SuffixMode::kOff, bool suffix_gate = false) {
    WorkerOptions o;
    o.engine.spec = SpecSettings{3, 1, 4};
    o.engine.suffix.mode = suffix;
    o.engine.suffix.gate = suffix_gate;  // default: every step grafts (the gate's choices depend on timing)
    o.engine.kv_cache_bytes = kv_cache_bytes;
    o.on_window = [d = dashboard](const WindowReport& w) {
      if (RolloutService* s = d->load())
        s->record_window(w);
    };
    worker =
        std::make_unique<Worker>(o, policy, 1, std::make_shared<const DraftModel>(fresh_draft(*policy, 1)), 1, nullptr);
    RolloutServiceOptions so;
    so.max_inflight_prompts = max_inflight;
    so.chat = std::move(chat);
    service = std::make_unique<RolloutService>(so, *worker, policy->config(), std::move(tokenizer), nullptr);
    *dashboard = service.get();
  }
  ~Bed() {
    *dashboard = nullptr;
    service.reset();
  }
  http::Response raw(const std::string& method, const std::string& path, const std::string& body = "") {
    http::Request r;
    r.method = method;
    r.path = path;
    r.body = body;
    return service->handle(r);
  }
  std::pair<int, json> call(const std::string& method, const std::string& path, const json& body = json()) {
    const http::Response resp = raw(method, path, body.is_null() ? "" : body.dump());
    const json j = json::parse(resp.body, nullptr, false);
    return {resp.status, j.is_discarded() ? json(resp.body) : j};
  }
  std::string publish_draft(uint64_t v, uint64_t seed) {
    const DraftModel d = fresh_draft(*policy, seed);
    return publish_version(dir.str() + "/v", "drafter", v, [&](const std::string& x) { d.save(x); }).dir;
  }
  // Waits until `n` prompts are in flight (requests sent from other threads).
  void wait_inflight(int64_t n) {
    for (int i = 0; i < 500 && service->stats().inflight_prompts < n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_EQ(service->stats().inflight_prompts, n);
  }
};

// The byte-level BPE tokenizer fixture (500 ids; UPDRAFT_SOURCE_DIR is the test target's).
inline std::shared_ptr<const Tokenizer> fixture_tokenizer() {
  return std::make_shared<const Tokenizer>(
      Tokenizer::load(std::string(UPDRAFT_SOURCE_DIR) + "/tests/fixtures/tokenizer/hf_bytelevel.json"));
}

inline json greedy_body(const std::vector<std::vector<int32_t>>& ps, int64_t max_new) {
  return {{"input_ids", ps},
          {"sampling_params", {{"temperature", 0}, {"max_new_tokens", max_new}, {"ignore_eos", true}}},
          {"return_logprob", true}};
}

}  // namespace updraft::testing_service
