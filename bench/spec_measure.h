// spec_bench's side-by-side measurement: the decode-phase throughput of plain or speculative
// decoding over batches of prompts, with the engine's counters, on the policy's device.
#pragma once

#include <cstdint>
#include <vector>

#include "drafter/draft_model.h"
#include "drafter/draft_tree.h"
#include "rollout/policy_model.h"
#include "rollout/spec/spec_stats.h"

namespace updraft::bench {

struct Run {
  double tokens_per_s = 0, seconds = 0;
  double capture_seconds = 0;  // in-engine time of the capture work (EngineStats::capture_seconds)
  int64_t tokens = 0;
  SpecStats spec;
  ForwardProfile forwards;  // the engine's policy forwards after prefill (Engine::decode_forward_parts)

  void add(const Run& o) {  // totals of interleaved repeats
    forwards.matmul_s += o.forwards.matmul_s;
    forwards.attention_s += o.forwards.attention_s;
    forwards.total_s += o.forwards.total_s;
    forwards.forwards += o.forwards.forwards;
    seconds += o.seconds;
    tokens += o.tokens;
    tokens_per_s = static_cast<double>(tokens) / seconds;
    spec.merge(o.spec);
  }
};

// Decode-phase throughput over `groups` batches of B sequences each: every batch is prefilled (and
// its first tokens drawn) before its decode phase is timed; times, tokens and counters add up.
Run measure(const PolicyModel& model, const DraftModel* draft, const SpecSettings& s, int64_t B, int64_t groups,
            const std::vector<std::vector<int32_t>>& prompts, int64_t tokens, float temperature, bool ignore_eos,
            bool capture = false);

}  // namespace updraft::bench
