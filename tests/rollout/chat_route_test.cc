// POST /v1/chat/completions (rollout/serve/chat_route.cc): the messages rendered by the model's
// chat template, then generated as a completion: greedy output equals /generate on the rendered
// prompt, content, finish reason, usage and logprobs have OpenAI's shapes; a model without a
// usable template, non-text content and tools are refused by name; the built-in model's
// tokenizer_config.json carries a template that renders.
#include <gtest/gtest.h>

#include <fstream>

#include "rollout/serve/chat_template.h"
#include "rollout/tokenizer.h"
#include "tests/fixture_util.h"
#include "tests/rollout/service_fixture.h"

namespace updraft {
namespace {

using namespace testing_online;
using namespace testing_service;
using nlohmann::json;

// A service over the fixture policy (vocabulary 512, which covers the fixture tokenizer's 500
// ids) and its speculators drafter, with a chat template.
struct ChatBed {
  std::shared_ptr<const PolicyModel> policy = std::make_shared<const PolicyModel>(
      PolicyModel::load(fixture_util::source_path("tests/fixtures/policy/llama")));
  std::unique_ptr<Worker> worker;
  std::unique_ptr<RolloutService> service;
  ChatBed(std::shared_ptr<const Tokenizer> tok, ChatSetup chat) {
    WorkerOptions o;
    o.engine.spec = SpecSettings{3, 1, 4};
    o.engine.kv_cache_bytes = int64_t{16} << 20;
    auto d = std::make_shared<const DraftModel>(
        DraftModel::load(fixture_util::source_path("tests/fixtures/drafter/spec_default"), policy->draft_target()));
    worker = std::make_unique<Worker>(o, policy, 1, d, 1, nullptr);
    RolloutServiceOptions so;
    so.chat = std::move(chat);
    service = std::make_unique<RolloutService>(so, *worker, policy->config(), std::move(tok), nullptr);
  }
  std::pair<int, json> call(const std::string& method, const std::string& path, const json& body) {
    http::Request r;
    r.method = method;
    r.path = path;
    r.body = body.dump();
    const http::Response resp = service->handle(r);
    return {resp.status, json::parse(resp.body)};
  }
};

std::string read(const std::string& rel) {
  std::ifstream f(fixture_util::source_path(rel));
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(ChatRoute, MessagesRenderedByTheTemplateGenerateAsACompletion) {
  auto tok = fixture_tokenizer();
  ChatSetup chat{read("tests/fixtures/chat_templates/chatml_qwen.jinja"), "", "<|endoftext|>"};
  ChatBed b(tok, chat);
  const json messages = json::array({{{"role", "system"}, {"content", "Be brief."}},
                                     {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Say hi"}}}}}});
  const std::string rendered = chat::Template(chat.chat_template)
                                   .render({{"messages", json::array({{{"role", "system"}, {"content", "Be brief."}},
                                                                      {{"role", "user"}, {"content", "Say hi"}}})},
                                            {"add_generation_prompt", true},
                                            {"bos_token", ""},
                                            {"eos_token", "<|endoftext|>"}});
  EXPECT_NE(rendered.find("<|im_start|>assistant\n"), std::string::npos) << rendered;
  const std::vector<int32_t> prompt = tok->encode(rendered);
  auto [s, out] = b.call("POST", "/v1/chat/completions",
                         {{"model", "anything"}, {"messages", messages}, {"max_tokens", 8}, {"temperature", 0},
                          {"logprobs", true}, {"top_logprobs", 2}, {"stream", false}, {"tools", json::array()}});
  ASSERT_EQ(s, 200) << out;
  const auto [gs, gen] = b.call("POST", "/generate",
                                {{"input_ids", prompt},
                                 {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 8}}}});
  ASSERT_EQ(gs, 200) << gen;
  EXPECT_EQ(out["object"], "chat.completion");
  const json& c = out["choices"][0];
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["content"], tok->decode(gen["output_ids"].get<std::vector<int32_t>>(), true));
  EXPECT_EQ(out["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(out["usage"]["completion_tokens"], gen["output_ids"].size());
  EXPECT_EQ(c["finish_reason"], gen["meta_info"]["finish_reason"]["type"]);
  ASSERT_EQ(c["logprobs"]["content"].size(), gen["output_ids"].size());
  for (const json& e : c["logprobs"]["content"]) {
    ASSERT_EQ(e["top_logprobs"].size(), 2u) << e;
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]) << "greedy: the token is the most likely";
    EXPECT_NEAR(e["top_logprobs"][0]["logprob"].get<double>(), e["logprob"].get<double>(), 1e-6);
  }
  // n and stop behave as in completions.
  std::tie(s, out) = b.call("POST", "/v1/chat/completions",
                            {{"messages", messages}, {"max_completion_tokens", 6}, {"n", 2}, {"seed", 4}});
  ASSERT_EQ(s, 200) << out;
  EXPECT_EQ(out["choices"].size(), 2u);
  EXPECT_EQ(out["choices"][1]["index"], 1);
}

TEST(ChatRoute, WhatCannotBeServedIsRefusedByName) {
  auto tok = fixture_tokenizer();
  const json hi = json::array({{{"role", "user"}, {"content", "hi"}}});
  {
    Bed b(int64_t{64} << 20, 4096, tok);
    const auto [s, out] = b.call("POST", "/v1/chat/completions", {{"messages", hi}});
    EXPECT_EQ(s, 400);
    EXPECT_NE(out.dump().find("no chat_template in tokenizer_config.json"), std::string::npos) << out;
  }
  {
    Bed b(int64_t{64} << 20, 4096, tok, ChatSetup{"{% macro m() %}{% endmacro %}", "", ""});
    const auto [s, out] = b.call("POST", "/v1/chat/completions", {{"messages", hi}});
    EXPECT_EQ(s, 400);
    EXPECT_NE(out.dump().find("the model's chat template"), std::string::npos) << out;
  }
  Bed b(int64_t{64} << 20, 4096, tok, ChatSetup{read("tests/fixtures/chat_templates/mistral.jinja"), "<s>", "</s>"});
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"messages", json::array()}}, "messages must be a non-empty list"},
      {{{"messages", json::array({{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}})}}, "only text parts"},
      {{{"messages", hi}, {"tools", json::array({{{"type", "function"}}})}}, "body.tools is not supported"},
      {{{"messages", hi}, {"stream", true}, {"logprobs", true}}, "logprobs are not streamed"},
      {{{"messages", hi}, {"top_logprobs", 2}}, "top_logprobs needs logprobs: true"},
      {{{"messages", json::array({{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}})}},
       "alternate"},  // the template's own raise_exception
  };
  for (const auto& [body, says] : cases) {
    const auto [s, out] = b.call("POST", "/v1/chat/completions", body);
    EXPECT_EQ(s, 400) << body.dump();
    EXPECT_NE(out["error"]["message"].get<std::string>().find(says), std::string::npos) << body.dump() << " -> " << out;
  }
  EXPECT_EQ(b.worker->metrics().steps, 0);
}

TEST(ChatRoute, TheBuiltInModelShipsATemplate) {
  const ChatSetup s = load_chat_setup(fixture_util::source_path("models/small"));
  ASSERT_FALSE(s.chat_template.empty());
  EXPECT_EQ(s.eos_token, "<|endoftext|>");
  const json vars = {{"messages", json::array({{{"role", "system"}, {"content", "Answer in Python."}},
                                               {{"role", "user"}, {"content", "is_prime(t)"}}})},
                     {"add_generation_prompt", true}};
  EXPECT_EQ(chat::Template(s.chat_template).render(vars),
            "### System:\nAnswer in Python.\n### User:\nis_prime(t)\n### Assistant:\n");
  EXPECT_TRUE(load_chat_setup(fixture_util::source_path("tests/fixtures/policy/llama")).chat_template.empty());
}

}  // namespace
}  // namespace updraft
