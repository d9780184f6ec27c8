// POST /v1/chat/completions, the OpenAI chat route of the rollout service
// (rollout/serve/rollout_service.h): the messages rendered by the model's chat template
// (rollout/serve/chat_template.h), then generated as a completion.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "kernels/core/error.h"
#include "rollout/serve/api_parse.h"
#include "rollout/serve/chat_template.h"
#include "rollout/serve/rollout_service.h"
#include "rollout/serve/stop_strings.h"
#include "rollout/serve/stream.h"

namespace updraft {

using nlohmann::json;

namespace {

constexpr int64_t kMaxTopLogprobs = 20;  // OpenAI's cap

// A special token in tokenizer_config.json: a string, or an AddedToken object {"content": ...}.
std::string token_text(const json& cfg, const char* key) {
  if (!cfg.contains(key) || cfg[key].is_null())
    return "";
  const json& v = cfg[key];
  if (v.is_string())
    return v.get<std::string>();
  return v.is_object() && v.contains("content") && v["content"].is_string() ? v["content"].get<std::string>() : "";
}

// A message's content: a string, or a list of parts of which only {"type": "text"} is taken.
std::string content_text(const json& m, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "].content";
  if (!m.contains("content") || m["content"].is_null())
    return "";
  const json& c = m["content"];
  if (c.is_string())
    return c.get<std::string>();
  UPD_REQUIRE(c.is_array()) << where << " must be a string or a list of parts";
  std::string text;
  for (const json& part : c) {
    UPD_REQUIRE(part.is_object() && part.value("type", "") == "text" && part.contains("text") && part["text"].is_string())
        << where << ": only text parts are supported (got " << part.dump().substr(0, 80) << ")";
    text += part["text"].get<std::string>();
  }
  return text;
}

// The messages as the template sees them: role and content (text), plus a tool call id or name
// where given.
json template_messages(const json& body) {
  UPD_REQUIRE(api::has(body, "messages") && body["messages"].is_array() && !body["messages"].empty())
      << "messages must be a non-empty list";
  json out = json::array();
  for (size_t i = 0; i < body["messages"].size(); ++i) {
    const json& m = body["messages"][i];
    UPD_REQUIRE(m.is_object() && m.contains("role") && m["role"].is_string())
        << "messages[" << i << "] must be an object with a role";
    api::check_keys(m, {"role", "content", "name", "tool_call_id", "tool_calls"}, "messages[" + std::to_string(i) + "]");
    UPD_REQUIRE(!m.contains("tool_calls") || m["tool_calls"].is_null() || m["tool_calls"].empty())
        << "messages[" << i << "].tool_calls is not supported (tools are not)";
    json t = {{"role", m["role"]}, {"content", content_text(m, i)}};
    for (const char* k : {"name", "tool_call_id"})
      if (m.contains(k) && !m[k].is_null())
        t[k] = m[k];
    out.push_back(std::move(t));
  }
  return out;
}

// Chat's logprobs object: per token its text, logprob, bytes and top alternatives.
json chat_logprobs(const GenResult& g, const Tokenizer& tok, int64_t k) {
  auto entry = [&](int32_t id, float lp) {
    const std::string raw = tok.decode_bytes({id});
    return json{{"token", tok.decode({id})}, {"logprob", lp}, {"bytes", std::vector<uint8_t>(raw.begin(), raw.end())}};
  };
  json content = json::array();
  for (size_t i = 0; i < g.tokens.size(); ++i) {
    json e = entry(g.tokens[i], g.logprobs[i]);
    json top = json::array();
    if (k > 0)
      for (const auto& [id, lp] : g.top_logprobs.at(i))
        top.push_back(entry(id, lp));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return {{"content", std::move(content)}};
}

}  // namespace

ChatSetup load_chat_setup(const std::string& model_dir) {
  ChatSetup s;
  const std::filesystem::path p = std::filesystem::path(model_dir) / "tokenizer_config.json";
  if (model_dir.empty() || !std::filesystem::exists(p))
    return s;
  std::ifstream f(p);
  const json cfg = json::parse(f, nullptr, false);
  UPD_REQUIRE(!cfg.is_discarded() && cfg.is_object()) << p.string() << ": not a JSON object";
  s.bos_token = token_text(cfg, "bos_token");
  s.eos_token = token_text(cfg, "eos_token");
  if (cfg.contains("chat_template") && cfg["chat_template"].is_string()) {
    s.chat_template = cfg["chat_template"].get<std::string>();
  } else if (cfg.contains("chat_template") && cfg["chat_template"].is_array()) {  // named templates
    for (const json& t : cfg["chat_template"])
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template"))
        s.chat_template = t["template"].get<std::string>();
  }
  return s;
}

http::Response RolloutService::chat_completions(const json& body) {
  api::check_fields(body,
                    {"messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop", "n",
                     "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs", "top_k", "min_p",
                     "repetition_penalty", "add_generation_prompt", "stream", "stream_options"},
                    api::chat_rules(), "body");
  UPD_REQUIRE(tokenizer_ != nullptr) << "chat needs the model's tokenizer.json";
  UPD_REQUIRE(chat_template_ != nullptr) << (chat_error_.empty() ? "the model has no chat_template in tokenizer_config.json"
                                                                  : "the model's chat template: " + chat_error_);
  const json vars = {{"messages", template_messages(body)},
                     {"add_generation_prompt", api::bool_or(body, "add_generation_prompt", true)},
                     {"bos_token", chat_.bos_token},
                     {"eos_token", chat_.eos_token}};
  const std::vector<int32_t> prompt = tokenizer_->encode(chat_template_->render(vars));
  json completion = body;  // the sampling fields are the completions route's
  completion["prompt"] = prompt;
  if (api::has(body, "max_completion_tokens"))
    completion["max_tokens"] = body["max_completion_tokens"];
  else if (!api::has(body, "max_tokens"))  // OpenAI's default: up to the context's end
    completion["max_tokens"] = std::max<int64_t>(1, config_.max_position_embeddings - static_cast<int64_t>(prompt.size()));
  const bool logprobs = api::bool_or(body, "logprobs", false);
  const int64_t top = api::has(body, "top_logprobs") ? api::int_of(body, "top_logprobs", 0, kMaxTopLogprobs, "body") : 0;
  UPD_REQUIRE(top == 0 || logprobs) << "top_logprobs needs logprobs: true";
  std::vector<std::shared_ptr<StopMatcher>> stops;
  std::vector<GenRequest> reqs = openai_requests(completion, {prompt}, top, &stops);
  UPD_REQUIRE(!api::bool_or(body, "stream", false) || !logprobs) << "logprobs are not streamed; ask without stream";
  return run_openai(std::move(reqs), stops, body, true, [&](size_t i, const GenResult& g, const std::string& text) {
    return json{{"index", i},
                {"message", {{"role", "assistant"}, {"content", text}}},
                {"logprobs", logprobs ? chat_logprobs(g, *tokenizer_, top) : json()},
                {"finish_reason", g.finish_reason}};
  });
}

}  // namespace updraft
