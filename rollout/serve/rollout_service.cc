#include "rollout/serve/rollout_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <random>

#include "kernels/core/error.h"
#include "kernels/io/weight_version.h"
#include "rollout/serve/api_parse.h"
#include "rollout/serve/chat_template.h"
#include "rollout/serve/dashboard.h"

namespace updraft {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using api::error;
using api::json_response;

namespace {

// SGLang's weight_version: null (the manifest's, or the next version), an integer >= 1, or a
// string of digits; other labels are refused by name (versions here are ordered numbers).
uint64_t requested_weight_version(const json& body) {
  if (!body.contains("weight_version") || body["weight_version"].is_null())
    return 0;
  const json& wv = body["weight_version"];
  if (wv.is_number_unsigned() && wv.get<uint64_t>() >= 1)
    return wv.get<uint64_t>();
  if (wv.is_string()) {
    const std::string s = wv.get<std::string>();
    if (!s.empty() && s.size() <= 18 && s.find_first_not_of("0123456789") == std::string::npos && std::stoull(s) >= 1)
      return std::stoull(s);
  }
  throw Error("weight_version " + wv.dump() + " is not supported (accepted: null, or a version number >= 1)");
}

}  // namespace

RolloutService::RolloutService(RolloutServiceOptions options, Worker& worker, const PolicyConfig& policy_config,
                               std::shared_ptr<const Tokenizer> tokenizer,
                               std::shared_ptr<messaging::RecordSender> sender)
    : options_(std::move(options)),
      worker_(worker),
      config_(policy_config),
      tokenizer_(std::move(tokenizer)),
      sender_(std::move(sender)),
      started_(std::chrono::system_clock::now()) {
  UPD_REQUIRE(options_.max_inflight_prompts > 0) << "serve: max_inflight_prompts must be positive";
  chat_ = options_.chat;
  if (!chat_.chat_template.empty()) {
    try {
      chat_template_ = std::make_unique<chat::Template>(chat_.chat_template);
    } catch (const Error& e) {  // served without chat; the chat route says why
      chat_error_ = api::reason(e.what());
      spdlog::warn("serve: the model's chat template is not usable: {}", chat_error_);
    }
  }
}

RolloutService::~RolloutService() {
  shutdown();
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
    if (stopping_)
      return;
    stopping_ = true;
  }
  worker_.stop();  // running requests finish and are answered; the rest get "shutting down"
}

void RolloutService::record_window(const WindowReport& w) {
  json p = {{"t", w.t},
            {"policy_version", w.policy_version},
            {"drafter_version", w.drafter_version},
            {"policy_swapped", w.policy_swapped},
            {"drafter_swapped", w.drafter_swapped},
            {"completions", w.completions},
            {"steps", w.steps},
            {"tokens", w.tokens},
            {"seconds", w.seconds},
            {"tokens_per_second", w.tokens_per_second()},
            {"rounds", w.spec.rounds},
            {"probe_rounds", w.probe_spec.rounds},
            // The probes' acceptance (full settings) is comparable across drafters and loads; else
            // the drafter's own part of the rounds (suffix drafts' acceptance left out).
            {"tau", w.probe_spec.rounds > 0     ? json(w.probe_spec.tau())
                    : w.drafter_spec.rounds > 0 ? json(w.drafter_spec.tau())
                    : w.spec.rounds > 0         ? json(w.spec.tau())
                                                : json()},
            {"mean_depth", w.mean_depth},
            {"mean_batch", w.mean_batch}};
  for (int k = 0; k < kDraftSources; ++k)  // draft tokens accepted by source (suffix drafts beside the drafter's)
    p[std::string("accepted_") + draft_source_name(static_cast<DraftSource>(k))] = w.spec.accepted_by[k];
  std::lock_guard<std::mutex> lock(mu_);
  history_.push_back(std::move(p));
  while (history_.size() > options_.max_history)
    history_.pop_front();
}

std::vector<Completion> RolloutService::run_job(std::vector<GenRequest> reqs, const std::vector<std::string>& rids,
                                                const std::string& group, int* status, std::string* err) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  for (GenRequest& r : reqs) {
    worker_.check(r);
    if (!r.params.has_seed) {  // repeated prompts are not sampled identically
      r.params.has_seed = true;
      r.params.seed = rng();
    }
  }
  const auto n = static_cast<int64_t>(reqs.size());
  auto refuse = [&](int s, const std::string& why) {
    *status = s;
    *err = why;
    return std::vector<Completion>();
  };
  if (n > options_.max_inflight_prompts)
    return refuse(413, "a request of " + std::to_string(n) + " prompts exceeds max_inflight_prompts (" +
                           std::to_string(options_.max_inflight_prompts) + "); split it");
  auto for_each_key = [&](const std::vector<uint64_t>& ids, auto&& f) {  // the (rid, worker id) pairs registered
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!rids[i].empty())
        f(rids[i], ids[i]);
      if (!group.empty())
        f(group, ids[i]);
    }
  };
  std::shared_ptr<Submission> sub;
  {  // submitted and registered under one lock: /abort_request finds every prompt it can see
    std::lock_guard<std::mutex> lock(mu_);  // order: this, then the worker's (never the reverse)
    if (stopping_)
      return refuse(503, "the server is shutting down");
    if (stats_.inflight_prompts + n > options_.max_inflight_prompts) {
      ++stats_.refused_full;
      return refuse(503, "busy: " + std::to_string(stats_.inflight_prompts) +
                             " prompts in flight (max_inflight_prompts " +
                             std::to_string(options_.max_inflight_prompts) + ")");
    }
    try {
      sub = worker_.submit_all(std::move(reqs));
    } catch (const Error&) {  // checked above, so only a stopping worker refuses
      return refuse(503, "the server is shutting down");
    }
    ++stats_.requests;
    stats_.prompts += n;
    stats_.inflight_prompts += n;
    for_each_key(sub->ids(), [&](const std::string& rid, uint64_t id) { rids_.insert({rid, id}); });
  }
  std::vector<Completion> out = sub->take();
  std::lock_guard<std::mutex> lock(mu_);
  for_each_key(sub->ids(), [&](const std::string& rid, uint64_t id) {
    const auto [lo, hi] = rids_.equal_range(rid);
    for (auto it = lo; it != hi; ++it)
      if (it->second == id) {
        rids_.erase(it);
        return;
      }
  });
  stats_.inflight_prompts -= n;
  for (const Completion& c : out) {
    if (c.status == CompletionStatus::kShuttingDown)
      return refuse(503, "the server is shutting down");
    if (c.status == CompletionStatus::kFailed)
      return refuse(500, "internal error: " + c.error);
    ++stats_.completions;
    stats_.aborted += c.result.finish_reason == "abort" ? 1 : 0;
    stats_.generated_tokens += static_cast<int64_t>(c.result.tokens.size());
  }
  return out;
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
    if (p == "/health_generate") {
      if (!get)
        return error(405, "use GET");
      return health_generate();
    }
    if (p == "/get_weight_version" || p == "/get_model_info" || p == "/model_info" || p == "/get_server_info" ||
        p == "/server_info" || p == "/v1/models" || p == "/get_load" || p == "/dashboard" || p == "/dashboard/data") {
      if (!get)
        return error(405, "use GET");
      return info_route(p);
    }
    if (p == "/flush_cache") {
      if (!get && !post)
        return error(405, "use GET or POST");
      const Worker::FlushResult f = worker_.flush_cache();
      return json_response(f.ok ? 200 : 400, {{"success", f.ok}, {"message", f.message}});
    }
    const bool body_route = p == "/generate" || p == "/v1/completions" || p == "/v1/chat/completions" ||
                            p == "/update_weights_from_disk" ||
                            p == "/pause_generation" || p == "/continue_generation" || p == "/abort_request";
    if (!body_route)
      return error(404, "no route " + p);
    if (!post)
      return error(405, "use POST");
    json body = json::object();
    std::string why;
    if (!req.body.empty() && !api::parse_body(req.body, &body, &why))
      return error(why.rfind("the body is too large", 0) == 0 ? 413 : 400, why);
    if (!body.is_object())
      return error(400, "the body must be a JSON object");
    if (p == "/generate")
      return generate(body);
    if (p == "/v1/completions")
      return completions(body);
    if (p == "/v1/chat/completions")
      return chat_completions(body);
    if (p == "/update_weights_from_disk")
      return update_weights(body);
    if (p == "/pause_generation")
      return pause(body);
    if (p == "/abort_request")
      return abort_request(body);
    api::check_keys(body, {}, "body");
    worker_.resume();
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
    return json_response(200, {{"success", true}});
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

http::Response RolloutService::abort_request(const json& body) {
  api::check_keys(body, {"rid", "abort_all"}, "body");
  const bool all = api::bool_or(body, "abort_all", false);
  const std::string rid = api::string_or(body, "rid", "");
  UPD_REQUIRE(all || api::has(body, "rid")) << "give a rid (a string) or abort_all";
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (all) {
      for (const auto& [r, id] : rids_)
        ids.push_back(id);
    } else if (!rid.empty()) {
      const auto [lo, hi] = rids_.equal_range(rid);
      for (auto it = lo; it != hi; ++it)
        ids.push_back(it->second);
    }
  }
  std::sort(ids.begin(), ids.end());  // a prompt can be registered under its rid and its group's
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  int64_t n = 0;
  for (uint64_t id : ids)
    n += worker_.abort(id) ? 1 : 0;
  return json_response(200, {{"success", true}, {"aborted", n}});
}

http::Response RolloutService::pause(const json& body) {
  api::check_keys(body, {"mode"}, "body");
  const std::string mode = api::string_or(body, "mode", "abort");
  UPD_REQUIRE(mode == "abort" || mode == "in_place" || mode == "retract")
      << "mode must be abort, in_place or retract (got " << mode << ")";
  worker_.pause(mode == "abort"     ? Worker::PauseMode::kAbort
                : mode == "retract" ? Worker::PauseMode::kRetract
                                    : Worker::PauseMode::kInPlace);
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = true;
  return json_response(200, {{"success", true}, {"message", "paused (" + mode + "); no step is running"}});
}

http::Response RolloutService::update_weights(const json& body) {
  api::check_keys(
      body, {"model_path", "is_draft_model", "weight_version", "load_format", "flush_cache", "abort_all_requests"},
      "body");
  UPD_REQUIRE(body.contains("model_path") && body["model_path"].is_string()) << "model_path is required";
  UPD_REQUIRE(!body.contains("load_format") || body["load_format"].is_null() || body["load_format"] == "auto")
      << "load_format: only auto";
  UPD_REQUIRE(!api::bool_or(body, "abort_all_requests", false)) << "abort_all_requests is not supported";
  const std::string path = body["model_path"].get<std::string>();
  const bool draft = api::bool_or(body, "is_draft_model", false);
  const char* kind = draft ? "drafter" : "policy";
  const uint64_t want = requested_weight_version(body);
  std::string why;
  WeightVersion accepted;
  const bool ok = draft ? worker_.offer_drafter(path, &why, want, &accepted)
                        : worker_.offer_policy(path, &why, want, &accepted);
  if (!ok)
    return json_response(400, {{"success", false}, {"message", api::reason(why)}});
  const uint64_t version = accepted.version;
  if (!worker_.wait_serving(draft, version, std::chrono::hours(24)))
    return json_response(503, {{"success", false}, {"message", "the server is shutting down"}});
  return json_response(200, {{"success", true},
                             {"message", std::string(kind) + " v" + std::to_string(version) + " serving"},
                             {"policy_version", worker_.policy_version()},
                             {"drafter_version", worker_.drafter_version()},
                             {"weight_version", std::to_string(version)},
                             {"sha256", accepted.sha256}});
}

}  // namespace updraft
