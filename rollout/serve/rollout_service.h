// The rollout service behind `updraft serve`: a Worker (rollout/worker/worker.h) driven by
// requests over the HTTP API shaped like SGLang's (design.md §11), so RL frameworks that drive
// SGLang over HTTP can point at updraft. handle() maps one HTTP request to its response; the
// HTTP server (http.h) calls it from its connection threads.
//
// Routes (JSON bodies; errors are {"error": {"message", "type", "code"}} (OpenAI's shape) with 400
// for bad input, 404/405, 413, 503). Fields of SGLang's and OpenAI's APIs that are not
// implemented are accepted at their neutral value only (api_parse.h, docs/serving.md's table):
//
//   POST /generate            {"input_ids": [ids] | [[ids], ...]} or {"text": s | [s, ...]} (text
//                             needs the model's tokenizer), "sampling_params" (an object, or one
//                             per prompt), "return_logprob", "rid" (a string, or one per prompt).
//                             Answers one object per prompt (a list for a batch): "output_ids",
//                             "text" (with a tokenizer), "meta_info": id (the rid, else a number
//                             unique to this process), finish_reason {"type": "stop", "matched":
//                             id}, {"type": "length", "length": n} or {"type": "abort", "message"},
//                             prompt_tokens, completion_tokens, spec_verify_ct (speculation rounds),
//                             spec_accept_length (τ; absent without rounds), weight_version (the
//                             policy version, as a string), policy_version, drafter_version (0:
//                             none), e2e_latency, preemptions, engine_step_{submitted,admitted,
//                             first_token,finished} (the engine's step counter at each event), and
//                             with return_logprob (a bool, or one per prompt)
//                             output_token_logprobs [[logprob, id, text or null]], and with
//                             top_logprobs_num k (a count, or one per prompt) output_top_logprobs
//                             (per token, its k most likely alternatives, same shape), and with
//                             logprob_start_len s input_token_logprobs (prompt tokens from s).
//                             sampling_params: temperature (default 1; 0 greedy), top_p, top_k
//                             (0 or -1: off), min_p, max_new_tokens (default 128), min_new_tokens,
//                             stop_token_ids, stop (strings), ignore_eos, the three penalties,
//                             n, sampling_seed (or seed), skip_special_tokens, no_stop_trim (text
//                             keeps a matched stop, else it is cut from text only).
//                             return_text_in_logprobs puts each token's text third. With n > 1
//                             the prompt's completions follow one another (rid-j as their ids).
//                             stream: server-sent events (docs/serving.md, "Streaming").
//   POST /v1/completions      OpenAI-style: "prompt" (text, ids, or a list of either), n,
//                             max_tokens (default 16), temperature, top_p, seed, stop,
//                             presence_penalty, frequency_penalty, logprobs k (0: the sampled
//                             token's logprob; k > 0: also its k most likely alternatives),
//                             stream and stream_options; "choices", "usage", and "updraft".
//   POST /v1/chat/completions OpenAI chat: messages rendered by the model's chat template
//                             (ChatSetup), then generated as a completion (chat_route.cc).
//   POST /abort_request       {"rid": id} or {"abort_all": true}: the requests end at the worker's
//                             next step, their KV freed; each answers with what it had and finish
//                             reason "abort". {"success": true, "aborted": n}. A rid matches
//                             exactly: a prompt's own rid, or the string rid a batch was sent
//                             with (all its prompts); "" matches nothing (SGLang's default).
//   POST /update_weights_from_disk {"model_path": dir, "is_draft_model": bool, "weight_version":
//                             optional}: dir is a published version (manifest; weight_version
//                             must match it) or a plain Hugging Face policy / EAGLE or speculators
//                             drafter directory as RL frameworks save them (weight_version, else
//                             the next version). The worker's hot-swap path (validated beside the
//                             serving version: config, names, shapes, dtypes, finite). Answers once
//                             the version serves (a drafter between two engine steps, a policy
//                             once the running requests have finished): {"success", "message",
//                             "policy_version", "drafter_version", "weight_version", "sha256":
//                             {file: digest}}; a rejected version: 400,
//                             serving unchanged.
//   POST /pause_generation    {"mode": "abort" (default, as SGLang) | "in_place" | "retract"}: the
//                             worker stops stepping; abort also ends every request in flight
//                             (answered with what it had), retract frees their KV (recomputed on
//                             continue), in_place keeps it. Answers once no step is running.
//   POST /continue_generation stepping resumes.
//   GET|POST /flush_cache     with nothing in flight: releases the comparison engines' caches and
//                             checks that every KV block is free; 400 while requests are in flight.
//   GET /health, /get_model_info (/model_info), /get_server_info (/server_info),
//       /get_weight_version, /v1/models, /get_load
//   GET /health_generate      one greedy token through the engine: 200, or 503 while paused,
//                             stopping, or unfinished after health_generate_timeout.
//   GET /dashboard            the drift dashboard: one self-contained HTML page (no external
//                             resources) plotting τ and tokens/s per window of serving steps over
//                             time, by drafter version, with policy-update and drafter-swap
//                             markers; it polls GET /dashboard/data (the last max_history windows).
//                             With an API key, open it as /dashboard#key=KEY.
//   GET /metrics              Prometheus text: requests, in-flight prompts, the worker's tokens,
//                             rounds and accepted tokens by (policy_version, drafter_version),
//                             acceptance by draft position, the adaptive depth per live-batch
//                             bucket, swaps, rejections and rollbacks, records, extra series.
//
// Scheduling. A request's prompts are validated (Engine::validate and the KV cache's size)
// before anything runs; a bad one fails the whole request with 400 and nothing is generated. The
// prompts go to the worker at once and join its engine at its next step (continuous batching
// across requests). Requests with more prompts than max_inflight_prompts get 413; requests that
// would take the prompts in flight beyond it get 503 (retry later). Requests without a seed get a
// server seed, so repeated prompts are not sampled identically.
//
// shutdown(): new requests get 503, running ones finish and are answered, those not yet running
// get 503; then handle() returns at once for everything but /health (503) and /metrics.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rollout/serve/http.h"
#include "rollout/tokenizer.h"
#include "rollout/worker/worker.h"

namespace updraft {

// What /v1/chat/completions needs from the model's tokenizer_config.json: its chat_template
// (a string, or the "default" of a named list) and the bos/eos token texts it may use.
struct ChatSetup {
  std::string chat_template;  // empty: the chat route answers 400
  std::string bos_token, eos_token;
};
// Read from model_dir/tokenizer_config.json (all empty when there is none); Error when the
// file is not a JSON object.
ChatSetup load_chat_setup(const std::string& model_dir);

class StopMatcher;
struct StreamEvents;
namespace chat {
class Template;
}  // namespace chat

struct RolloutServiceOptions {
  std::string model_name = "updraft";  // reported by /get_model_info and /v1/models
  std::string model_path;
  int64_t max_inflight_prompts = 4096;
  // Extra Prometheus series appended to /metrics (e.g. the weight subscriber's), may be empty.
  std::function<std::string()> extra_metrics;
  // Extra fields for /get_server_info, may be empty.
  std::function<nlohmann::json()> extra_info;
  ChatSetup chat;              // the chat route's template (load_chat_setup)
  size_t max_history = 2000;  // windows kept for /dashboard/data
  // GET /health_generate answers 503 when its one-token request has not finished by then.
  std::chrono::milliseconds health_generate_timeout{20000};
};

struct RolloutServiceStats {
  int64_t requests = 0, prompts = 0, bad_requests = 0, refused_full = 0, completions = 0, aborted = 0;
  int64_t generated_tokens = 0;
  int64_t inflight_prompts = 0;  // gauge
  bool paused = false;
};

class RolloutService {
 public:
  // The worker must outlive the service. Feed the worker's windows to record_window() (its
  // on_window option) for the dashboard.
  RolloutService(RolloutServiceOptions options, Worker& worker, const PolicyConfig& policy_config,
                 std::shared_ptr<const Tokenizer> tokenizer, std::shared_ptr<messaging::RecordSender> sender);
  ~RolloutService();
  RolloutService(const RolloutService&) = delete;
  RolloutService& operator=(const RolloutService&) = delete;

  http::Response handle(const http::Request& req);
  void record_window(const WindowReport& w);  // any thread
  void shutdown();
  RolloutServiceStats stats() const;

 private:
  struct GenerateJob;  // generate_route.cc
  GenerateJob parse_generate(const nlohmann::json& body);
  nlohmann::json generate_result(const GenerateJob& job, size_t k, const Completion& c, const std::string& id,
                                 double latency) const;
  http::Response generate(const nlohmann::json& body);
  http::Response stream_generate(const std::shared_ptr<GenerateJob>& job, const std::function<std::string(size_t)>& id_of,
                                 const std::function<nlohmann::json(size_t, const Completion&)>& result);
  // Runs a job as run_job does and answers with a stream (rollout/serve/stream.h): `events`
  // shapes what is sent as tokens arrive and at the end; a client that goes away aborts the job
  // (by `group`, or a name made for it).
  http::Response stream_job(std::vector<GenRequest> reqs, std::vector<std::string> rids, std::string group,
                            StreamEvents events);
  http::Response completions(const nlohmann::json& body);
  http::Response chat_completions(const nlohmann::json& body);
  // The requests of an OpenAI body (completions or chat): each prompt n times, with its
  // sampling fields, stop strings (one matcher per request, into *stops) and top logprobs.
  std::vector<GenRequest> openai_requests(const nlohmann::json& body, const std::vector<std::vector<int32_t>>& prompts,
                                          int64_t top, std::vector<std::shared_ptr<StopMatcher>>* stops);
  // Runs an OpenAI job (completions, or chat): streamed when the body asks, else each choice's
  // object from `choice` (index, result, text after stop strings) inside openai_envelope().
  using OpenAiChoice = std::function<nlohmann::json(size_t, const GenResult&, const std::string&)>;
  http::Response run_openai(std::vector<GenRequest> reqs, const std::vector<std::shared_ptr<StopMatcher>>& stops,
                            const nlohmann::json& body, bool chat, const OpenAiChoice& choice);
  std::string openai_text(const GenResult& g, const std::shared_ptr<StopMatcher>& stop) const;
  // OpenAI's stream events for completions (chat false) or chat (openai_routes.cc).
  StreamEvents openai_events(bool chat, const std::vector<std::shared_ptr<StopMatcher>>& stops, int64_t n,
                             bool usage);
  // OpenAI's response object around `choices`: id, created, model, usage (summed over `out`, n
  // choices per prompt: each prompt's tokens counted once).
  nlohmann::json openai_envelope(const char* object, const char* id_prefix, const std::vector<Completion>& out,
                                 nlohmann::json choices, int64_t n);
  http::Response update_weights(const nlohmann::json& body);
  http::Response pause(const nlohmann::json& body);
  http::Response abort_request(const nlohmann::json& body);
  http::Response health_generate();
  http::Response info_route(const std::string& path);
  std::string metrics_text() const;
  nlohmann::json server_info() const;
  // Submits the prompts and waits for their completions; empty with *status set when refused.
  // Each runs under its rid (rids[i]) and the batch's `group` rid for /abort_request (empty: none).
  std::vector<Completion> run_job(std::vector<GenRequest> reqs, const std::vector<std::string>& rids,
                                  const std::string& group, int* status, std::string* error);

  RolloutServiceOptions options_;
  Worker& worker_;
  PolicyConfig config_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  ChatSetup chat_;
  std::unique_ptr<chat::Template> chat_template_;  // null: no template, or chat_error_ says why
  std::string chat_error_;
  std::shared_ptr<messaging::RecordSender> sender_;
  std::chrono::system_clock::time_point started_;

  mutable std::mutex mu_;
  bool stopping_ = false, paused_ = false;
  std::atomic<uint64_t> next_id_{1};  // response ids
  RolloutServiceStats stats_;
  std::multimap<std::string, uint64_t> rids_;  // rid (or a batch's group rid) -> worker request ids in flight
  std::deque<nlohmann::json> history_;         // one point per window, oldest first
};

}  // namespace updraft
