// `updraft generate`: plain (non-speculative) generation from token ids with a Hugging Face
// model directory; one request per --prompt-ids, all batched together. Prints one JSON object
// per request (output ids, per-token logprobs, finish reason) on stdout and a throughput line on
// stderr. A bad request is reported with its reason and the others still run (exit code 1).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace updraft {

struct GenerateArgs {
  std::string model;
  std::vector<std::string> prompt_ids;  // "1,2,3" per request
  int64_t max_new_tokens = 32;
  float temperature = 0.f;
  int32_t top_k = 0;
  float top_p = 1.f;
  int64_t seed = -1;
  std::string stop_ids;
  bool ignore_eos = false;
  std::string device = "cpu";
  int64_t kv_cache_mb = 256;
};

void add_generate_options(CLI::App& cmd, GenerateArgs& a);
int run_generate(const GenerateArgs& a);

}  // namespace updraft
