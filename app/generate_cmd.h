// `updraft generate`: generation from token ids (--prompt-ids) or text (--prompt, encoded with the
// model's tokenizer.json; outputs then carry output_text too) with a Hugging Face model directory;
// one request per prompt, all batched together; speculative with an EAGLE-3 drafter when --draft names
// one (either checkpoint format). Prints one JSON object per request ("request": its index in
// command-line order from 0, --prompt-ids first; output ids, per-token
// logprobs, finish reason, and with a drafter its rounds and tau) on stdout and a throughput line
// (plus tau and acceptance per position) on stderr. A bad request is reported with its reason and
// the others still run (exit code 1). A drafter that does not fit the policy is an error, unless
// --draft-fallback (or `draft_fallback: true` in a --config file) asks to continue with plain
// decoding, which is then logged as a warning.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace updraft {

struct GenerateArgs {
  std::string model;
  std::vector<std::string> prompt_ids;  // "1,2,3" per request
  std::vector<std::string> prompts;     // text, encoded with the model's tokenizer.json
  std::string tokenizer;                // tokenizer.json path; default: the model directory's
  int64_t max_new_tokens = 32;
  float temperature = 0.f;
  int32_t top_k = 0;
  float top_p = 1.f;
  int64_t seed = -1;
  std::string stop_ids;
  bool ignore_eos = false;
  std::string device = "cpu";
  int64_t kv_cache_mb = 256;
  std::string draft;  // EAGLE-3 drafter directory; empty: plain decoding
  bool draft_fallback = false;
  int64_t spec_steps = 4, spec_top_k = 1, spec_draft_tokens = 5;
  double spec_stop_below = 0;         // SpecSettings::stop_below
  std::string spec_sampled_drafts = "auto";  // EngineOptions::draft_sampling: auto, on, off
  std::string suffix_drafts = "off";  // model-free drafts (rollout/spec/suffix_drafts.h), with or without --draft
  // Records (docs/messaging.md): with `send`, every result's tokens, aux states and teacher
  // top-k (captured while generating) go to the buffer at that endpoint as one Record, labelled
  // (worker_id, policy_version, drafter_version); the command waits up to send_timeout_s for the
  // acknowledgements and fails unless every record was acknowledged.
  std::string send;
  uint32_t worker_id = 0;
  uint64_t policy_version = 1, drafter_version = 0;
  double send_timeout_s = 30;
  std::string curve_key_file, curve_server_file;  // CURVE for --send: own key file, the buffer's public key
};

void add_generate_options(CLI::App& cmd, GenerateArgs& a);
int run_generate(const GenerateArgs& a);

}  // namespace updraft
