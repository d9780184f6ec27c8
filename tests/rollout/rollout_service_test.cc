// The rollout service behind `updraft serve` (rollout/serve/rollout_service.h): greedy
// generation through the API equals plain decoding, bad requests are refused by reason with
// nothing generated, concurrent requests share engine steps, pause holds them, a request arriving
// mid-run starts before the running ones finish, abort and flush do their work, seeds behave, a
// request the KV cache cannot hold fails alone, and shutdown answers what is queued. Weight
// updates: weight_update_test.cc.
#include "rollout/serve/rollout_service.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "tests/rollout/service_fixture.h"

namespace updraft {
namespace {

using namespace testing_online;
using namespace testing_service;
using nlohmann::json;

TEST(RolloutService, GreedyGenerateOverHttpEqualsPlainDecoding) {
  Bed b;
  const auto ps = prompts(3, 11);
  Engine plain(*b.policy);
  for (const GenRequest& r : greedy_requests(ps, 12))
    plain.submit(r);
  auto want = plain.run();
  std::sort(want.begin(), want.end(), [](const GenResult& x, const GenResult& y) { return x.id < y.id; });

  http::ServerOptions ho;
  ho.port = 0;
  http::Server server(ho, [&](const http::Request& r) { return b.service->handle(r); });
  const auto [status, text] = http::request(server.port(), "POST", "/generate", greedy_body(ps, 12).dump());
  ASSERT_EQ(status, 200) << text;
  const json out = json::parse(text);
  ASSERT_TRUE(out.is_array());
  ASSERT_EQ(out.size(), 3u);
  int64_t rounds = 0;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i]["output_ids"].get<std::vector<int32_t>>(), want[i].tokens) << i;
    const json& meta = out[i]["meta_info"];
    EXPECT_EQ(meta["finish_reason"], json({{"type", "length"}, {"length", 12}}));
    EXPECT_EQ(meta["prompt_tokens"], 5);
    EXPECT_EQ(meta["completion_tokens"], 12);
    EXPECT_EQ(meta["weight_version"], "1");
    EXPECT_EQ(meta["policy_version"], 1);
    EXPECT_EQ(meta["drafter_version"], 1);
    ASSERT_EQ(meta["output_token_logprobs"].size(), 12u);
    for (size_t t = 0; t < 12; ++t) {
      EXPECT_EQ(meta["output_token_logprobs"][t][1], want[i].tokens[t]);
      EXPECT_NEAR(meta["output_token_logprobs"][t][0].get<double>(), want[i].logprobs[t], 1e-4);
    }
    rounds += meta["spec_verify_ct"].get<int64_t>();
  }
  EXPECT_GT(rounds, 0);  // speculated (nothing measured yet: full depth)
  // A single prompt answers an object, not a list.
  const auto [s1, one] = b.call(
      "POST", "/generate",
      {{"input_ids", ps[0]}, {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 12}, {"ignore_eos", true}}}});
  ASSERT_EQ(s1, 200) << one;
  ASSERT_TRUE(one.is_object());
  EXPECT_EQ(one["output_ids"].get<std::vector<int32_t>>(), want[0].tokens);
  EXPECT_FALSE(one["meta_info"].contains("output_token_logprobs"));
}

TEST(RolloutService, RefusesBadRequestsByReasonAndGeneratesNothing) {
  Bed b;
  const json ok_ids = json::array({1, 2, 3});
  struct Case {
    std::string method, path;
    json body;
    int status;
    std::string says;
  };
  const Case cases[] = {
      {"POST",
       "/generate",
       {{"input_ids", ok_ids}, {"sampling_params", {{"frequency_penalty", 2.5}, {"max_new_tokens", 4}}}},
       400,
       "frequency_penalty must be in [-2, 2] (got 2.5)"},
      {"POST", "/generate", {{"input_ids", {1, 100000}}}, 400, "outside the vocabulary"},
      {"POST", "/generate", {{"input_ids", {1, 2.5}}}, 400, "integer token ids"},
      {"POST", "/generate", {{"input_ids", ok_ids}, {"stream", 1}}, 400, "stream"},
      {"POST", "/generate", {{"text", "hello"}}, 400, "tokenizer"},
      {"POST", "/generate", {{"text", "a"}, {"input_ids", ok_ids}}, 400, "exactly one of input_ids and text"},
      {"POST", "/generate", {{"input_ids", ok_ids}, {"lora_path", "x"}}, 400, "body.lora_path is not supported"},
      {"POST",
       "/generate",
       {{"input_ids", {ok_ids, ok_ids}}, {"sampling_params", json::array({json::object()})}},
       400,
       "one entry per prompt"},
      {"POST", "/generate", {{"input_ids", ok_ids}, {"sampling_params", {{"top_k", -2}}}}, 400, "top_k"},
      {"POST",
       "/generate",
       {{"input_ids", ok_ids}, {"sampling_params", {{"temperature", "hot"}}}},
       400,
       "sampling_params.temperature must be a number (got \\\"hot\\\")"},
      {"POST",
       "/generate",
       {{"input_ids", ok_ids}, {"sampling_params", {{"max_new_tokens", uint64_t{1} << 63}}}},
       400,
       "max_new_tokens must be an integer in [1, 9223372036854775807] (got 9223372036854775808)"},
      {"POST",
       "/generate",
       {{"input_ids", ok_ids}, {"sampling_params", {{"max_new_tokens", 1.5}}}},
       400,
       "max_new_tokens must be an integer in [1, 9223372036854775807] (got 1.5)"},
      {"POST",
       "/generate",
       {{"input_ids", ok_ids}, {"sampling_params", {{"max_new_tokens", INT64_MAX}}}},
       400,
       "exceeds the model's context"},
      {"POST",
       "/generate",
       {{"input_ids", ok_ids}, {"sampling_params", {{"seed", 0.5}}}},
       400,
       "seed must be an integer"},
      {"POST", "/v1/completions", {{"prompt", ok_ids}, {"max_tokens", -3}}, 400, "body.max_tokens must be an integer"},
      {"POST",
       "/generate",
       {{"input_ids", ok_ids}, {"sampling_params", {{"max_new_tokens", 100000}}}},
       400,
       "exceeds the model's context"},
      {"POST", "/generate", json::array({1}), 400, "JSON object"},
      {"GET", "/generate", json(), 405, "use POST"},
      {"POST", "/health", json(), 405, "use GET"},
      {"GET", "/nope", json(), 404, "no route /nope"},
      {"POST", "/v1/completions", {{"prompt", ok_ids}, {"best_of", 2}}, 400, "body.best_of is not supported at 2"},
      {"POST", "/v1/completions", {{"prompt", ok_ids}, {"logprobs", 25}}, 400, "body.logprobs must be an integer"},
      {"POST", "/update_weights_from_disk", {{"is_draft_model", true}}, 400, "model_path is required"},
      {"POST", "/pause_generation", {{"mode", "later"}}, 400, "mode must be abort, in_place or retract"},
      {"POST", "/abort_request", json::object(), 400, "give a rid"},
      {"POST", "/generate", {{"input_ids", {ok_ids, ok_ids}}, {"rid", {"a"}}}, 400, "one string per prompt"},
  };
  for (const Case& c : cases) {
    const auto [status, out] = b.call(c.method, c.path, c.body);
    EXPECT_EQ(status, c.status) << c.path << " " << c.body.dump() << " -> " << out.dump();
    EXPECT_NE(out.dump().find(c.says), std::string::npos) << c.body.dump() << " -> " << out.dump();
    EXPECT_EQ(out.dump().find(".cc:"), std::string::npos) << "a source location in " << out.dump();
  }
  EXPECT_EQ(b.raw("POST", "/generate", "{not json").status, 400);
  EXPECT_EQ(b.service->stats().completions, 0);
  EXPECT_EQ(b.worker->metrics().steps, 0);
  EXPECT_EQ(b.worker->metrics().by_version.size(), 0u);
  // More prompts than may ever be in flight: 413 naming the limit, not a retry-inviting 503.
  Bed small(int64_t{64} << 20, 2);
  const auto [status, out] = small.call(
      "POST", "/generate", {{"input_ids", {ok_ids, ok_ids, ok_ids}}, {"sampling_params", {{"max_new_tokens", 4}}}});
  EXPECT_EQ(status, 413);
  EXPECT_NE(out.dump().find("max_inflight_prompts (2)"), std::string::npos) << out;
}

TEST(RolloutService, ConcurrentRequestsShareEngineStepsWhilePauseHoldsThem) {
  Bed b;
  EXPECT_EQ(b.call("POST", "/pause_generation", {{"mode", "in_place"}}).first, 200);
  const auto ps = prompts(3, 5);
  std::vector<std::thread> clients;
  std::vector<std::pair<int, json>> out(3);
  for (size_t i = 0; i < 3; ++i)
    clients.emplace_back([&, i] { out[i] = b.call("POST", "/generate", greedy_body({ps[i]}, 6)); });
  b.wait_inflight(3);
  EXPECT_EQ(b.worker->metrics().steps, 0);
  EXPECT_TRUE(b.service->stats().paused);
  EXPECT_EQ(b.call("POST", "/continue_generation").first, 200);
  for (auto& t : clients)
    t.join();
  for (const auto& [status, body] : out) {
    ASSERT_EQ(status, 200) << body;
    EXPECT_EQ(body[0]["meta_info"]["engine_step_first_token"], 0) << "all three prefilled in the first step";
  }
  EXPECT_EQ(b.service->stats().completions, 3);
}

// A request arriving while others run joins the engine at its next step and finishes first:
// continuous batching across requests, checked on step indices rather than wall time.
TEST(RolloutService, ARequestArrivingMidRunStartsBeforeTheRunningOnesFinish) {
  Bed b;
  const auto ps = prompts(3, 21);
  std::pair<int, json> longs;
  std::thread t([&] { longs = b.call("POST", "/generate", greedy_body({ps[0], ps[1]}, 60)); });
  for (int i = 0; i < 500 && b.worker->metrics().steps < 5; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const auto [s, quick] = b.call("POST", "/generate", greedy_body({ps[2]}, 3));
  t.join();
  ASSERT_EQ(s, 200) << quick;
  ASSERT_EQ(longs.first, 200) << longs.second;
  const json& q = quick[0]["meta_info"];
  EXPECT_GT(q["engine_step_submitted"].get<int64_t>(), 0) << "it arrived mid-run";
  EXPECT_LE(q["engine_step_admitted"].get<int64_t>(), q["engine_step_submitted"].get<int64_t>() + 1);
  for (const json& l : longs.second)
    EXPECT_LT(q["engine_step_finished"].get<int64_t>(), l["meta_info"]["engine_step_finished"].get<int64_t>());
}

// /abort_request ends a running request at the next step (answered with what it had, finish
// type abort) and frees its KV; /flush_cache refuses while requests are in flight, and works after.
TEST(RolloutService, AbortRequestAndFlushCacheDoRealWork) {
  Bed b;
  const auto ps = prompts(2, 4);
  json body = greedy_body({ps[0]}, 100);
  body["rid"] = "slow";
  std::pair<int, json> got;
  std::thread t([&] { got = b.call("POST", "/generate", body); });
  for (int i = 0; i < 500 && b.worker->metrics().steps < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const auto [fs, flushed] = b.call("POST", "/flush_cache");
  EXPECT_EQ(fs, 400) << flushed;
  EXPECT_NE(flushed["message"].get<std::string>().find("running"), std::string::npos) << flushed;
  const json load = b.call("GET", "/get_load").second;  // SGLang's shape: one entry per DP rank
  ASSERT_TRUE(load.is_array() && load.size() == 1) << load;
  EXPECT_EQ(load[0]["num_running_reqs"], 1) << load;
  EXPECT_GT(load[0]["num_tokens"], 0) << load;
  const auto [as, aborted] = b.call("POST", "/abort_request", {{"rid", "slow"}});
  EXPECT_EQ(as, 200);
  EXPECT_EQ(aborted["aborted"], 1);
  t.join();
  ASSERT_EQ(got.first, 200) << got.second;
  const json& meta = got.second[0]["meta_info"];
  EXPECT_EQ(meta["id"], "slow-0");  // a batch of one: rid-0 (aborted by its base rid)
  EXPECT_EQ(meta["finish_reason"]["type"], "abort");
  EXPECT_LT(got.second[0]["output_ids"].size(), 100u);
  EXPECT_EQ(b.call("POST", "/abort_request", {{"rid", "slow"}}).second["aborted"], 0) << "already answered";
  // A finished request is kept as a prefix donor: its blocks count as free (given back on demand).
  ASSERT_EQ(b.call("POST", "/generate", greedy_body({ps[1]}, 4)).first, 200);
  json kept;
  for (int i = 0; i < 500; ++i) {  // the load is published after the step that answered
    kept = b.call("GET", "/get_load").second;
    if (kept[0]["num_running_reqs"] == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(kept[0]["num_free_kv_blocks"], kept[0]["num_kv_blocks"]) << kept;
  const auto [fs2, ok] = b.call("GET", "/flush_cache");
  EXPECT_EQ(fs2, 200) << ok;
  const json idle = b.call("GET", "/get_load").second;
  EXPECT_EQ(idle[0]["num_free_kv_blocks"], idle[0]["num_kv_blocks"]);
  EXPECT_EQ(idle[0]["num_tokens"], 0);
}

TEST(RolloutService, UnseededSampledRequestsDifferAndSeededOnesRepeat) {
  Bed b;
  const json prompt = json::array({4, 8, 15, 16, 23});
  auto gen = [&](const json& sp) {
    const auto [status, out] = b.call("POST", "/generate", {{"input_ids", prompt}, {"sampling_params", sp}});
    EXPECT_EQ(status, 200) << out;
    return out["output_ids"].get<std::vector<int32_t>>();
  };
  const json unseeded = {{"temperature", 1}, {"max_new_tokens", 16}, {"ignore_eos", true}};
  EXPECT_NE(gen(unseeded), gen(unseeded));  // each batch's engine would repeat its default seeds
  json seeded = unseeded;
  seeded["sampling_seed"] = 7;
  EXPECT_EQ(gen(seeded), gen(seeded));
}

TEST(RolloutService, ARequestTheCacheCannotHoldFailsAlone) {
  // A KV cache of 3 blocks (48 positions): 5 + 4 tokens fit, 5 + 100 do not (context: 128).
  int64_t bytes = 1024;
  {
    Bed probe;
    while (KvCache::blocks_for_bytes(probe.policy->kv_shape(), 16, bytes) < 3)
      bytes += 1024;
  }
  Bed b(bytes);
  EXPECT_EQ(b.call("POST", "/pause_generation", {{"mode", "in_place"}}).first, 200);
  const auto ps = prompts(2, 9);
  std::pair<int, json> good, bad;
  std::thread t1([&] { good = b.call("POST", "/generate", greedy_body({ps[0]}, 4)); });
  b.wait_inflight(1);
  bad = b.call("POST", "/generate", greedy_body({ps[1]}, 100));
  EXPECT_EQ(b.call("POST", "/continue_generation").first, 200);
  t1.join();
  EXPECT_EQ(good.first, 200) << good.second;
  EXPECT_EQ(good.second[0]["output_ids"].size(), 4u);
  EXPECT_EQ(bad.first, 400) << bad.second;
  EXPECT_NE(bad.second.dump().find("KV blocks"), std::string::npos) << bad.second;
}

TEST(RolloutService, ShutdownAnswersQueuedRequestsWith503) {
  Bed b;
  EXPECT_EQ(b.call("POST", "/pause_generation", {{"mode", "in_place"}}).first, 200);
  int status = 0;
  std::thread t([&] { status = b.call("POST", "/generate", greedy_body({prompts(1, 2)[0]}, 4)).first; });
  b.wait_inflight(1);
  b.service->shutdown();
  t.join();
  EXPECT_EQ(status, 503);
  EXPECT_EQ(b.call("GET", "/health").first, 503);
  EXPECT_EQ(b.call("POST", "/generate", greedy_body({prompts(1, 2)[0]}, 4)).first, 503);
}

TEST(RolloutService, CompletionsAndInformationRoutes) {
  Bed b;
  auto [s, out] = b.call("POST", "/v1/completions",
                         {{"prompt", {json::array({1, 2, 3}), json::array({4, 5})}},
                          {"max_tokens", 5},
                          {"temperature", 0},
                          {"logprobs", 0}});
  ASSERT_EQ(s, 200) << out;
  EXPECT_EQ(out["object"], "text_completion");
  ASSERT_EQ(out["choices"].size(), 2u);
  EXPECT_EQ(out["choices"][1]["index"], 1);
  const size_t n1 = out["choices"][1]["token_ids"].size();
  EXPECT_GE(n1, 1u);
  EXPECT_LE(n1, 5u);
  EXPECT_EQ(out["choices"][1]["logprobs"]["token_logprobs"].size(), n1);
  EXPECT_EQ(out["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(out["usage"]["completion_tokens"], out["choices"][0]["token_ids"].size() + n1);
  EXPECT_EQ(out["updraft"]["drafter_version"], 1);
  const json usage = out["usage"];
  std::tie(s, out) = b.call("GET", "/get_server_info");
  EXPECT_EQ(s, 200);
  EXPECT_EQ(out["vocab_size"], b.policy->config().vocab_size);
  EXPECT_EQ(b.call("GET", "/v1/models").second["data"][0]["object"], "model");
  EXPECT_EQ(b.call("GET", "/get_model_info").second["is_generation"], true);
  EXPECT_EQ(b.call("POST", "/flush_cache").first, 200);
  // The dashboard: windows of serving steps (here one: the engine went idle after the request),
  // and its page.
  const json dash = b.call("GET", "/dashboard/data").second;
  ASSERT_GE(dash["windows"].size(), 1u) << dash;
  int64_t tokens = 0, completions = 0;
  for (const json& w : dash["windows"]) {
    EXPECT_EQ(w["policy_version"], 1);
    EXPECT_EQ(w["drafter_version"], 1);
    EXPECT_GT(w["tokens_per_second"].get<double>(), 0);
    tokens += w["tokens"].get<int64_t>();
    completions += w["completions"].get<int64_t>();
  }
  EXPECT_EQ(completions, 2);
  EXPECT_EQ(tokens, usage["completion_tokens"]);
  const http::Response page = b.raw("GET", "/dashboard");
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("fetch(\"/dashboard/data\""), std::string::npos);
  EXPECT_EQ(page.body.find("http://"), page.body.find("http://www.w3.org/2000/svg"));  // nothing external
  EXPECT_EQ(b.call("GET", "/health").second["status"], "ok");
}

// Peak resident memory of this process in bytes, and its reset (Linux: clear_refs 5).
int64_t peak_rss() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stoll(line.substr(6)) * 1024;
  return -1;
}

// A body small in bytes but huge in structure is refused (413) without parsing it into memory:
// 20 M empty lists in 60 MB took 4 GB of RSS before the structure limits (api::parse_body).
TEST(RolloutService, ABodyHugeInStructureIsRefusedWithinTheMemoryBound) {
  Bed b;
  std::string lists = "{\"input_ids\": [";
  for (int i = 0; i < 20'000'000; ++i)
    lists += i ? ",[]" : "[]";
  lists += "]}";
  const std::string deep = "{\"input_ids\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  std::ofstream("/proc/self/clear_refs") << "5";
  const int64_t before = peak_rss();
  for (const std::string* body : {static_cast<const std::string*>(&lists), &deep}) {
    const http::Response r = b.raw("POST", "/generate", *body);
    EXPECT_EQ(r.status, 413) << r.body;
    EXPECT_NE(r.body.find("too large in structure"), std::string::npos) << r.body;
  }
  const int64_t grew = peak_rss() - before;
  if (before > 0) {
    EXPECT_LT(grew, int64_t{256} << 20) << "parsing grew the peak RSS by " << (grew >> 20) << " MiB";
  }
  EXPECT_EQ(b.worker->metrics().steps, 0);
}

}  // namespace
}  // namespace updraft
