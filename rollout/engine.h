// Plain (non-speculative) generation with continuous batching: the baseline every speedup is
// measured against, and the sampling/logprob contract the speculative engine must reproduce.
//
// Requests join between steps (submit) and leave when they finish; each step runs one batched
// forward holding one decode token for every running sequence plus prompt chunks of newly
// admitted ones (at most `prefill_chunk` prompt tokens per step, so long prompts do not stall
// decoding). A request is admitted when the KV cache has blocks for its prompt plus its
// max_new_tokens; it holds them until it finishes, so a running sequence never waits for memory.
//
// Sampling (per request): temperature 0 = greedy (argmax, lowest id on ties); otherwise the
// token is drawn from softmax(logits / temperature), filtered by top_k then top_p and
// renormalised (ops::sampling_probs), with uniform01(seed, i) for the i-th output token, so a
// seeded request gives the same tokens whatever else is in the batch.
//
// Logprobs: for every output token, the log-probability under the distribution it was drawn
// from (the temperature-scaled, top-k/top-p filtered, renormalised policy: the RL convention).
// For greedy requests, whose sampling distribution is degenerate, it is the log-probability
// under the unscaled, unfiltered policy, log_softmax(logits). Speculative decoding reports the
// same quantity.
//
// Stopping: a token in stop_token_ids (and the model's eos ids unless ignore_eos) ends the
// request with finish reason "stop"; that token is included in the output. Otherwise the
// request ends with "length" after max_new_tokens.
//
// Bad requests (empty prompt, token ids outside the vocabulary, prompt + max_new_tokens beyond
// the model's context, impossible sampling parameters, a request larger than the whole KV
// cache) are rejected by submit() with an Error that says why; nothing else is affected.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "rollout/kv_cache.h"
#include "rollout/policy_model.h"

namespace updraft {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  int64_t max_new_tokens = 128;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool has_seed = false;
  uint64_t seed = 0;
};

struct GenRequest {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

struct GenResult {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string finish_reason;  // "stop" or "length"
};

struct EngineOptions {
  int64_t kv_cache_bytes = int64_t{256} << 20;
  int64_t block_size = 16;
  int64_t max_batch = 64;
  int64_t prefill_chunk = 512;
  uint64_t seed = 0;  // seeds requests that bring none
};

struct EngineStats {
  int64_t steps = 0, prompt_tokens = 0, generated_tokens = 0;
};

class Engine {
 public:
  Engine(const PolicyModel& model, const EngineOptions& opts = {});

  uint64_t submit(GenRequest req);  // throws Error for a bad request
  std::vector<GenResult> step();    // one batched forward; the requests that finished in it
  std::vector<GenResult> run();     // steps until every submitted request has finished
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  const EngineStats& stats() const { return stats_; }
  const KvCache& cache() const { return cache_; }

  // Checks a request against the model and limits; throws Error naming the problem.
  static void validate(const GenRequest& req, const PolicyConfig& cfg);

 private:
  struct Seq {
    uint64_t id;
    GenRequest req;
    uint64_t seed;
    SeqKv kv;
    int64_t prefilled = 0;  // prompt tokens in the cache
    GenResult result;
  };
  void admit();
  bool is_stop(const Seq& s, int32_t tok) const;

  const PolicyModel& model_;
  EngineOptions opts_;
  KvCache cache_;
  uint64_t next_id_ = 1;
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;
  EngineStats stats_;
};

}  // namespace updraft
