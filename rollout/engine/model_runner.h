// Runs the policy over one step's plan (rollout/engine/scheduler.h) and brings to the host what
// verification needs: one batched forward holding, per entry, a prompt or recompute chunk, or the
// draft tree its sequence verifies (a single pending token when it does not speculate).
//
// Logit rows: every node of a tree; the last prompt token of a sequence that completes its
// prompt this step (it draws the first output token); none for a recompute chunk (its next
// token is already known); and for a request that asks for input logprobs, the prompt rows of a
// prefill chunk whose next token's logprob is not recorded yet (EntryRows::inputs). Distributions on the host, per logit row: the raw logits; their
// log_softmax when a greedy row or capture needs it (logp stays on the device for the teacher's
// top-k); the filtered sampling distribution (ops::sampling_probs) when a sampled row needs it.
// Requests with logit processors (logit_process.h) have their rows processed on the host first;
// every distribution above then comes from the processed logits.
// The aux states of every row come back on the device when `aux` is asked.
#pragma once

#include <cstdint>
#include <vector>

#include "rollout/engine/scheduler.h"
#include "rollout/policy_model.h"

namespace updraft {

struct EntryRows {
  int64_t first_row = 0, rows = 0;   // this entry's token rows in the forward
  int64_t cached = 0;                // kv.length before the step
  int64_t first_logit = 0, logits = 0;  // its logit rows that verify (or draw the first token)
  // Rows for input logprobs (GenRequest::input_logprobs_from), before those: row i predicts the
  // prompt token at input_pos + i.
  int64_t first_input = 0, inputs = 0, input_pos = 0;
};

struct RunOut {
  std::vector<EntryRows> at;  // per entry of the plan
  ForwardOut fo;              // device: logits, aux
  int64_t rows = 0, prefill_rows = 0;
  Tensor host_logits, host_logp, host_probs;  // f32 [R, V] on the host; logp/probs only when needed
  Tensor logp;                                // device log_softmax, defined when host_logp is or capture asks
  double forward_seconds = 0;
  double logp_only_for_capture_seconds = 0;  // the log_softmax's time when only capture needed it
};

struct RunOptions {
  bool aux = false;      // capture the aux states of every row
  bool capture = false;  // some entry captures: keep the device log_softmax for the teacher
  std::vector<int64_t> aux_layers;
  std::vector<int32_t> eos_token_ids;  // for min_new_tokens (logit_process.h)
  ForwardProfile* profile = nullptr;    // the forward's parts are added here when set
};

RunOut run_policy(const PolicyModel& model, KvCache& cache, const StepPlan& plan, const RunOptions& opts);

}  // namespace updraft
