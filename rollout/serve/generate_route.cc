// POST /generate and GET /health_generate, the SGLang-shaped generation routes of the rollout
// service (rollout/serve/rollout_service.h).
#include <algorithm>

#include "kernels/core/error.h"
#include "rollout/serve/api_parse.h"
#include "rollout/serve/rollout_service.h"
#include "rollout/serve/stop_strings.h"

namespace updraft {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kMaxTopLogprobs = 64;

// /generate's prompts: input_ids (a list, or a list of lists) or text (one, or a list).
std::vector<std::vector<int32_t>> generate_prompts(const json& body, const Tokenizer* tok, bool* batch) {
  std::vector<std::vector<int32_t>> prompts;
  if (api::has(body, "input_ids")) {
    const json& in = body["input_ids"];
    *batch = in.is_array() && !in.empty() && in[0].is_array();
    if (!*batch)
      return {api::ids_of(in, "input_ids")};
    for (size_t i = 0; i < in.size(); ++i)
      prompts.push_back(api::ids_of(in[i], "input_ids[" + std::to_string(i) + "]"));
    return prompts;
  }
  UPD_REQUIRE(tok != nullptr) << "text needs the model's tokenizer.json; send input_ids";
  const json& in = body["text"];
  *batch = in.is_array();
  for (const json& t : *batch ? in : json::array({in})) {
    UPD_REQUIRE(t.is_string()) << "text must be a string or a list of strings";
    prompts.push_back(tok->encode(t.get<std::string>()));
  }
  return prompts;
}

json finish_reason(const Completion& c, const api::TextOptions& text) {
  const GenResult& g = c.result;
  if (g.finish_reason == "abort")
    return {{"type", "abort"}, {"message", c.error.empty() ? "aborted" : c.error}};
  if (g.finish_reason == "stop" && g.matched_stop >= 0)
    return {{"type", "stop"}, {"matched", text.stop.at(static_cast<size_t>(g.matched_stop))}};
  if (g.finish_reason == "stop" && !g.tokens.empty())
    return {{"type", "stop"}, {"matched", g.tokens.back()}};
  return {{"type", "length"}, {"length", g.tokens.size()}};
}

// A per-prompt flag given as one bool, or a list of one bool per prompt; null or absent: false.
std::vector<bool> per_prompt_flag(const json& body, const char* key, size_t n) {
  if (!api::has(body, key))
    return std::vector<bool>(n, false);
  const json& v = body[key];
  if (v.is_boolean())
    return std::vector<bool>(n, v.get<bool>());
  UPD_REQUIRE(v.is_array() && v.size() == n) << key << " must be a bool or a list of one bool per prompt (" << n << ")";
  std::vector<bool> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = v[i].get<bool>();
  return out;
}

// top_logprobs_num: one count, or a list of one per prompt; null or absent: 0.
std::vector<int64_t> per_prompt_top_logprobs(const json& body, size_t n) {
  if (!api::has(body, "top_logprobs_num"))
    return std::vector<int64_t>(n, 0);
  if (!body["top_logprobs_num"].is_array())
    return std::vector<int64_t>(n, api::int_of(body, "top_logprobs_num", 0, kMaxTopLogprobs, "body"));
  const json& v = body["top_logprobs_num"];
  UPD_REQUIRE(v.size() == n) << "top_logprobs_num must be a count or a list of one count per prompt (" << n << ")";
  std::vector<int64_t> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(api::int_value(v[i], 0, kMaxTopLogprobs, "body.top_logprobs_num[" + std::to_string(i) + "]"));
  return out;
}

bool reqs_top(const GenResult& g) {
  return !g.top_logprobs.empty();
}

// SGLang's output_top_logprobs: per output token, [[logprob, id, text or null], ...].
json top_logprobs_json(const GenResult& g, const Tokenizer* tok) {
  json all = json::array();
  for (const auto& alts : g.top_logprobs) {
    json row = json::array();
    for (const auto& [id, lp] : alts)
      row.push_back(json::array({lp, id, tok != nullptr ? json(tok->decode({id}, false)) : json()}));
    all.push_back(std::move(row));
  }
  return all;
}

}  // namespace

http::Response RolloutService::generate(const json& body) {
  api::check_fields(body,
                    {"input_ids", "text", "sampling_params", "return_logprob", "return_text_in_logprobs", "rid",
                     "top_logprobs_num"},
                    api::generate_rules(), "body");
  UPD_REQUIRE(api::has(body, "input_ids") != api::has(body, "text")) << "give exactly one of input_ids and text";
  bool batch = false;
  std::vector<std::vector<int32_t>> prompts = generate_prompts(body, tokenizer_.get(), &batch);
  UPD_REQUIRE(!prompts.empty()) << "no prompt given";
  const json sp = body.value("sampling_params", json());
  UPD_REQUIRE(!sp.is_array() || sp.size() == prompts.size())
      << "sampling_params: a list needs one entry per prompt (" << prompts.size() << ")";
  // Prompt i's n completions follow one another (SGLang's order); sibling j draws from seed + j.
  std::vector<GenRequest> reqs;
  std::vector<api::TextOptions> text;
  std::vector<size_t> of;           // each request's prompt
  std::vector<int64_t> sibling;     // and its place among the prompt's n
  std::vector<std::shared_ptr<StopMatcher>> stops;
  for (size_t i = 0; i < prompts.size(); ++i) {
    api::TextOptions t;
    const SamplingParams params = api::sglang_params(sp.is_array() ? sp[i] : sp, &t);
    for (int64_t j = 0; j < t.n; ++j) {
      GenRequest r;
      r.prompt = prompts[i];
      r.params = params;
      r.params.seed += static_cast<uint64_t>(j);
      stops.push_back(t.stop.empty() ? nullptr
                                     : std::make_shared<StopMatcher>(tokenizer_, t.stop, t.skip_special,
                                                                     params.min_new_tokens));
      if (stops.back())
        r.stop_check = stop_check_of(stops.back());
      reqs.push_back(std::move(r));
      text.push_back(t);
      of.push_back(i);
      sibling.push_back(j);
    }
  }
  const std::vector<bool> per_prompt_logprob = per_prompt_flag(body, "return_logprob", prompts.size());
  const bool lp_text = api::bool_or(body, "return_text_in_logprobs", false);
  UPD_REQUIRE(!lp_text || tokenizer_) << "return_text_in_logprobs needs the model's tokenizer.json";
  std::string group;
  const std::vector<std::string> prompt_rids = api::rids_of(body, prompts.size(), batch, &group);
  std::vector<std::string> rids;
  std::vector<bool> logprob;
  const std::vector<int64_t> top = per_prompt_top_logprobs(body, prompts.size());
  for (size_t k = 0; k < reqs.size(); ++k) {
    const std::string& rid = prompt_rids[of[k]];
    rids.push_back(rid.empty() || text[k].n == 1 ? rid : rid + "-" + std::to_string(sibling[k]));
    logprob.push_back(per_prompt_logprob[of[k]]);
    UPD_REQUIRE(top[of[k]] == 0 || logprob.back()) << "top_logprobs_num needs return_logprob";
    reqs[k].top_logprobs = static_cast<int32_t>(top[of[k]]);
  }
  const auto t0 = Clock::now();
  int status = 0;
  std::string why;
  const std::vector<Completion> out = run_job(std::move(reqs), rids, group, &status, &why);
  if (status != 0)
    return api::error(status, why);
  const double latency = std::chrono::duration<double>(Clock::now() - t0).count();
  const uint64_t first_id = next_id_.fetch_add(out.size());
  json results = json::array();
  for (size_t i = 0; i < out.size(); ++i) {
    const Completion& c = out[i];
    const GenResult& g = c.result;
    json meta = {{"id", rids[i].empty() ? std::to_string(first_id + i) : rids[i]},
                 {"finish_reason", finish_reason(c, text[i])},
                 {"prompt_tokens", g.prompt.size()},
                 {"completion_tokens", g.tokens.size()},
                 {"cached_tokens", 0},
                 {"spec_verify_ct", g.spec.rounds},
                 {"weight_version", std::to_string(c.policy_version)},
                 {"policy_version", c.policy_version},
                 {"drafter_version", c.drafter_version},
                 {"e2e_latency", latency},
                 {"preemptions", g.preemptions},
                 {"engine_step_submitted", g.submitted_step},
                 {"engine_step_admitted", g.admitted_step},
                 {"engine_step_first_token", g.first_token_step},
                 {"engine_step_finished", g.finished_step}};
    if (g.spec.rounds > 0)
      meta["spec_accept_length"] = g.spec.tau();
    if (logprob[i]) {
      json lp = json::array();
      for (size_t t = 0; t < g.tokens.size(); ++t)
        lp.push_back(json::array(
            {g.logprobs[t], g.tokens[t], lp_text ? json(tokenizer_->decode({g.tokens[t]}, false)) : json()}));
      meta["output_token_logprobs"] = std::move(lp);
      if (reqs_top(g))
        meta["output_top_logprobs"] = top_logprobs_json(g, lp_text ? tokenizer_.get() : nullptr);
    }
    json r = {{"output_ids", g.tokens}, {"meta_info", std::move(meta)}};
    if (stops[i] && g.matched_stop >= 0) {
      r["text"] = stops[i]->text(text[i].no_stop_trim);
    } else if (tokenizer_) {
      const bool trim = g.finish_reason == "stop" && !g.tokens.empty() && !text[i].no_stop_trim;
      r["text"] = tokenizer_->decode({g.tokens.begin(), g.tokens.end() - (trim ? 1 : 0)}, text[i].skip_special);
    }
    results.push_back(std::move(r));
  }
  return api::json_response(200, batch || results.size() > 1 ? results : results[0]);
}

http::Response RolloutService::health_generate() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (paused_)
      return api::error(503, "generation is paused");
  }
  GenRequest r;
  r.prompt = {std::max(config_.bos_token_id, 0)};
  r.params.temperature = 0;
  r.params.max_new_tokens = 1;
  r.params.ignore_eos = true;
  std::shared_ptr<Submission> sub;
  try {
    sub = worker_.submit_all({std::move(r)}, {GenMode::kServing, /*internal=*/true});
  } catch (const Error& e) {
    return api::error(503, api::reason(e.what()));
  }
  if (!sub->wait_for(options_.health_generate_timeout)) {
    worker_.abort(sub->ids()[0]);
    return api::error(503, "no token generated within the health check's deadline");
  }
  const std::vector<Completion> out = sub->take();
  const Completion& c = out[0];
  if (c.result.tokens.size() != 1)
    return api::error(503, "generation failed: " + (c.error.empty() ? c.result.finish_reason : c.error));
  return api::json_response(200, {{"status", "ok"}});
}

}  // namespace updraft
