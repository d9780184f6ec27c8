// What a caller gives the engine (GenRequest) and gets back (GenResult), with the engine's
// options and counters. The semantics of sampling, logprobs, stopping and capture are in
// rollout/engine/engine.h.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "drafter/draft_tree.h"
#include "kernels/core/tensor.h"
#include "rollout/spec/draft_sampling.h"
#include "rollout/spec/spec_stats.h"
#include "rollout/spec/suffix_drafts.h"
#include "rollout/spec/verifier.h"

namespace updraft {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  int64_t max_new_tokens = 128;
  int64_t min_new_tokens = 0;  // stop tokens (eos, stop_token_ids) masked until this many are out
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  // Penalties (rollout/engine/logit_process.h): 1 / 0 / 0 are off.
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  bool has_seed = false;
  uint64_t seed = 0;
};

// Called on the engine's thread after each token a request emits, with its output so far
// (the new token last); a value >= 0 ends the request (finish reason "stop", GenResult::
// matched_stop set to it). The caller's text-level stops (stop strings) live here. It must not
// call into the engine.
using StopCheck = std::function<int32_t(const std::vector<int32_t>& output)>;

// Streaming: the tokens a request emitted in one step, in order, with their logprobs. Called on
// the engine's thread from inside Engine::step(); it must not call into the engine.
using TokenCallback = std::function<void(uint64_t id, const std::vector<int32_t>& tokens,
                                         const std::vector<float>& logprobs)>;

struct GenRequest {
  std::vector<int32_t> prompt;
  SamplingParams params;
  bool speculate = true;  // used while the engine has a drafter (or suffix drafts are on)
  // Siblings (GRPO's n completions of one prompt) share a group: each drafts from the others'
  // text (rollout/spec/suffix_drafts.h). 0: the group of every running request with the same prompt.
  uint64_t group = 0;
  bool capture = false;   // return the drafter's training data with the result
  // Speculate at the full settings every step, whatever depth adaptive speculation picks for the
  // others: its acceptance measures the drafter comparably across drafters and loads (a round's
  // start depends on how deep the previous rounds went, so acceptance at mixed depths does not).
  bool probe = false;
  TokenCallback on_tokens;  // optional
  StopCheck stop_check;     // optional
  // Alternatives per output token (GenResult::top_logprobs): the k most likely tokens of the
  // distribution the token was drawn from. 0: none.
  int32_t top_logprobs = 0;
  // >= 0: also the logprobs of the prompt's tokens from this position on (GenResult::
  // input_logprobs). -1: none.
  int64_t input_logprobs_from = -1;
};

// One speculation round of a request: draft tokens verified, how many were accepted, and the
// depth of the tree they came from; the same by source (DraftSource). The drafter's own share:
// its drafts, how many accepted tokens in a row came from it (the path's prefix of drafter
// nodes), and the depth of its part of the tree (what adaptive depth learns the drafter from).
// suffix_run: the path's prefix of nodes a suffix index proposed, alone or beside the drafter
// (what the suffix drafts would have given at another depth: rollout/spec/adaptive.h). drawn: the
// tree's drafts were drawn from the drafter's distribution (DraftTree::drawn).
// rejected_at: the response index of the token the policy chose where every draft of the round
// was rejected (the accepted path stopped at a node with children); -1 when the path ended at a
// leaf or the round's tokens were cut short (stop token, length). The trainer can weight these
// positions (TttOptions::rejected_weight).
struct SpecRound {
  int32_t drafted = 0, accepted = 0, depth = 0;
  std::array<int32_t, kDraftSources> drafted_by{}, accepted_by{};
  int32_t eagle_run = 0, eagle_depth = 0, suffix_run = 0;
  int32_t rejected_at = -1;
  bool drawn = false;
  float suffix_claimed = 0;  // the suffix nodes' path probabilities summed (their scores: log path probability)
};

struct GenResult {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  // With GenRequest::top_logprobs k: per output token, the k most likely (token, logprob) of its
  // distribution (log_softmax for greedy requests, the filtered sampling distribution otherwise,
  // whose excluded tokens are not listed), most likely first, ties by lower id.
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;
  // With GenRequest::input_logprobs_from f: for prompt tokens [f, prompt length), log p(token |
  // the tokens before it) under the unscaled, unfiltered policy (log_softmax of the logits);
  // NaN for position 0, which has no context.
  std::vector<float> input_logprobs;
  std::string finish_reason;  // "stop", "length" or "abort"
  int32_t matched_stop = -1;  // what GenRequest::stop_check returned when it ended the request
  SpecStats spec;
  std::vector<SpecRound> rounds;  // every speculation round, in order (spec sums them)
  // Capture (requests with capture only): aux [prompt + tokens, A*H] bf16; teacher top-k per
  // output token, row-major [tokens, teacher_k].
  Tensor aux;
  int64_t teacher_k = 0;
  std::vector<int32_t> teacher_ids;
  std::vector<float> teacher_logprobs;
  // Scheduling: engine step indices (EngineStats::steps at the time; -1: never) at which the
  // request was submitted, first ran, emitted its first token and finished; how often it was
  // preempted (its KV freed and later recomputed); its share of the steps' wall time (each
  // step's time split equally among the sequences in it).
  int64_t submitted_step = -1, admitted_step = -1, first_token_step = -1, finished_step = -1;
  int64_t preemptions = 0;
  // Prompt tokens taken over from the caches at its (last) admission instead of prefilled (prefix
  // reuse: rollout/engine/prefix_reuse.h).
  int64_t cached_tokens = 0;
  int64_t plain_steps = 0;  // decoding steps that verified no drafts (plain, or depth 0)
  double step_seconds = 0;
};

struct EngineOptions {
  int64_t kv_cache_bytes = int64_t{256} << 20;
  int64_t block_size = 16;
  int64_t max_batch = 64;        // running sequences at most
  int64_t prefill_chunk = 512;   // prompt (and recompute) tokens per step at most
  uint64_t seed = 0;             // seeds requests that bring none
  SpecSettings spec;             // the full speculation settings when a drafter is set
  // Whether sampling requests' chains draw their drafts (rollout/spec/draft_sampling.h); it
  // decides SpecSettings::sample_drafts each step (and measure_drafts: false under kOff).
  DraftSampling draft_sampling = DraftSampling::kAuto;
  SuffixOptions suffix;          // model-free drafts grafted onto every round (off by default)
  int64_t draft_kv_cache_bytes = int64_t{64} << 20;
  AcceptRule accept_rule = AcceptRule::Exact;  // NoResidual only for the losslessness test's control
  int64_t capture_teacher_k = 16;
  // The aux layers the engine captures (HF hidden_states indices); empty: the drafter's when one
  // is given at construction, else the config's default. Every drafter set later must read these.
  std::vector<int64_t> capture_aux_layers;
  // Committed pairs a sequence may hold for the drafter while it is not drafting (plain steps,
  // prefill) before the drafter absorbs them anyway: bounds the backlog's memory (A*H values per
  // pair). A sequence that finishes during plain steps never pays for its pairs.
  int64_t draft_backlog = 512;
  // Prefix reuse (prefix_reuse.h): an admitted request takes the longest prefix of its context
  // already cached, by a running request or by one of the last `prefix_donors` finished ones,
  // instead of prefilling it. Outputs are identical either way; off only to measure it.
  bool prefix_reuse = true;
  int64_t prefix_donors = 16;
};

struct EngineStats {
  // prompt_tokens: context tokens prefilled (recomputes included; prefix reuse's taken ones not:
  // reused_tokens below).
  int64_t steps = 0, prompt_tokens = 0, generated_tokens = 0;
  SpecStats spec;
  // Wall time of the work only capture does: the teacher's log_softmax (when no greedy row needs
  // it anyway) and top-k, their and the aux states' copies to the host, gathering the rows of
  // committed positions, and the bf16 conversion of a finished request's aux states.
  double capture_seconds = 0;
  int64_t drafter_swaps = 0;  // set_drafter() calls that succeeded with sequences in flight
  double swap_seconds = 0;    // their wall time (rebuilding the draft caches)
  int64_t preemptions = 0, recomputed_tokens = 0, aborted = 0;
  int64_t reused_tokens = 0;  // context tokens taken over by prefix reuse instead of prefilled
  SpecStats probe_spec;  // the rounds of probe requests (GenRequest::probe), also in spec
  // The drafter's part of every round with drafter nodes (its drafts, the run of them accepted
  // first, its depth): its acceptance whether suffix drafts ran beside it or not.
  SpecStats drafter_spec;
  std::vector<int64_t> depth_steps;  // [d]: steps with decoding sequences that ran at depth d
  double step_seconds = 0;           // wall time of all steps
  double suffix_seconds = 0;         // suffix drafts: lookups and grafting
  int64_t suffix_nodes = 0;          // suffix drafts grafted
  int64_t suffix_steps = 0;          // steps that grafted them, and the sum of those steps' bars
  double suffix_bar_sum = 0;         // (the least path probability a new node needed: row_worth)
  int64_t last_depth = 0, last_decoding = 0;  // the latest step's depth and decoding sequences
  int64_t canary_steps = 0;                   // steps that ran a canary at the full settings (DepthChooser::canary)
  // Sampled verification's measures of the drafter's q (Verdict::q_overlap, q_top, q_nodes).
  double q_overlap = 0, q_top = 0;
  int64_t q_nodes = 0;
};

}  // namespace updraft
