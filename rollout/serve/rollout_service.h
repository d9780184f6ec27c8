// The rollout service behind `updraft serve`: a Worker (rollout/worker/worker.h) driven by
// requests over the HTTP API shaped like SGLang's (design.md §11), so RL frameworks that drive
// SGLang over HTTP can point at updraft. handle() maps one HTTP request to its response; the
// HTTP server (http.h) calls it from its connection threads.
//
// Routes (JSON bodies; errors are {"error": reason} with 400 for bad input, 404/405, 503):
//   POST /generate            {"input_ids": [ids] | [[ids], ...]} or {"text": s | [s, ...]} (text
//                             needs the model's tokenizer), "sampling_params" (an object, or one
//                             per prompt), "return_logprob", "rid". Answers one object per prompt
//                             (a list for a batch): "output_ids", "text" (with a tokenizer),
//                             "meta_info": id (rid, else a number unique to this process),
//                             finish_reason {"type": "stop", "matched": id} or
//                             {"type": "length", "length": n}, prompt_tokens, completion_tokens,
//                             spec_verify_ct (speculation rounds), spec_accept_length (τ; absent
//                             without rounds), weight_version (the policy version, as a string),
//                             policy_version, drafter_version (the serving one; 0: none), e2e_latency,
//                             and with return_logprob output_token_logprobs [[logprob, id, null]].
//                             sampling_params: temperature (default 1; 0 greedy), top_p, top_k
//                             (0 or -1: off), max_new_tokens (default 128), stop_token_ids,
//                             ignore_eos, sampling_seed (or seed); skip_special_tokens,
//                             spaces_between_special_tokens and no_stop_trim are accepted and do
//                             not change the tokens. Any other key, or "stream": true, is refused
//                             by name, not ignored: a parameter that would change the
//                             distribution must not be silently dropped in RL.
//   POST /v1/completions      OpenAI-style: "prompt" (text, ids, or a list of either),
//                             max_tokens (default 16), temperature, top_p, seed, logprobs (null or
//                             an int: the sampled token's logprob is returned, no alternatives),
//                             n = 1, stop = null; "choices", "usage", and "updraft" (versions).
//   POST /update_weights_from_disk {"model_path": version dir, "is_draft_model": bool,
//                             "weight_version": optional, must match the manifest}: the worker's
//                             hot-swap path (validated beside the serving version). Answers once
//                             the version serves (applied at once when idle, else at the running
//                             batch's next boundary): {"success", "message", "policy_version",
//                             "drafter_version"}; a rejected version: 400, serving unchanged.
//   POST /pause_generation    no new batch starts; answers when the running one has finished.
//   POST /continue_generation batches start again.
//   GET|POST /flush_cache     no KV cache outlives a batch here (each batch runs its own engine),
//                             so there is nothing to flush; answers success saying so.
//   GET /health, /get_model_info, /get_server_info, /get_weight_version, /v1/models,
//   GET /dashboard            the drift dashboard: one self-contained HTML page (no external
//                             resources) plotting τ and tokens/s per serving batch over time, by
//                             drafter version, with policy-update and drafter-swap markers; it
//                             polls GET /dashboard/data (the last max_history batches as JSON).
//                             With an API key, open it as /dashboard#key=KEY.
//   GET /metrics              Prometheus text: requests, queue, batches, the worker's tokens,
//                             rounds and accepted tokens by (policy_version, drafter_version),
//                             acceptance by draft position, swaps, rejections and rollbacks, the
//                             records sent to the buffer, and the caller's extra series.
//
// Scheduling. A request's prompts are validated (Engine::validate) before they are queued; a
// bad one fails the whole request with 400 and nothing is generated. One scheduler thread takes
// every queued request (up to max_batch_prompts prompts; a request is never split), after
// waiting batch_wait for more to arrive, and runs them as one serving batch (continuous
// batching inside it: Engine), then streams the batch's records (when the worker has a sender)
// and answers each request. Requests that arrive during a batch wait for the next one. Requests
// queued beyond max_queued_prompts are refused with 503. Staged weight versions swap in at batch
// boundaries, and at once while idle.
//
// shutdown(): new requests get 503, the running batch finishes and is answered, queued ones get
// 503; then handle() returns at once for everything but /health (503) and /metrics.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "rollout/serve/http.h"
#include "rollout/tokenizer.h"
#include "rollout/worker/worker.h"

namespace updraft {

struct RolloutServiceOptions {
  std::string model_name = "updraft";  // reported by /get_model_info and /v1/models
  std::string model_path;
  int64_t max_batch_prompts = 256;
  int64_t max_queued_prompts = 4096;
  std::chrono::microseconds batch_wait{5000};
  // Extra Prometheus series appended to /metrics (e.g. the weight subscriber's), may be empty.
  std::function<std::string()> extra_metrics;
  // Extra fields for /get_server_info, may be empty.
  std::function<nlohmann::json()> extra_info;
  size_t max_history = 2000;  // serving batches kept for /dashboard/data
};

struct RolloutServiceStats {
  int64_t requests = 0, prompts = 0, bad_requests = 0, refused_full = 0, batches = 0, completions = 0;
  int64_t generated_tokens = 0, records_queued = 0, record_errors = 0;
  int64_t queued_prompts = 0;  // gauge
  bool paused = false;
};

class RolloutService {
 public:
  // The worker must outlive the service; the service's thread is its only generate() caller.
  RolloutService(RolloutServiceOptions options, Worker& worker, const PolicyConfig& policy_config,
                 std::shared_ptr<const Tokenizer> tokenizer, std::shared_ptr<messaging::RecordSender> sender);
  ~RolloutService();
  RolloutService(const RolloutService&) = delete;
  RolloutService& operator=(const RolloutService&) = delete;

  http::Response handle(const http::Request& req);
  // Versions staged on the worker from elsewhere (a weight subscriber's offers) swap in at the
  // next batch; this asks for them at once when no batch is running.
  void apply_staged_when_idle();
  void shutdown();
  RolloutServiceStats stats() const;

 private:
  struct Job;
  http::Response generate(const nlohmann::json& body);
  http::Response completions(const nlohmann::json& body);
  http::Response update_weights(const nlohmann::json& body);
  http::Response pause();
  std::string metrics_text() const;
  nlohmann::json server_info() const;
  // Queues the prompts and waits for their completions; an Error (status in *status) when
  // refused.
  std::vector<Completion> run_job(std::vector<GenRequest> reqs, int* status, std::string* error);
  void loop();
  void record_batch(const BatchReport& rep);  // mu_ held

  RolloutServiceOptions options_;
  Worker& worker_;
  PolicyConfig config_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<messaging::RecordSender> sender_;
  std::chrono::system_clock::time_point started_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // the scheduler waits on it
  std::condition_variable idle_cv_;  // pause and update_weights wait on it
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false, paused_ = false, running_batch_ = false, apply_requested_ = false;
  std::atomic<uint64_t> next_id_{1};  // response ids
  RolloutServiceStats stats_;
  std::deque<nlohmann::json> history_;  // one point per serving batch, oldest first
  std::thread thread_;
};

}  // namespace updraft
