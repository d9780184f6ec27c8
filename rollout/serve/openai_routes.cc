// POST /v1/completions, the OpenAI-shaped route of the rollout service
// (rollout/serve/rollout_service.h), and what it shares with chat (chat_route.cc).
#include <algorithm>

#include "kernels/core/error.h"
#include "rollout/serve/api_parse.h"
#include "rollout/serve/rollout_service.h"
#include "rollout/serve/stop_strings.h"
#include "rollout/serve/stream.h"

namespace updraft {

using nlohmann::json;

namespace {

constexpr int64_t kMaxLogprobs = 20;  // OpenAI's cap on alternatives per token

// The sampling fields OpenAI's completions and chat share (null: the default).
SamplingParams openai_params(const json& body) {
  SamplingParams p;
  p.max_new_tokens = api::has(body, "max_tokens") ? api::int_of(body, "max_tokens", 1, INT64_MAX, "body") : 16;
  p.temperature = api::has(body, "temperature") ? static_cast<float>(api::number_of(body, "temperature", "body")) : 1.0f;
  p.top_p = api::has(body, "top_p") ? static_cast<float>(api::number_of(body, "top_p", "body")) : 1.0f;
  if (api::has(body, "seed")) {
    p.has_seed = true;
    p.seed = api::seed_of(body, "seed", "body");
  }
  if (api::has(body, "presence_penalty"))
    p.presence_penalty = static_cast<float>(api::number_of(body, "presence_penalty", "body"));
  if (api::has(body, "frequency_penalty"))
    p.frequency_penalty = static_cast<float>(api::number_of(body, "frequency_penalty", "body"));
  // SGLang's and vLLM's extensions (chat takes them).
  if (api::has(body, "top_k"))  // -1 and 0: off
    p.top_k = static_cast<int32_t>(std::max<int64_t>(api::int_of(body, "top_k", -1, INT32_MAX, "body"), 0));
  if (api::has(body, "min_p"))
    p.min_p = static_cast<float>(api::number_of(body, "min_p", "body"));
  if (api::has(body, "repetition_penalty"))
    p.repetition_penalty = static_cast<float>(api::number_of(body, "repetition_penalty", "body"));
  return p;
}

// "prompt": text, token ids, or a list of either.
std::vector<std::vector<int32_t>> completion_prompts(const json& pr, const Tokenizer* tok) {
  auto text = [&](const json& t) {
    UPD_REQUIRE(tok != nullptr) << "a text prompt needs the model's tokenizer.json; send token ids";
    return tok->encode(t.get<std::string>());
  };
  if (pr.is_string())
    return {text(pr)};
  if (api::is_id_list(pr) && !pr.empty())
    return {api::ids_of(pr, "prompt")};
  UPD_REQUIRE(pr.is_array() && !pr.empty()) << "prompt must be text, token ids, or a list of either";
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < pr.size(); ++i)
    prompts.push_back(pr[i].is_string() ? text(pr[i]) : api::ids_of(pr[i], "prompt[" + std::to_string(i) + "]"));
  return prompts;
}

// The completions' legacy logprobs object: tokens, their logprobs and, with k > 0, the k most
// likely alternatives of each as {token text: logprob}.
json logprobs_json(const GenResult& g, const Tokenizer* tok, int64_t k) {
  auto spell = [&](int32_t t) { return tok != nullptr ? tok->decode({t}, false) : std::to_string(t); };
  json toks = json::array(), top = k > 0 ? json::array() : json();
  for (size_t i = 0; i < g.tokens.size(); ++i) {
    toks.push_back(spell(g.tokens[i]));
    if (k > 0) {
      json alts = json::object();
      for (const auto& [id, lp] : g.top_logprobs.at(i))
        alts[spell(id)] = lp;
      top.push_back(std::move(alts));
    }
  }
  return {{"tokens", toks}, {"token_logprobs", g.logprobs}, {"top_logprobs", top}};
}

}  // namespace

http::Response RolloutService::completions(const json& body) {
  api::check_fields(body,
                    {"prompt", "max_tokens", "temperature", "top_p", "seed", "logprobs", "stop", "presence_penalty",
                     "frequency_penalty", "n", "stream", "stream_options"},
                    api::completions_rules(), "body");
  UPD_REQUIRE(api::has(body, "prompt")) << "prompt is required";
  const std::vector<std::vector<int32_t>> prompts = completion_prompts(body["prompt"], tokenizer_.get());
  const bool logprobs = api::has(body, "logprobs");
  const int64_t top = logprobs ? api::int_of(body, "logprobs", 0, kMaxLogprobs, "body") : 0;
  std::vector<std::shared_ptr<StopMatcher>> stops;
  std::vector<GenRequest> reqs = openai_requests(body, prompts, top, &stops);
  UPD_REQUIRE(!api::bool_or(body, "stream", false) || !logprobs) << "logprobs are not streamed; ask without stream";
  return run_openai(std::move(reqs), stops, body, false, [&](size_t i, const GenResult& g, const std::string& text) {
    return json{{"index", i},
                {"text", text},
                {"token_ids", g.tokens},
                {"finish_reason", g.finish_reason},
                {"logprobs", logprobs ? logprobs_json(g, tokenizer_.get(), top) : json()}};
  });
}

std::string RolloutService::openai_text(const GenResult& g, const std::shared_ptr<StopMatcher>& stop) const {
  return stop ? stop->text(false) : tokenizer_ ? tokenizer_->decode(g.tokens, true) : "";
}

http::Response RolloutService::run_openai(std::vector<GenRequest> reqs,
                                          const std::vector<std::shared_ptr<StopMatcher>>& stops, const json& body,
                                          bool chat, const OpenAiChoice& choice) {
  const size_t count = reqs.size();
  const bool usage = api::include_usage(body);
  const int64_t n = api::has(body, "n") ? api::int_of(body, "n", 1, api::kMaxN, "body") : 1;
  if (api::bool_or(body, "stream", false))
    return stream_job(std::move(reqs), std::vector<std::string>(count), "", openai_events(chat, stops, n, usage));
  int status = 0;
  std::string why;
  const std::vector<Completion> out = run_job(std::move(reqs), std::vector<std::string>(count), "", &status, &why);
  if (status != 0)
    return api::error(status, why);
  json choices = json::array();
  for (size_t i = 0; i < out.size(); ++i)
    choices.push_back(choice(i, out[i].result, openai_text(out[i].result, stops[i])));
  return api::json_response(200, chat ? openai_envelope("chat.completion", "chatcmpl-", out, std::move(choices), n)
                                      : openai_envelope("text_completion", "cmpl-", out, std::move(choices), n));
}

std::vector<GenRequest> RolloutService::openai_requests(const json& body,
                                                       const std::vector<std::vector<int32_t>>& prompts, int64_t top,
                                                       std::vector<std::shared_ptr<StopMatcher>>* stops) {
  const std::vector<std::string> stop = api::stop_strings_of(body, "body", 4);
  const int64_t n = api::has(body, "n") ? api::int_of(body, "n", 1, api::kMaxN, "body") : 1;
  const SamplingParams params = openai_params(body);
  // Choice index i * n + j: prompt i's j-th completion, drawn from seed + i * n + j when seeded.
  std::vector<GenRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i)
    for (int64_t j = 0; j < n; ++j) {
      GenRequest r;
      r.prompt = prompts[i];
      r.params = params;
      r.params.seed += reqs.size();
      r.top_logprobs = static_cast<int32_t>(top);
      stops->push_back(stop.empty() ? nullptr : std::make_shared<StopMatcher>(tokenizer_, stop, true, 0));
      if (stops->back())
        r.stop_check = stop_check_of(stops->back());
      reqs.push_back(std::move(r));
    }
  return reqs;
}

// OpenAI's stream: chunks of each choice's new text ("text" for completions, "delta" for chat,
// whose first chunk carries the role), then each choice's last text with its finish_reason,
// then with include_usage a chunk with the usage and no choices.
StreamEvents RolloutService::openai_events(bool chat, const std::vector<std::shared_ptr<StopMatcher>>& stops, int64_t n,
                                           bool usage) {
  auto deltas = std::make_shared<std::vector<TextDelta>>();
  auto started = std::make_shared<std::vector<bool>>(stops.size(), false);
  for (const auto& m : stops)
    deltas->emplace_back(tokenizer_, true, m ? m->stops() : std::vector<std::string>{});
  const json head = {{"id", (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_.fetch_add(1))},
                     {"object", chat ? "chat.completion.chunk" : "text_completion"},
                     {"created", std::chrono::duration_cast<std::chrono::seconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count()},
                     {"model", options_.model_name}};
  auto chunk = [head, chat, started](size_t k, const std::string& text, const json& finish) {
    json c = {{"index", k}, {"finish_reason", finish}};
    if (chat) {
      c["delta"] = (*started)[k] ? json{{"content", text}} : json{{"role", "assistant"}, {"content", text}};
      (*started)[k] = true;
    } else {
      c["text"] = text;
      c["logprobs"] = nullptr;
    }
    json e = head;
    e["choices"] = json::array({std::move(c)});
    return sse(e);
  };
  StreamEvents ev;
  ev.update = [deltas, chunk](size_t k, const std::vector<int32_t>& toks) {
    const std::string d = (*deltas)[k].next(toks);
    return d.empty() ? std::string() : chunk(k, d, nullptr);
  };
  ev.finish = [this, deltas, chunk, stops, head, usage, n](const std::vector<Completion>& out) {
    std::string events;
    for (size_t k = 0; k < out.size(); ++k) {
      const GenResult& g = out[k].result;
      events += chunk(k, (*deltas)[k].rest(openai_text(g, stops[k])), g.finish_reason);
    }
    if (usage) {
      json e = openai_envelope(head["object"].get<std::string>().c_str(), "", out, json::array(), n);
      e["id"] = head["id"];
      e["created"] = head["created"];
      events += sse(e);
    }
    return events;
  };
  return ev;
}

json RolloutService::openai_envelope(const char* object, const char* id_prefix, const std::vector<Completion>& out,
                                     json choices, int64_t n) {
  // As OpenAI and vLLM count them: a prompt's tokens once for its n choices (choices i * n + j
  // share prompt i), their cached share likewise (the most any of them took).
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  for (size_t i = 0; i < out.size(); i += static_cast<size_t>(n)) {
    prompt_tokens += static_cast<int64_t>(out[i].result.prompt.size());
    int64_t cached = 0;
    for (size_t j = i; j < std::min(out.size(), i + static_cast<size_t>(n)); ++j)
      cached = std::max(cached, out[j].result.cached_tokens);
    cached_tokens += cached;
  }
  for (const Completion& c : out)
    completion_tokens += static_cast<int64_t>(c.result.tokens.size());
  return {{"id", id_prefix + std::to_string(next_id_.fetch_add(1))},
          {"object", object},
          {"created",
           std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
               .count()},
          {"model", options_.model_name},
          {"choices", std::move(choices)},
          {"usage",
           {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}}},
          {"updraft",
           {{"policy_version", out.empty() ? 0 : out[0].policy_version},
            {"drafter_version", out.empty() ? 0 : out[0].drafter_version}}}};
}

}  // namespace updraft
