// The fields of SGLang's /generate and OpenAI's completions that updraft does not implement
// (rollout/serve/api_parse.h): at their neutral values (what SGLang's router and RL frameworks
// send) they are accepted and the tokens are plain decoding's; at any other value the request is
// refused by name with nothing generated. Errors have OpenAI's shape; the text of a completion
// trims a matched stop token unless no_stop_trim; /health_generate, /server_info, /model_info.
#include <gtest/gtest.h>

#include "rollout/tokenizer.h"
#include "tests/fixture_util.h"
#include "tests/rollout/service_fixture.h"

namespace updraft {
namespace {

using namespace testing_online;
using namespace testing_service;
using nlohmann::json;

std::vector<GenResult> plain_greedy(const PolicyModel& policy, const std::vector<std::vector<int32_t>>& ps,
                                    int64_t max_new) {
  Engine plain(policy);
  for (const GenRequest& r : greedy_requests(ps, max_new))
    plain.submit(r);
  auto out = plain.run();
  std::sort(out.begin(), out.end(), [](const GenResult& x, const GenResult& y) { return x.id < y.id; });
  return out;
}

// A body shaped like those sglang-router forwards and slime-style frameworks send (written from
// their field lists, not captured from them), every unimplemented field at its neutral value.
json neutral_body(const std::vector<std::vector<int32_t>>& ps) {
  const json sp = {{"temperature", 0},
                   {"top_p", nullptr},
                   {"top_k", nullptr},
                   {"max_new_tokens", 8},
                   {"stop", nullptr},
                   {"stop_token_ids", nullptr},
                   {"n", 1},
                   {"min_new_tokens", 0},
                   {"repetition_penalty", 1.0},
                   {"frequency_penalty", 0},
                   {"presence_penalty", 0.0},
                   {"min_p", 0},
                   {"ignore_eos", true},
                   {"skip_special_tokens", true},
                   {"spaces_between_special_tokens", true},
                   {"no_stop_trim", false},
                   {"json_schema", nullptr},
                   {"regex", nullptr},
                   {"logit_bias", json::object()},
                   {"stream_interval", 1},
                   {"custom_params", nullptr},
                   {"stop_regex", json::array()}};
  return {{"input_ids", ps},
          {"sampling_params", sp},
          {"rid", {"a", "b"}},
          {"model", nullptr},
          {"stream", false},
          {"return_text_in_logprobs", false},
          {"log_metrics", true},
          {"return_hidden_states", false},
          {"background", false},
          {"no_logs", false},
          {"return_bytes", false},
          {"return_entropy", false},
          {"return_logprob", {true, false}},
          {"logprob_start_len", -1},
          {"top_logprobs_num", 0},
          {"image_data", {nullptr, nullptr}},
          {"lora_path", nullptr},
          {"custom_labels", {{"team", "rl"}}},
          {"session_params", nullptr},
          {"priority", nullptr}};
}

TEST(ApiFields, NeutralValuesOfRouterAndFrameworkPayloadsGenerateAsPlainDecoding) {
  Bed b;
  const auto ps = prompts(2, 7);
  const auto want = plain_greedy(*b.policy, ps, 8);
  const auto [s, out] = b.call("POST", "/generate", neutral_body(ps));
  ASSERT_EQ(s, 200) << out;
  ASSERT_EQ(out.size(), 2u);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(out[i]["output_ids"].get<std::vector<int32_t>>(), want[i].tokens) << i;
  EXPECT_EQ(out[0]["meta_info"]["id"], "a");
  EXPECT_EQ(out[1]["meta_info"]["id"], "b");
  ASSERT_TRUE(out[0]["meta_info"].contains("output_token_logprobs"));  // return_logprob per prompt
  EXPECT_EQ(out[0]["meta_info"]["output_token_logprobs"].size(), 8u);
  EXPECT_FALSE(out[1]["meta_info"].contains("output_token_logprobs"));
  // Per-prompt sampling_params with "" and [] stops; OpenAI completions with its neutral fields.
  json body = {{"input_ids", ps},
               {"sampling_params",
                {{{"temperature", 0}, {"max_new_tokens", 8}, {"ignore_eos", true}, {"stop", ""}},
                 {{"temperature", 0}, {"max_new_tokens", 8}, {"ignore_eos", true}, {"stop", json::array()}}}}};
  const auto [s2, out2] = b.call("POST", "/generate", body);
  ASSERT_EQ(s2, 200) << out2;
  EXPECT_EQ(out2[1]["output_ids"].get<std::vector<int32_t>>(), want[1].tokens);
  const auto [s3, out3] = b.call("POST", "/v1/completions",
                                 {{"prompt", ps[0]},
                                  {"max_tokens", 8},
                                  {"temperature", 0},
                                  {"top_p", nullptr},
                                  {"n", 1},
                                  {"best_of", nullptr},
                                  {"stream", false},
                                  {"stream_options", nullptr},
                                  {"echo", false},
                                  {"suffix", nullptr},
                                  {"stop", nullptr},
                                  {"presence_penalty", 0},
                                  {"frequency_penalty", 0.0},
                                  {"logit_bias", nullptr},
                                  {"user", "u1"},
                                  {"model", "anything"},
                                  {"logprobs", nullptr},
                                  {"seed", nullptr}});
  ASSERT_EQ(s3, 200) << out3;
  const auto ids = out3["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids, std::vector<int32_t>(want[0].tokens.begin(), want[0].tokens.begin() + ids.size()));
}

TEST(ApiFields, OtherValuesAreRefusedByNameWithNothingGenerated) {
  Bed b;
  const json ids = json::array({1, 2, 3});
  auto gen = [&](json extra, json sp = json::object()) {
    json body = {{"input_ids", ids}, {"sampling_params", sp.is_null() ? json::object() : sp}};
    if (!extra.is_null())
      body.update(extra);
    return body;
  };
  const std::vector<std::pair<json, std::string>> generate_cases = {
      {gen({}, {{"n", 65}}), "sampling_params.n must be an integer in [1, 64] (got 65)"},
      {gen({}, {{"stop_regex", "a+"}}), "sampling_params.stop_regex is not supported"},
      {gen({}, {{"logit_bias", {{"5", 1}}}}), "sampling_params.logit_bias is not supported"},
      {gen({}, {{"json_schema", "{}"}}), "sampling_params.json_schema is not supported"},
      {gen({}, {{"frobnicate", 1}}), "sampling_params.frobnicate is not supported (refused rather than ignored)"},
      {gen({{"return_hidden_states", true}}), "body.return_hidden_states is not supported at true"},
      {gen({{"image_data", {"x"}}}), "body.image_data is not supported"},
      {gen({{"top_logprobs_num", 2}}), "top_logprobs_num needs return_logprob"},
      {gen({{"logprob_start_len", 0}}), "logprob_start_len needs return_logprob"},
      {gen({{"priority", 1}}), "body.priority is not supported"},
      {gen({{"stream", "yes"}}), "stream"},
      {gen({{"frobnicate", nullptr}}), "body.frobnicate is not supported (refused rather than ignored)"},
      {gen({{"return_logprob", {true, false}}}), "one bool per prompt (1)"},
      {gen({{"return_text_in_logprobs", true}}), "tokenizer"},
  };
  for (const auto& [body, says] : generate_cases) {
    const auto [status, out] = b.call("POST", "/generate", body);
    EXPECT_EQ(status, 400) << body.dump();
    EXPECT_NE(out["error"]["message"].get<std::string>().find(says), std::string::npos) << body.dump() << " -> " << out;
  }
  const std::vector<std::pair<json, std::string>> completions_cases = {
      {{{"n", 0}}, "body.n must be an integer in [1, 64] (got 0)"},
      {{{"stream", true}, {"logprobs", 0}}, "logprobs are not streamed"},
      {{{"stream_options", {{"include_usage", true}}}}, "stream_options needs stream: true"},
      {{{"echo", true}}, "body.echo is not supported"},
      {{{"best_of", 3}}, "body.best_of is not supported"},
      {{{"suffix", "x"}}, "body.suffix is not supported"},
      {{{"logprobs", 21}}, "body.logprobs must be an integer in [0, 20] (got 21)"},
  };
  for (const auto& [extra, says] : completions_cases) {
    json body = {{"prompt", ids}};
    body.update(extra);
    const auto [status, out] = b.call("POST", "/v1/completions", body);
    EXPECT_EQ(status, 400) << body.dump();
    EXPECT_NE(out["error"]["message"].get<std::string>().find(says), std::string::npos) << body.dump() << " -> " << out;
  }
  EXPECT_EQ(b.service->stats().completions, 0);
  EXPECT_EQ(b.worker->metrics().steps, 0);
}

TEST(ApiFields, ErrorsHaveOpenAisShape) {
  Bed b;
  const auto [s, out] = b.call("POST", "/generate", {{"input_ids", {1, 2}}, {"sampling_params", {{"n", 300}}}});
  EXPECT_EQ(s, 400);
  EXPECT_EQ(out["error"]["type"], "invalid_request_error") << out;
  EXPECT_EQ(out["error"]["code"], 400);
  EXPECT_NE(out["error"]["message"].get<std::string>().find("sampling_params.n"), std::string::npos);
  const auto [s404, nf] = b.call("GET", "/nope");
  EXPECT_EQ(s404, 404);
  EXPECT_EQ(nf["error"]["type"], "not_found_error") << nf;
  EXPECT_EQ(nf["error"]["message"], "no route /nope");
}

TEST(ApiFields, TextTrimsTheMatchedStopTokenUnlessNoStopTrimAndLogprobsCarryTokenText) {
  auto tok = std::make_shared<const Tokenizer>(
      Tokenizer::load(fixture_util::source_path("tests/fixtures/tokenizer/hf_bytelevel.json")));
  Bed b(int64_t{64} << 20, 4096, tok);
  const auto ps = prompts(1, 6);
  const std::vector<int32_t> want = plain_greedy(*b.policy, ps, 8)[0].tokens;
  const int32_t stop = want[2];
  const size_t k = std::find(want.begin(), want.end(), stop) - want.begin();  // first occurrence
  const std::vector<int32_t> upto(want.begin(), want.begin() + k + 1);
  for (const bool no_trim : {false, true}) {
    const json body = {{"input_ids", ps[0]},
                       {"return_logprob", true},
                       {"return_text_in_logprobs", true},
                       {"sampling_params",
                        {{"temperature", 0},
                         {"max_new_tokens", 8},
                         {"stop_token_ids", {stop}},
                         {"no_stop_trim", no_trim},
                         {"skip_special_tokens", false}}}};
    const auto [s, out] = b.call("POST", "/generate", body);
    ASSERT_EQ(s, 200) << out;
    ASSERT_EQ(out["output_ids"].get<std::vector<int32_t>>(), upto);  // ids keep the stop token
    EXPECT_EQ(out["meta_info"]["finish_reason"]["matched"], stop);
    const std::vector<int32_t> shown(upto.begin(), upto.end() - (no_trim ? 0 : 1));
    EXPECT_EQ(out["text"], tok->decode(shown, false)) << "no_stop_trim " << no_trim;
    const json& lp = out["meta_info"]["output_token_logprobs"];
    ASSERT_EQ(lp.size(), upto.size());
    for (size_t t = 0; t < upto.size(); ++t)
      EXPECT_EQ(lp[t][2], tok->decode({upto[t]}, false)) << t;
  }
  const auto [ts, text] = b.call("POST", "/generate", {{"text", "!#"},
                                                          {"input_ids", nullptr},
                                                          {"rid", nullptr},
                                                          {"sampling_params", {{"max_new_tokens", 4}}}});
  EXPECT_EQ(ts, 200) << "a null input_ids is absent: " << text;
}

TEST(ApiFields, HealthGenerateAndSglangInformationRoutes) {
  Bed b;
  auto [s, out] = b.call("GET", "/health_generate");
  EXPECT_EQ(s, 200) << out;
  EXPECT_EQ(out["status"], "ok");
  EXPECT_EQ(b.worker->metrics().steps, 1);  // it really generated
  for (const auto& [v, cell] : b.worker->metrics().by_version)
    EXPECT_EQ(cell.completions, 0) << "the server's own request is not a serving completion";
  EXPECT_EQ(b.call("POST", "/health_generate").first, 405);
  EXPECT_EQ(b.call("POST", "/pause_generation", {{"mode", "in_place"}}).first, 200);
  std::tie(s, out) = b.call("GET", "/health_generate");
  EXPECT_EQ(s, 503);
  EXPECT_EQ(out["error"]["message"], "generation is paused");
  EXPECT_EQ(b.call("POST", "/continue_generation").first, 200);
  EXPECT_EQ(b.call("GET", "/server_info").second["vocab_size"], b.policy->config().vocab_size);
  EXPECT_EQ(b.call("GET", "/model_info").second, b.call("GET", "/get_model_info").second);
}

// /abort_request matches a rid exactly: a prompt's own rid, or the string rid its batch was sent
// with; "" (SGLang's default) and prefixes name nothing. Null bool and string fields of the
// control routes mean their defaults.
TEST(ApiFields, AbortRequestMatchesRidsExactlyAndNullFieldsAreDefaults) {
  Bed b;
  const auto ps = prompts(3, 4);
  ASSERT_EQ(b.call("POST", "/pause_generation", {{"mode", "in_place"}}).first, 200);  // nothing finishes meanwhile
  json batch = greedy_body({ps[0], ps[1]}, 30);
  batch["rid"] = "job";  // prompts job-0 and job-1
  json other = greedy_body({ps[2]}, 30);
  other["input_ids"] = ps[2];  // one prompt, not a batch: its rid is job-7 itself
  other["rid"] = "job-7";
  std::pair<int, json> got_batch, got_other;
  std::thread t1([&] { got_batch = b.call("POST", "/generate", batch); });
  std::thread t2([&] { got_other = b.call("POST", "/generate", other); });
  b.wait_inflight(3);
  auto aborted = [&](const json& body) {
    const auto [s, out] = b.call("POST", "/abort_request", body);
    EXPECT_EQ(s, 200) << out;
    return out.value("aborted", int64_t{-1});
  };
  EXPECT_EQ(aborted({{"rid", ""}}), 0) << "SGLang's default rid names nothing";
  EXPECT_EQ(aborted({{"rid", "jo"}}), 0) << "no prefix matching";
  EXPECT_EQ(aborted({{"rid", "job"}, {"abort_all", nullptr}}), 2) << "the batch, not job-7";
  ASSERT_EQ(b.call("POST", "/continue_generation").first, 200);
  t1.join();
  t2.join();
  ASSERT_EQ(got_batch.first, 200) << got_batch.second;
  for (const json& r : got_batch.second)
    EXPECT_EQ(r["meta_info"]["finish_reason"]["type"], "abort") << r;
  ASSERT_EQ(got_other.first, 200) << got_other.second;
  EXPECT_EQ(got_other.second["meta_info"]["id"], "job-7");
  EXPECT_EQ(got_other.second["output_ids"].size(), 30u) << "job-7 ran to its length";
  EXPECT_EQ(aborted({{"rid", "job-0"}}), 0) << "answered: nothing left under the rid";
  EXPECT_EQ(b.call("POST", "/pause_generation", {{"mode", nullptr}}).first, 200);  // null: abort, the default
  EXPECT_EQ(b.call("POST", "/continue_generation").first, 200);
  const std::string v2 = b.publish_draft(2, 5);
  const auto [us, up] = b.call("POST", "/update_weights_from_disk",
                               {{"model_path", v2},
                                {"is_draft_model", true},
                                {"abort_all_requests", nullptr},
                                {"weight_version", nullptr},
                                {"load_format", nullptr}});
  EXPECT_EQ(us, 200) << up;
  EXPECT_EQ(b.worker->drafter_version(), 2u);
}

// n completions per prompt: grouped by prompt in SGLang's order, sibling j drawing from seed + j
// (so each equals a single request with that seed), rids suffixed -j; OpenAI's choices i * n + j.
TEST(ApiFields, NCompletionsPerPromptAreGroupedWithSeedStreamsOfTheirOwn) {
  Bed b;
  auto ps = prompts(2, 9);
  for (auto& p : ps)  // 20 tokens: siblings wait for the first one's prefill (Scheduler::kFollowShare)
    for (int i = 0; i < 15; ++i)
      p.push_back(1 + (p[static_cast<size_t>(i)] * 7 + i) % 96);
  auto sampled = [&](const json& prompt_ids, int64_t n, uint64_t seed, json rid = json()) {
    json body = {{"input_ids", prompt_ids},
                 {"sampling_params", {{"temperature", 1}, {"max_new_tokens", 8}, {"ignore_eos", true},
                                      {"sampling_seed", seed}, {"n", n}}}};
    if (!rid.is_null())
      body["rid"] = rid;
    const auto [s, out] = b.call("POST", "/generate", body);
    EXPECT_EQ(s, 200) << out;
    return out;
  };
  const json three = sampled(ps[0], 3, 7, "g");
  ASSERT_TRUE(three.is_array() && three.size() == 3) << three;
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(three[j]["output_ids"], sampled(ps[0], 1, 7 + j)["output_ids"]) << "sibling " << j;
    EXPECT_EQ(three[j]["meta_info"]["id"], "g-" + std::to_string(j));
  }
  EXPECT_NE(three[0]["output_ids"], three[1]["output_ids"]) << "siblings should differ";
  // Prefix reuse: the first sibling prefilled the prompt, the others took all but its last token.
  EXPECT_EQ(three[0]["meta_info"]["cached_tokens"], 0);
  EXPECT_EQ(three[1]["meta_info"]["cached_tokens"], ps[0].size() - 1);
  EXPECT_EQ(three[2]["meta_info"]["cached_tokens"], ps[0].size() - 1);
  const json grouped = sampled(ps, 2, 11);
  ASSERT_EQ(grouped.size(), 4u);
  for (size_t k = 0; k < 4; ++k)
    EXPECT_EQ(grouped[k]["meta_info"]["prompt_tokens"], ps[k / 2].size()) << k;
  EXPECT_EQ(grouped[2]["output_ids"], sampled(ps[1], 1, 11)["output_ids"]);

  const auto [s, out] = b.call("POST", "/v1/completions", {{"prompt", ps[0]}, {"n", 2}, {"seed", 5}, {"max_tokens", 8}});
  ASSERT_EQ(s, 200) << out;
  ASSERT_EQ(out["choices"].size(), 2u);
  // Usage as OpenAI and vLLM count it: the prompt once for its n choices, and its cached part
  // (both choices took all but the prompt's last token from the earlier requests' caches).
  EXPECT_EQ(out["usage"]["prompt_tokens"], ps[0].size());
  EXPECT_EQ(out["usage"]["prompt_tokens_details"]["cached_tokens"], ps[0].size() - 1);
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(out["choices"][j]["index"], j);
    const auto [s1, one] = b.call("POST", "/v1/completions", {{"prompt", ps[0]}, {"seed", 5 + j}, {"max_tokens", 8}});
    EXPECT_EQ(out["choices"][j]["token_ids"], one["choices"][0]["token_ids"]) << j;
  }
}

}  // namespace
}  // namespace updraft
