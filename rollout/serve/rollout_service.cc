#include "rollout/serve/rollout_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <set>
#include <sstream>

#include "kernels/core/error.h"
#include "kernels/io/weight_version.h"
#include "messaging/metrics.h"
#include "rollout/serve/dashboard.h"

namespace updraft {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct RolloutService::Job {
  std::vector<GenRequest> reqs;
  Clock::time_point t0 = Clock::now();
  std::vector<Completion> out;
  int status = 0;  // 0: done; else the error's HTTP status
  std::string error;
  std::promise<void> done;
};

namespace {

http::Response json_response(int status, const json& j) {
  http::Response r;
  r.status = status;
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

// An Error's message without the source location the error macros put first ("x.cc:12: "): an
// API client needs the reason, not our file names.
std::string reason(const std::string& what) {
  const size_t sep = what.find(": ");
  if (sep == std::string::npos)
    return what;
  const std::string head = what.substr(0, sep);
  const size_t colon = head.rfind(':');
  if (colon == std::string::npos || colon + 1 == head.size() || head.find(' ') != std::string::npos)
    return what;
  for (size_t i = colon + 1; i < head.size(); ++i)
    if (head[i] < '0' || head[i] > '9')
      return what;
  return what.substr(sep + 2);
}

http::Response error(int status, const std::string& why) {
  return json_response(status, {{"error", reason(why)}});
}

void check_keys(const json& obj, const std::set<std::string>& allowed, const std::string& where) {
  UPD_REQUIRE(obj.is_object()) << where << " must be a JSON object";
  for (const auto& [k, v] : obj.items())
    UPD_REQUIRE(allowed.count(k)) << where << "." << k << " is not supported (refused rather than ignored)";
}

std::vector<int32_t> ids_of(const json& a, const std::string& where) {
  UPD_REQUIRE(a.is_array()) << where << " must be a list of token ids";
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (const json& v : a) {
    UPD_REQUIRE(v.is_number_integer() && v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX)
        << where << " must hold integer token ids";
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

bool is_id_list(const json& a) { return a.is_array() && (a.empty() || a[0].is_number()); }

// SGLang's sampling_params -> ours. skip_special (out) is the decode setting for "text".
SamplingParams sglang_params(const json& sp, bool* skip_special) {
  static const std::set<std::string> allowed = {
      "temperature", "top_p", "top_k", "max_new_tokens", "stop_token_ids", "ignore_eos", "sampling_seed", "seed",
      "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim"};
  SamplingParams p;
  p.max_new_tokens = 128;
  *skip_special = true;
  if (sp.is_null())
    return p;
  check_keys(sp, allowed, "sampling_params");
  if (sp.contains("temperature"))
    p.temperature = sp["temperature"].get<float>();
  if (sp.contains("top_p"))
    p.top_p = sp["top_p"].get<float>();
  if (sp.contains("top_k")) {
    const int64_t k = sp["top_k"].get<int64_t>();
    UPD_REQUIRE(k >= -1 && k <= INT32_MAX) << "sampling_params.top_k must be -1, 0 (off) or positive";
    p.top_k = static_cast<int32_t>(std::max<int64_t>(k, 0));
  }
  if (sp.contains("max_new_tokens"))
    p.max_new_tokens = sp["max_new_tokens"].get<int64_t>();
  if (sp.contains("stop_token_ids") && !sp["stop_token_ids"].is_null())
    p.stop_token_ids = ids_of(sp["stop_token_ids"], "sampling_params.stop_token_ids");
  if (sp.contains("ignore_eos"))
    p.ignore_eos = sp["ignore_eos"].get<bool>();
  for (const char* k : {"sampling_seed", "seed"})
    if (sp.contains(k) && !sp[k].is_null()) {
      p.has_seed = true;
      p.seed = sp[k].get<uint64_t>();
    }
  if (sp.contains("skip_special_tokens"))
    *skip_special = sp["skip_special_tokens"].get<bool>();
  return p;
}

json finish_reason(const Completion& c) {
  if (c.result.finish_reason == "stop" && !c.result.tokens.empty())
    return {{"type", "stop"}, {"matched", c.result.tokens.back()}};
  return {{"type", "length"}, {"length", c.result.tokens.size()}};
}

}  // namespace

RolloutService::RolloutService(RolloutServiceOptions options, Worker& worker, const PolicyConfig& policy_config,
                               std::shared_ptr<const Tokenizer> tokenizer,
                               std::shared_ptr<messaging::RecordSender> sender)
    : options_(std::move(options)), worker_(worker), config_(policy_config), tokenizer_(std::move(tokenizer)),
      sender_(std::move(sender)), started_(std::chrono::system_clock::now()) {
  UPD_REQUIRE(options_.max_batch_prompts > 0 && options_.max_queued_prompts > 0)
      << "serve: max_batch_prompts and max_queued_prompts must be positive";
  thread_ = std::thread([this] { loop(); });
}

RolloutService::~RolloutService() { shutdown(); }

void RolloutService::apply_staged_when_idle() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    apply_requested_ = true;
  }
  cv_.notify_all();
}

RolloutServiceStats RolloutService::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  RolloutServiceStats s = stats_;
  s.paused = paused_;
  return s;
}

void RolloutService::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable())
      return;
    stopping_ = true;
  }
  cv_.notify_all();
  idle_cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
  std::deque<std::shared_ptr<Job>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(queue_);
    stats_.queued_prompts = 0;
  }
  for (auto& j : left) {
    j->status = 503;
    j->error = "the server is shutting down";
    j->done.set_value();
  }
}

std::vector<Completion> RolloutService::run_job(std::vector<GenRequest> reqs, int* status, std::string* err) {
  // Requests without a seed get one from the service: each batch runs a fresh engine, whose
  // default seeds repeat from batch to batch.
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  for (GenRequest& r : reqs) {
    Engine::validate(r, config_);
    if (!r.params.has_seed) {
      r.params.has_seed = true;
      r.params.seed = rng();
    }
  }
  auto job = std::make_shared<Job>();
  const auto n = static_cast<int64_t>(reqs.size());
  job->reqs = std::move(reqs);
  std::future<void> done = job->done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      *status = 503;
      *err = "the server is shutting down";
      return {};
    }
    if (stats_.queued_prompts + n > options_.max_queued_prompts) {
      ++stats_.refused_full;
      *status = 503;
      *err = "queue full: " + std::to_string(stats_.queued_prompts) + " prompts waiting (max_queued_prompts " +
             std::to_string(options_.max_queued_prompts) + ")";
      return {};
    }
    ++stats_.requests;
    stats_.prompts += n;
    stats_.queued_prompts += n;
    queue_.push_back(job);
  }
  cv_.notify_all();
  done.wait();
  *status = job->status;
  *err = job->error;
  return std::move(job->out);
}

void RolloutService::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || apply_requested_ || (!paused_ && !queue_.empty()); });
    if (apply_requested_) {
      apply_requested_ = false;
      lock.unlock();
      worker_.apply_staged();
      lock.lock();
      idle_cv_.notify_all();
    }
    if (stopping_)
      return;
    if (paused_ || queue_.empty())
      continue;
    cv_.wait_until(lock, Clock::now() + options_.batch_wait,
                   [&] { return stopping_ || paused_ || stats_.queued_prompts >= options_.max_batch_prompts; });
    if (stopping_)
      return;
    if (paused_)
      continue;
    std::vector<std::shared_ptr<Job>> jobs;
    int64_t taken = 0;
    while (!queue_.empty() &&
           (taken == 0 || taken + static_cast<int64_t>(queue_.front()->reqs.size()) <= options_.max_batch_prompts)) {
      taken += static_cast<int64_t>(queue_.front()->reqs.size());
      jobs.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    stats_.queued_prompts -= taken;
    running_batch_ = true;
    lock.unlock();

    // One serving batch; if it fails (a request the KV cache cannot hold fails the engine), each
    // request runs alone so only the bad one is refused.
    auto run = [&](const std::vector<std::shared_ptr<Job>>& group) {
      std::vector<GenRequest> all;
      for (const auto& j : group)
        all.insert(all.end(), j->reqs.begin(), j->reqs.end());
      BatchReport rep = worker_.generate(all, GenMode::kServing);
      int64_t queued = 0;
      bool record_error = false;
      if (sender_) {
        try {
          queued = worker_.stream_records(rep);
        } catch (const Error& e) {
          record_error = true;
          spdlog::warn("serve: records of a batch not streamed: {}", e.what());
        }
      }
      size_t at = 0;  // after the records: they are made from the completions
      for (const auto& j : group)
        for (size_t i = 0; i < j->reqs.size(); ++i)
          j->out.push_back(std::move(rep.completions[at++]));
      std::lock_guard<std::mutex> g(mu_);
      record_batch(rep);
      ++stats_.batches;
      stats_.completions += static_cast<int64_t>(all.size());
      stats_.generated_tokens += rep.generated_tokens;
      stats_.records_queued += queued;
      stats_.record_errors += record_error ? 1 : 0;
    };
    try {
      run(jobs);
    } catch (const Error& e) {
      for (const auto& j : jobs) {
        j->out.clear();
        if (jobs.size() == 1) {
          j->status = 400;
          j->error = e.what();
          continue;
        }
        try {
          run({j});
        } catch (const Error& e1) {
          j->out.clear();
          j->status = 400;
          j->error = e1.what();
        }
      }
    } catch (const std::exception& e) {  // an internal failure: answered, and the service goes on
      spdlog::error("serve: batch of {} requests failed: {}", jobs.size(), e.what());
      for (const auto& j : jobs) {
        j->out.clear();
        j->status = 500;
        j->error = std::string("internal error: ") + e.what();
      }
    }
    for (const auto& j : jobs)
      j->done.set_value();
    lock.lock();
    running_batch_ = false;
    idle_cv_.notify_all();
  }
}

void RolloutService::record_batch(const BatchReport& rep) {
  const double t = std::chrono::duration<double>(std::chrono::system_clock::now() - started_).count();
  json p = {{"t", t},
            {"policy_version", rep.policy_version},
            {"drafter_version", rep.drafter_version},
            {"replaced_drafter_version", rep.replaced_drafter_version},
            {"completions", rep.completions.size()},
            {"tokens", rep.generated_tokens},
            {"seconds", rep.generate_seconds},
            {"tokens_per_second", rep.tokens_per_second()},
            {"rounds", rep.spec.rounds},
            {"tau", rep.spec.rounds > 0 ? json(rep.spec.tau()) : json()},
            {"mean_depth", rep.mean_depth}};
  history_.push_back(std::move(p));
  while (history_.size() > options_.max_history)
    history_.pop_front();
}

http::Response RolloutService::handle(const http::Request& req) {
  const std::string& p = req.path;
  const bool get = req.method == "GET", post = req.method == "POST";
  try {
    if (p == "/health") {
      if (!get)
        return error(405, "use GET");
      std::lock_guard<std::mutex> lock(mu_);
      return stopping_ ? error(503, "shutting down") : json_response(200, {{"status", "ok"}});
    }
    if (p == "/metrics") {
      if (!get)
        return error(405, "use GET");
      http::Response r;
      r.content_type = "text/plain; version=0.0.4";
      r.body = metrics_text();
      return r;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_)
        return error(503, "the server is shutting down");
    }
    if (p == "/get_weight_version" || p == "/get_model_info" || p == "/get_server_info" || p == "/v1/models") {
      if (!get)
        return error(405, "use GET");
      if (p == "/get_weight_version")
        return json_response(200, {{"weight_version", std::to_string(worker_.policy_version())},
                                   {"policy_version", worker_.policy_version()},
                                   {"drafter_version", worker_.drafter_version()}});
      if (p == "/get_model_info")
        return json_response(200, {{"model_path", options_.model_path},
                                   {"tokenizer_path", tokenizer_ ? options_.model_path : ""},
                                   {"is_generation", true},
                                   {"weight_version", std::to_string(worker_.policy_version())}});
      if (p == "/v1/models")
        return json_response(200, {{"object", "list"},
                                   {"data", json::array({{{"id", options_.model_name},
                                                          {"object", "model"},
                                                          {"owned_by", "updraft"}}})}});
      return json_response(200, server_info());
    }
    if (p == "/dashboard" || p == "/dashboard/data") {
      if (!get)
        return error(405, "use GET");
      if (p == "/dashboard/data") {
        std::lock_guard<std::mutex> lock(mu_);
        return json_response(200, {{"model", options_.model_name},
                                   {"batches", json(std::vector<json>(history_.begin(), history_.end()))}});
      }
      http::Response r;
      r.content_type = "text/html; charset=utf-8";
      r.body = dashboard_html();
      return r;
    }
    if (p == "/flush_cache") {
      if (!get && !post)
        return error(405, "use GET or POST");
      return json_response(200, {{"success", true},
                                 {"message", "no KV cache outlives a batch (each batch runs its own engine)"}});
    }
    if (p == "/pause_generation" || p == "/continue_generation") {
      if (!post)
        return error(405, "use POST");
      if (p == "/pause_generation")
        return pause();
      {
        std::lock_guard<std::mutex> lock(mu_);
        paused_ = false;
      }
      cv_.notify_all();
      return json_response(200, {{"success", true}});
    }
    if (p == "/generate" || p == "/v1/completions" || p == "/update_weights_from_disk") {
      if (!post)
        return error(405, "use POST");
      const json body = json::parse(req.body, nullptr, false);
      if (body.is_discarded() || !body.is_object())
        return error(400, "the body must be a JSON object");
      if (p == "/generate")
        return generate(body);
      if (p == "/v1/completions")
        return completions(body);
      return update_weights(body);
    }
    return error(404, "no route " + p);
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.bad_requests;
    return error(400, e.what());
  } catch (const json::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.bad_requests;
    return error(400, std::string("bad field: ") + e.what());
  }
}

http::Response RolloutService::generate(const json& body) {
  check_keys(body,
             {"input_ids", "text", "sampling_params", "return_logprob", "rid", "stream", "logprob_start_len",
              "top_logprobs_num"},
             "body");
  UPD_REQUIRE(body.contains("input_ids") != body.contains("text")) << "give exactly one of input_ids and text";
  UPD_REQUIRE(!body.value("stream", false)) << "stream is not supported: the whole completion is returned";
  UPD_REQUIRE(body.value("top_logprobs_num", 0) == 0) << "top_logprobs_num > 0 is not supported";
  UPD_REQUIRE(body.value("logprob_start_len", -1) == -1) << "logprob_start_len is not supported (only -1)";
  std::vector<std::vector<int32_t>> prompts;
  bool batch = false;
  if (body.contains("input_ids")) {
    const json& in = body["input_ids"];
    batch = in.is_array() && !in.empty() && in[0].is_array();
    if (batch) {
      for (size_t i = 0; i < in.size(); ++i)
        prompts.push_back(ids_of(in[i], "input_ids[" + std::to_string(i) + "]"));
    } else {
      prompts.push_back(ids_of(in, "input_ids"));
    }
  } else {
    UPD_REQUIRE(tokenizer_ != nullptr) << "text needs the model's tokenizer.json; send input_ids";
    const json& in = body["text"];
    batch = in.is_array();
    for (const json& t : batch ? in : json::array({in})) {
      UPD_REQUIRE(t.is_string()) << "text must be a string or a list of strings";
      prompts.push_back(tokenizer_->encode(t.get<std::string>()));
    }
  }
  UPD_REQUIRE(!prompts.empty()) << "no prompt given";
  const json sp = body.value("sampling_params", json());
  UPD_REQUIRE(!sp.is_array() || sp.size() == prompts.size())
      << "sampling_params: a list needs one entry per prompt (" << prompts.size() << ")";
  std::vector<GenRequest> reqs(prompts.size());
  std::vector<bool> skip_special(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    bool skip = true;
    reqs[i].prompt = std::move(prompts[i]);
    reqs[i].params = sglang_params(sp.is_array() ? sp[i] : sp, &skip);
    skip_special[i] = skip;
  }
  const bool logprob = body.value("return_logprob", false);
  std::string rid;
  if (body.contains("rid") && body["rid"].is_string())
    rid = body["rid"].get<std::string>();
  const auto t0 = Clock::now();
  int status = 0;
  std::string why;
  const std::vector<Completion> out = run_job(std::move(reqs), &status, &why);
  if (status != 0)
    return error(status, why);
  const double latency = std::chrono::duration<double>(Clock::now() - t0).count();
  const uint64_t first_id = next_id_.fetch_add(out.size());
  json results = json::array();
  for (size_t i = 0; i < out.size(); ++i) {
    const Completion& c = out[i];
    json meta = {{"id", rid.empty() ? std::to_string(first_id + i) : (batch ? rid + "-" + std::to_string(i) : rid)},
                 {"finish_reason", finish_reason(c)},
                 {"prompt_tokens", c.result.prompt.size()},
                 {"completion_tokens", c.result.tokens.size()},
                 {"cached_tokens", 0},
                 {"spec_verify_ct", c.result.spec.rounds},
                 {"weight_version", std::to_string(c.policy_version)},
                 {"policy_version", c.policy_version},
                 {"drafter_version", c.drafter_version},
                 {"e2e_latency", latency}};
    if (c.result.spec.rounds > 0)
      meta["spec_accept_length"] = c.result.spec.tau();
    if (logprob) {
      json lp = json::array();
      for (size_t t = 0; t < c.result.tokens.size(); ++t)
        lp.push_back(json::array({c.result.logprobs[t], c.result.tokens[t], nullptr}));
      meta["output_token_logprobs"] = std::move(lp);
    }
    json r = {{"output_ids", c.result.tokens}, {"meta_info", std::move(meta)}};
    if (tokenizer_)
      r["text"] = tokenizer_->decode(c.result.tokens, skip_special[i]);
    results.push_back(std::move(r));
  }
  return json_response(200, batch ? results : results[0]);
}

http::Response RolloutService::completions(const json& body) {
  check_keys(body,
             {"model", "prompt", "max_tokens", "temperature", "top_p", "seed", "n", "stop", "logprobs", "stream", "user"},
             "body");
  UPD_REQUIRE(body.contains("prompt")) << "prompt is required";
  UPD_REQUIRE(body.value("n", 1) == 1) << "n must be 1 (send the prompt n times)";
  UPD_REQUIRE(!body.value("stream", false)) << "stream is not supported";
  UPD_REQUIRE(!body.contains("stop") || body["stop"].is_null() || (body["stop"].is_array() && body["stop"].empty()))
      << "stop strings are not supported (use /generate with stop_token_ids)";
  const json& pr = body["prompt"];
  std::vector<std::vector<int32_t>> prompts;
  auto text = [&](const json& t) {
    UPD_REQUIRE(tokenizer_ != nullptr) << "a text prompt needs the model's tokenizer.json; send token ids";
    return tokenizer_->encode(t.get<std::string>());
  };
  if (pr.is_string()) {
    prompts.push_back(text(pr));
  } else if (is_id_list(pr) && !pr.empty()) {
    prompts.push_back(ids_of(pr, "prompt"));
  } else {
    UPD_REQUIRE(pr.is_array() && !pr.empty()) << "prompt must be text, token ids, or a list of either";
    for (size_t i = 0; i < pr.size(); ++i)
      prompts.push_back(pr[i].is_string() ? text(pr[i]) : ids_of(pr[i], "prompt[" + std::to_string(i) + "]"));
  }
  bool logprobs = false;
  if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    UPD_REQUIRE(body["logprobs"].get<int64_t>() == 0)
        << "logprobs > 0 asks for alternatives, which are not computed; 0 returns the sampled tokens' logprobs";
    logprobs = true;
  }
  std::vector<GenRequest> reqs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    reqs[i].prompt = std::move(prompts[i]);
    SamplingParams& p = reqs[i].params;
    p.max_new_tokens = body.value("max_tokens", int64_t{16});
    p.temperature = body.value("temperature", 1.0f);
    p.top_p = body.value("top_p", 1.0f);
    if (body.contains("seed") && !body["seed"].is_null()) {
      p.has_seed = true;
      p.seed = body["seed"].get<uint64_t>() + i;
    }
  }
  int status = 0;
  std::string why;
  const std::vector<Completion> out = run_job(std::move(reqs), &status, &why);
  if (status != 0)
    return error(status, why);
  json choices = json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const GenResult& g = out[i].result;
    prompt_tokens += static_cast<int64_t>(g.prompt.size());
    completion_tokens += static_cast<int64_t>(g.tokens.size());
    json c = {{"index", i},
              {"text", tokenizer_ ? tokenizer_->decode(g.tokens, true) : ""},
              {"token_ids", g.tokens},
              {"finish_reason", g.finish_reason},
              {"logprobs", nullptr}};
    if (logprobs) {
      json toks = json::array();
      for (int32_t t : g.tokens)
        toks.push_back(tokenizer_ ? tokenizer_->decode({t}, false) : std::to_string(t));
      c["logprobs"] = {{"tokens", toks}, {"token_logprobs", g.logprobs}, {"top_logprobs", nullptr}};
    }
    choices.push_back(std::move(c));
  }
  return json_response(
      200, {{"id", "cmpl-" + std::to_string(next_id_.fetch_add(1))},
            {"object", "text_completion"},
            {"created", std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count()},
            {"model", options_.model_name},
            {"choices", choices},
            {"usage",
             {{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}}},
            {"updraft",
             {{"policy_version", out.empty() ? 0 : out[0].policy_version},
              {"drafter_version", out.empty() ? 0 : out[0].drafter_version}}}});
}

http::Response RolloutService::update_weights(const json& body) {
  check_keys(body, {"model_path", "is_draft_model", "weight_version", "load_format", "flush_cache", "abort_all_requests"},
             "body");
  UPD_REQUIRE(body.contains("model_path") && body["model_path"].is_string()) << "model_path is required";
  UPD_REQUIRE(!body.contains("load_format") || body["load_format"].is_null() || body["load_format"] == "auto")
      << "load_format: only auto";
  UPD_REQUIRE(!body.value("abort_all_requests", false)) << "abort_all_requests is not supported";
  const std::string path = body["model_path"].get<std::string>();
  const bool draft = body.value("is_draft_model", false);
  const char* kind = draft ? "drafter" : "policy";
  uint64_t version = 0;
  try {
    version = verify_version(path, kind, VerifyLevel::kSizes).version;
  } catch (const Error& e) {
    return json_response(400, {{"success", false}, {"message", reason(e.what())}});
  }
  if (body.contains("weight_version") && !body["weight_version"].is_null()) {
    const json& wv = body["weight_version"];
    const std::string want = wv.is_string() ? wv.get<std::string>() : wv.dump();
    if (want != std::to_string(version))
      return json_response(400, {{"success", false},
                                 {"message", "weight_version " + want + " does not match the manifest's version " +
                                                 std::to_string(version)}});
  }
  std::string why;
  const bool ok = draft ? worker_.offer_drafter(path, &why) : worker_.offer_policy(path, &why);
  if (!ok)
    return json_response(400, {{"success", false}, {"message", reason(why)}});
  apply_staged_when_idle();
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] {
    return stopping_ || (draft ? worker_.drafter_version() : worker_.policy_version()) >= version;
  });
  if (stopping_)
    return json_response(503, {{"success", false}, {"message", "the server is shutting down"}});
  return json_response(200, {{"success", true},
                             {"message", std::string(kind) + " v" + std::to_string(version) + " serving"},
                             {"policy_version", worker_.policy_version()},
                             {"drafter_version", worker_.drafter_version()}});
}

http::Response RolloutService::pause() {
  std::unique_lock<std::mutex> lock(mu_);
  paused_ = true;
  idle_cv_.wait(lock, [&] { return stopping_ || !running_batch_; });
  return json_response(200, {{"success", true}, {"message", "paused; no batch is running"}});
}

nlohmann::json RolloutService::server_info() const {
  const RolloutServiceStats s = stats();
  json j = {{"model_name", options_.model_name},
            {"model_path", options_.model_path},
            {"version", "updraft"},
            {"arch", arch_name(config_.arch)},
            {"num_layers", config_.num_layers},
            {"hidden_size", config_.hidden_size},
            {"vocab_size", config_.vocab_size},
            {"context_length", config_.max_position_embeddings},
            {"policy_version", worker_.policy_version()},
            {"drafter_version", worker_.drafter_version()},
            {"max_batch_prompts", options_.max_batch_prompts},
            {"max_queued_prompts", options_.max_queued_prompts},
            {"paused", s.paused},
            {"queued_prompts", s.queued_prompts},
            {"records", sender_ != nullptr},
            {"uptime_seconds",
             std::chrono::duration<double>(std::chrono::system_clock::now() - started_).count()}};
  if (options_.extra_info)
    j.update(options_.extra_info());
  return j;
}

std::string RolloutService::metrics_text() const {
  std::ostringstream os;
  auto family = [&](const char* name, const char* type, const char* help) {
    os << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  auto sample = [&](const char* name, const std::string& labels, double v) {
    os << name;
    if (!labels.empty())
      os << '{' << labels << '}';
    os << ' ' << v << '\n';
  };
  const RolloutServiceStats s = stats();
  const std::pair<const char*, double> service[] = {
      {"updraft_serve_requests_total", static_cast<double>(s.requests)},
      {"updraft_serve_prompts_total", static_cast<double>(s.prompts)},
      {"updraft_serve_bad_requests_total", static_cast<double>(s.bad_requests)},
      {"updraft_serve_refused_queue_full_total", static_cast<double>(s.refused_full)},
      {"updraft_serve_batches_total", static_cast<double>(s.batches)},
      {"updraft_serve_completions_total", static_cast<double>(s.completions)},
      {"updraft_serve_generated_tokens_total", static_cast<double>(s.generated_tokens)},
      {"updraft_serve_records_queued_total", static_cast<double>(s.records_queued)},
      {"updraft_serve_record_errors_total", static_cast<double>(s.record_errors)}};
  for (const auto& [name, v] : service) {
    family(name, "counter", "rollout service counter (see rollout/serve/rollout_service.h)");
    sample(name, "", v);
  }
  family("updraft_serve_queued_prompts", "gauge", "prompts waiting for a batch");
  sample("updraft_serve_queued_prompts", "", static_cast<double>(s.queued_prompts));
  family("updraft_serve_paused", "gauge", "1 while generation is paused");
  sample("updraft_serve_paused", "", s.paused ? 1 : 0);

  const WorkerMetrics m = worker_.metrics();
  family("updraft_worker_policy_version", "gauge", "serving policy version");
  sample("updraft_worker_policy_version", "", static_cast<double>(worker_.policy_version()));
  family("updraft_worker_drafter_version", "gauge", "serving drafter version");
  sample("updraft_worker_drafter_version", "", static_cast<double>(worker_.drafter_version()));
  struct Col {
    const char* name;
    const char* help;
    double (*get)(const WorkerMetrics::Cell&);
  };
  const Col cols[] = {
      {"updraft_worker_generated_tokens_total", "tokens generated by serving batches",
       [](const WorkerMetrics::Cell& c) { return static_cast<double>(c.tokens); }},
      {"updraft_worker_completions_total", "completions of serving batches",
       [](const WorkerMetrics::Cell& c) { return static_cast<double>(c.completions); }},
      {"updraft_worker_generate_seconds_total", "seconds spent generating serving batches",
       [](const WorkerMetrics::Cell& c) { return c.seconds; }},
      {"updraft_worker_spec_rounds_total", "speculation rounds at the full settings",
       [](const WorkerMetrics::Cell& c) { return static_cast<double>(c.spec.rounds); }},
      {"updraft_worker_draft_tokens_total", "draft tokens verified",
       [](const WorkerMetrics::Cell& c) { return static_cast<double>(c.spec.drafted); }},
      {"updraft_worker_accepted_tokens_total", "draft tokens accepted",
       [](const WorkerMetrics::Cell& c) { return static_cast<double>(c.spec.accepted); }},
  };
  for (const Col& col : cols) {
    family(col.name, "counter", col.help);
    for (const auto& [ver, cell] : m.by_version)
      sample(col.name,
             "policy_version=\"" + std::to_string(ver.first) + "\",drafter_version=\"" + std::to_string(ver.second) +
                 "\"",
             col.get(cell));
  }
  family("updraft_worker_accepted_at_position_total", "counter",
         "speculation rounds whose accepted length reached the position (1-based)");
  for (const auto& [ver, cell] : m.by_version)
    for (size_t j = 0; j < cell.spec.accepted_at.size(); ++j)
      sample("updraft_worker_accepted_at_position_total",
             "policy_version=\"" + std::to_string(ver.first) + "\",drafter_version=\"" + std::to_string(ver.second) +
                 "\",position=\"" + std::to_string(j + 1) + "\"",
             static_cast<double>(cell.spec.accepted_at[j]));
  const std::pair<const char*, int64_t> events[] = {{"updraft_worker_policy_swaps_total", m.policy_swaps},
                                                    {"updraft_worker_drafter_swaps_total", m.drafter_swaps},
                                                    {"updraft_worker_mid_batch_swaps_total", m.mid_batch_swaps},
                                                    {"updraft_worker_rollbacks_total", m.rollbacks}};
  for (const auto& [name, v] : events) {
    family(name, "counter", "weight hot-swap events");
    sample(name, "", static_cast<double>(v));
  }
  family("updraft_worker_rejected_versions_total", "counter", "weight versions refused by validation");
  sample("updraft_worker_rejected_versions_total", "kind=\"policy\"", static_cast<double>(m.rejected_policy));
  sample("updraft_worker_rejected_versions_total", "kind=\"drafter\"", static_cast<double>(m.rejected_drafter));
  if (sender_)
    os << messaging::render_prometheus(sender_->metrics(), "");
  if (options_.extra_metrics)
    os << options_.extra_metrics();
  return os.str();
}

}  // namespace updraft
