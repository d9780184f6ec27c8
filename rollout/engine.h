// Generation with continuous batching, plain or speculative (EAGLE-3), per request.
//
// Requests join between steps (submit) and leave when they finish. Each step runs one batched
// policy forward holding, for every running sequence, either a prompt chunk (newly admitted
// ones; at most `prefill_chunk` prompt tokens per step, so long prompts do not stall decoding),
// its pending token (plain decoding), or its draft tree (speculative decoding: the tree's root
// is the pending token; verification accepts a path and adds a bonus token, spec_verify.h).
// A request is admitted when the KV caches have blocks for its prompt plus max_new_tokens (plus
// one round's tree and draft scratch when it speculates); it holds them until it finishes.
//
// Speculation (when the engine has a drafter and the request does not opt out): the prompt's
// forward also captures the policy's aux states; the drafter is extended over the committed
// (state, next token) pairs and proposes a tree (drafter/proposer.h) for the next step; after
// verification the target KV keeps the accepted path only, the drafter is extended over the
// accepted pairs with the aux states of the verify pass, and proposes again. The draft cache
// holds committed pairs only. Settings (steps, top_k, draft_tokens) apply to the whole batch.
//
// Sampling (per request): temperature 0 = greedy (argmax, lowest id on ties); otherwise the
// token is drawn from softmax(logits / temperature), filtered by top_k then top_p and
// renormalised (ops::sampling_probs), with uniform01(seed, i) for the i-th output token, so a
// seeded request gives the same tokens whatever else is in the batch. Speculative requests
// follow the same distribution exactly (the verification rule of spec_verify.h).
//
// Logprobs: for every output token, the log-probability under the distribution it was drawn
// from (the temperature-scaled, top-k/top-p filtered, renormalised policy: the RL convention).
// For greedy requests, whose sampling distribution is degenerate, it is the log-probability
// under the unscaled, unfiltered policy, log_softmax(logits). Speculative decoding reports the
// same quantity.
//
// Stopping: a token in stop_token_ids (and the model's eos ids unless ignore_eos) ends the
// request with finish reason "stop"; that token is included in the output. Otherwise the
// request ends with "length" after max_new_tokens. Tokens a round accepted beyond the stop are
// discarded.
//
// Capture (per request, GenRequest::capture): the drafter's training data, gathered from the
// forwards generation runs anyway (no extra pass): the policy's aux hidden states at every
// position of prompt + output ([n, A*H], bf16; A aux layers: the drafter's, else
// EngineOptions::capture_aux_layers or the config's default; the final position's row, which no
// training pair reads, is zero) and, for every output token, the top-k log-probabilities of the
// unscaled policy distribution at the position that produced it (trainer/ttt_data.h's teacher).
//
// Metrics: per request and in aggregate, speculative rounds, drafted and accepted tokens,
// accepted per position (round count whose accepted length reached position j), and draft and
// verify seconds. tau = 1 + accepted / rounds (eagle3.md E.1).
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

#include "drafter/draft_model.h"
#include "drafter/draft_tree.h"
#include "kernels/nn/kv_cache.h"
#include "rollout/policy_model.h"
#include "rollout/spec_verify.h"

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
  bool speculate = true;  // used when the engine has a drafter
  bool capture = false;   // return the drafter's training data with the result (see above)
};

// Speculation counters (per request, and summed over the engine).
// verify_seconds: the policy's forward passes of the steps that speculated (they verify the
// trees and decode the rest of the batch); draft_seconds: the drafter's passes (extending its
// cache over the committed pairs and proposing the next trees). Everything else a step does
// (distributions, acceptance, sampling, emitting, capture, KV commit) is the remainder of the
// wall time. Per request, the batched passes are shared out: the forward by the rows the
// request had in it, the draft round equally among the sequences in it.
struct SpecStats {
  int64_t rounds = 0, drafted = 0, accepted = 0;
  std::vector<int64_t> accepted_at;  // [j]: rounds whose accepted length reached j + 1
  int64_t truncated = 0;  // rounds whose accepted tokens were cut by a stop token or the length limit
  double draft_seconds = 0, verify_seconds = 0;
  double tau() const { return rounds == 0 ? 1.0 : 1.0 + static_cast<double>(accepted) / static_cast<double>(rounds); }
  // Acceptance of position j given positions < j were accepted (n-alpha for chains).
  double alpha(size_t j) const;
  void add_round(int64_t drafted_tokens, int64_t accepted_tokens);
  void merge(const SpecStats& o);
  // Leaves what was added since `earlier`, a snapshot of these same totals.
  void subtract(const SpecStats& earlier);
};

// One speculation round of a request: draft tokens verified, and how many were accepted.
struct SpecRound {
  int32_t drafted = 0, accepted = 0;
};

struct GenResult {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string finish_reason;  // "stop" or "length"
  SpecStats spec;
  std::vector<SpecRound> rounds;  // every speculation round, in order (spec sums them)
  // Capture (requests with capture only): aux [prompt + tokens, A*H] bf16; teacher top-k per
  // output token, row-major [tokens, teacher_k].
  Tensor aux;
  int64_t teacher_k = 0;
  std::vector<int32_t> teacher_ids;
  std::vector<float> teacher_logprobs;
};

struct EngineOptions {
  int64_t kv_cache_bytes = int64_t{256} << 20;
  int64_t block_size = 16;
  int64_t max_batch = 64;
  int64_t prefill_chunk = 512;
  uint64_t seed = 0;  // seeds requests that bring none
  SpecSettings spec;  // tree shape when a drafter is given
  int64_t draft_kv_cache_bytes = int64_t{64} << 20;
  AcceptRule accept_rule = AcceptRule::Exact;  // NoResidual only for the losslessness test's control
  int64_t capture_teacher_k = 16;
  std::vector<int64_t> capture_aux_layers;  // without a drafter; empty: the config's default
};

struct EngineStats {
  int64_t steps = 0, prompt_tokens = 0, generated_tokens = 0;
  SpecStats spec;
  // Wall time of the work only capture does: the teacher's log_softmax (when no greedy row needs
  // it anyway) and top-k, their and the aux states' copies to the host, gathering the rows of
  // committed positions, and the bf16 conversion of a finished request's aux states. Not in it:
  // the aux outputs of the forward, which speculation computes anyway and which without a
  // drafter are a copy of A x hidden floats per row.
  double capture_seconds = 0;
  int64_t drafter_swaps = 0;  // swap_drafter() calls that succeeded
  double swap_seconds = 0;    // their wall time (rebuilding the draft caches)
};

class Engine {
 public:
  // With a drafter, requests speculate unless they opt out; the drafter must fit the policy.
  Engine(const PolicyModel& model, const EngineOptions& opts = {}, const DraftModel* drafter = nullptr);

  uint64_t submit(GenRequest req);  // throws Error for a bad request
  std::vector<GenResult> step();    // one batched forward; the requests that finished in it
  std::vector<GenResult> run();     // steps until every submitted request has finished
  // Replaces the drafter between steps, with sequences in flight (a hot-swap): every speculating
  // running sequence's draft cache is rebuilt for the new drafter over its committed pairs
  // (their aux states recomputed by a policy forward over its committed tokens into a scratch
  // cache, so no state needs keeping for it) and its next tree re-proposed; waiting requests
  // will draft with it from their prompt. Greedy requests give the same tokens as without the
  // swap, and sampled ones keep their distribution (verification does not change).
  // `drafter` must fit the policy like the first one and outlive its use. Throws Error, with
  // the old drafter and its caches still serving, if it does not fit or its cache cannot hold
  // the sequences in flight. Cost: about one prefill of every in-flight sequence's committed
  // tokens (EngineStats::swap_seconds).
  void swap_drafter(const DraftModel* drafter);
  // A running request's state between steps: positions in the policy's cache, output tokens so
  // far, and the draft tree its next step verifies (empty when none is proposed yet). All empty
  // when the request is not running.
  struct InFlight {
    int64_t cached = 0;
    std::vector<int32_t> tokens;
    DraftTree tree;
  };
  InFlight in_flight(uint64_t id) const;
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
    SeqKv kv, dkv;          // policy and draft caches
    bool spec = false;      // speculates
    int64_t prefilled = 0;  // prompt tokens in the cache
    DraftTree tree;         // the next step's verification tree (root = pending token)
    GenResult result;
    std::vector<float> cap_aux;  // capture: aux rows of committed positions, in order
  };
  void admit();
  bool is_stop(const Seq& s, int32_t tok) const;
  // Appends emitted tokens until a stop or the length limit; how many were kept.
  size_t emit(Seq& s, const std::vector<int32_t>& tokens, const std::vector<float>& logprobs);
  void draft_round(const std::vector<Seq*>& seqs, const std::vector<std::vector<int32_t>>& pair_rows,
                   const std::vector<std::vector<int32_t>>& pair_tokens, const Tensor& aux);

  const PolicyModel& model_;
  EngineOptions opts_;
  void finish_capture(Seq& s) const;
  void rebuild_draft(Seq& s, KvCache& scratch);  // swap_drafter: one sequence's cache and tree
  const std::vector<int64_t>& aux_layers() const;

  const DraftModel* drafter_;
  std::vector<int64_t> capture_layers_;
  KvCache cache_;
  std::unique_ptr<KvCache> draft_cache_;
  uint64_t next_id_ = 1;
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;
  EngineStats stats_;
};

}  // namespace updraft
