// POST /generate and GET /health_generate, the SGLang-shaped generation routes of the rollout
// service (rollout/serve/rollout_service.h).
#include <algorithm>
#include <cmath>

#include "kernels/core/error.h"
#include "rollout/serve/api_parse.h"
#include "rollout/serve/rollout_service.h"
#include "rollout/serve/stop_strings.h"
#include "rollout/serve/stream.h"

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

// A per-prompt count (top_logprobs_num, logprob_start_len): one value, or a list of one per
// prompt; null or absent: def.
std::vector<int64_t> per_prompt_counts(const json& body, const char* key, int64_t lo, int64_t hi, int64_t def,
                                       size_t n) {
  if (!api::has(body, key))
    return std::vector<int64_t>(n, def);
  if (!body[key].is_array())
    return std::vector<int64_t>(n, api::int_of(body, key, lo, hi, "body"));
  const json& v = body[key];
  UPD_REQUIRE(v.size() == n) << key << " must be a number or a list of one per prompt (" << n << ")";
  std::vector<int64_t> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(v[i].is_null() ? def
                                 : api::int_value(v[i], lo, hi, std::string("body.") + key + "[" + std::to_string(i) + "]"));
  return out;
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

// A /generate body's requests and what shapes each one's result.
struct RolloutService::GenerateJob {
  std::vector<GenRequest> reqs;
  std::vector<api::TextOptions> text;                 // per request
  std::vector<std::shared_ptr<StopMatcher>> stops;    // per request (null: no stop strings)
  std::vector<std::string> rids;                      // per request
  std::vector<bool> logprob;                          // per request
  std::string group;
  bool batch = false, lp_text = false;
};

RolloutService::GenerateJob RolloutService::parse_generate(const json& body) {
  api::check_fields(body,
                    {"input_ids", "text", "sampling_params", "return_logprob", "return_text_in_logprobs", "rid",
                     "top_logprobs_num", "stream", "logprob_start_len"},
                    api::generate_rules(), "body");
  UPD_REQUIRE(api::has(body, "input_ids") != api::has(body, "text")) << "give exactly one of input_ids and text";
  GenerateJob job;
  const std::vector<std::vector<int32_t>> prompts = generate_prompts(body, tokenizer_.get(), &job.batch);
  UPD_REQUIRE(!prompts.empty()) << "no prompt given";
  const json sp = body.value("sampling_params", json());
  UPD_REQUIRE(!sp.is_array() || sp.size() == prompts.size())
      << "sampling_params: a list needs one entry per prompt (" << prompts.size() << ")";
  const std::vector<bool> logprob = per_prompt_flag(body, "return_logprob", prompts.size());
  job.lp_text = api::bool_or(body, "return_text_in_logprobs", false);
  UPD_REQUIRE(!job.lp_text || tokenizer_) << "return_text_in_logprobs needs the model's tokenizer.json";
  const std::vector<std::string> prompt_rids = api::rids_of(body, prompts.size(), job.batch, &job.group);
  const std::vector<int64_t> top = per_prompt_counts(body, "top_logprobs_num", 0, kMaxTopLogprobs, 0, prompts.size());
  const std::vector<int64_t> start = per_prompt_counts(body, "logprob_start_len", -1, INT32_MAX, -1, prompts.size());
  // Prompt i's n completions follow one another (SGLang's order); sibling j draws from seed + j.
  for (size_t i = 0; i < prompts.size(); ++i) {
    api::TextOptions t;
    const SamplingParams params = api::sglang_params(sp.is_array() ? sp[i] : sp, &t);
    UPD_REQUIRE(top[i] == 0 || logprob[i]) << "top_logprobs_num needs return_logprob";
    UPD_REQUIRE(start[i] < 0 || logprob[i]) << "logprob_start_len needs return_logprob";
    UPD_REQUIRE(start[i] < static_cast<int64_t>(prompts[i].size()))
        << "logprob_start_len " << start[i] << " is beyond the prompt's " << prompts[i].size() << " tokens";
    for (int64_t j = 0; j < t.n; ++j) {
      GenRequest r;
      r.prompt = prompts[i];
      r.params = params;
      r.params.seed += static_cast<uint64_t>(j);
      r.top_logprobs = static_cast<int32_t>(top[i]);
      r.input_logprobs_from = start[i];
      job.stops.push_back(t.stop.empty() ? nullptr
                                         : std::make_shared<StopMatcher>(tokenizer_, t.stop, t.skip_special,
                                                                         params.min_new_tokens));
      if (job.stops.back())
        r.stop_check = stop_check_of(job.stops.back());
      job.reqs.push_back(std::move(r));
      job.text.push_back(t);
      job.rids.push_back(prompt_rids[i].empty() || t.n == 1 ? prompt_rids[i]
                                                             : prompt_rids[i] + "-" + std::to_string(j));
      job.logprob.push_back(logprob[i]);
    }
  }
  return job;
}

json RolloutService::generate_result(const GenerateJob& job, size_t k, const Completion& c, const std::string& id,
                                     double latency) const {
  const GenResult& g = c.result;
  json meta = {{"id", id},
               {"finish_reason", finish_reason(c, job.text[k])},
               {"prompt_tokens", g.prompt.size()},
               {"completion_tokens", g.tokens.size()},
               {"cached_tokens", g.cached_tokens},
               {"spec_verify_ct", g.spec.rounds},
               {"spec_accepted_by_source",
                {{"eagle", g.spec.accepted_by[0]}, {"group", g.spec.accepted_by[1]}, {"history", g.spec.accepted_by[2]}}},
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
  if (job.logprob[k]) {
    json lp = json::array();
    for (size_t t = 0; t < g.tokens.size(); ++t)
      lp.push_back(json::array(
          {g.logprobs[t], g.tokens[t], job.lp_text ? json(tokenizer_->decode({g.tokens[t]}, false)) : json()}));
    meta["output_token_logprobs"] = std::move(lp);
    if (!g.top_logprobs.empty())
      meta["output_top_logprobs"] = top_logprobs_json(g, job.lp_text ? tokenizer_.get() : nullptr);
    if (!g.input_logprobs.empty()) {  // the prompt's tokens from logprob_start_len (position 0: null)
      json in = json::array();
      const size_t from = g.prompt.size() - g.input_logprobs.size();
      for (size_t t = 0; t < g.input_logprobs.size(); ++t) {
        const float v = g.input_logprobs[t];
        const int32_t id = g.prompt[from + t];
        in.push_back(json::array({std::isnan(v) ? json() : json(v), id,
                                  job.lp_text ? json(tokenizer_->decode({id}, false)) : json()}));
      }
      meta["input_token_logprobs"] = std::move(in);
    }
  }
  json r = {{"output_ids", g.tokens}, {"meta_info", std::move(meta)}};
  const api::TextOptions& text = job.text[k];
  if (job.stops[k] && g.matched_stop >= 0) {
    r["text"] = job.stops[k]->text(text.no_stop_trim);
  } else if (tokenizer_) {
    const bool trim = g.finish_reason == "stop" && !g.tokens.empty() && !text.no_stop_trim;
    r["text"] = tokenizer_->decode({g.tokens.begin(), g.tokens.end() - (trim ? 1 : 0)}, text.skip_special);
  }
  return r;
}

http::Response RolloutService::generate(const json& body) {
  auto job = std::make_shared<GenerateJob>(parse_generate(body));
  const auto t0 = Clock::now();
  const uint64_t first_id = next_id_.fetch_add(job->reqs.size());
  auto id_of = [job, first_id](size_t k) { return job->rids[k].empty() ? std::to_string(first_id + k) : job->rids[k]; };
  auto result = [this, job, t0, id_of](size_t k, const Completion& c) {
    return generate_result(*job, k, c, id_of(k), std::chrono::duration<double>(Clock::now() - t0).count());
  };
  if (api::bool_or(body, "stream", false))
    return stream_generate(job, id_of, result);
  int status = 0;
  std::string why;
  const std::vector<Completion> out = run_job(std::move(job->reqs), job->rids, job->group, &status, &why);
  if (status != 0)
    return api::error(status, why);
  json results = json::array();
  for (size_t k = 0; k < out.size(); ++k)
    results.push_back(result(k, out[k]));
  return api::json_response(200, job->batch || results.size() > 1 ? results : results[0]);
}

// SGLang's stream: per event one request's output so far ({"index", "text", "output_ids",
// "meta_info": {"id", "finish_reason": null, "completion_tokens"}}), then each final result
// with its index, then [DONE].
http::Response RolloutService::stream_generate(const std::shared_ptr<GenerateJob>& job,
                                               const std::function<std::string(size_t)>& id_of,
                                               const std::function<json(size_t, const Completion&)>& result) {
  auto texts = std::make_shared<std::vector<std::string>>(job->reqs.size());
  auto deltas = std::make_shared<std::vector<TextDelta>>();
  for (size_t k = 0; k < job->reqs.size(); ++k)
    deltas->emplace_back(tokenizer_, job->text[k].skip_special, job->text[k].stop);
  StreamEvents ev;
  ev.update = [texts, deltas, id_of](size_t k, const std::vector<int32_t>& toks) {
    (*texts)[k] += (*deltas)[k].next(toks);
    return sse({{"index", k},
                {"text", (*texts)[k]},
                {"output_ids", toks},
                {"meta_info", {{"id", id_of(k)}, {"finish_reason", nullptr}, {"completion_tokens", toks.size()}}}});
  };
  ev.finish = [result](const std::vector<Completion>& out) {
    std::string events;
    for (size_t k = 0; k < out.size(); ++k) {
      json r = result(k, out[k]);
      r["index"] = k;
      events += sse(r);
    }
    return events;
  };
  return stream_job(std::move(job->reqs), job->rids, job->group, std::move(ev));
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
