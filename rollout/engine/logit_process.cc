#include "rollout/engine/logit_process.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/core/error.h"
#include "rollout/engine/sequence.h"

namespace updraft {
namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

// Token counts of a context: the prompt's and the output's (with a tree path added on top).
struct Counts {
  std::vector<int32_t> prompt, output;
  explicit Counts(int64_t V) : prompt(static_cast<size_t>(V), 0), output(static_cast<size_t>(V), 0) {}
};

void apply_row(const SamplingParams& p, const Counts& c, int64_t out_len, const std::vector<int32_t>& eos,
               float* row, int64_t V) {
  const bool rep = p.repetition_penalty != 1.0f, freq = p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  if (rep || freq)
    for (int64_t t = 0; t < V; ++t) {
      const int32_t o = c.output[static_cast<size_t>(t)];
      if (rep && o + c.prompt[static_cast<size_t>(t)] > 0)
        row[t] = row[t] > 0 ? row[t] / p.repetition_penalty : row[t] * p.repetition_penalty;
      if (o > 0)
        row[t] -= p.frequency_penalty * static_cast<float>(o) + p.presence_penalty;
    }
  if (out_len < p.min_new_tokens) {
    for (int32_t t : p.stop_token_ids)
      row[t] = kMasked;
    if (!p.ignore_eos)
      for (int32_t t : eos)
        if (t >= 0 && t < V)
          row[t] = kMasked;
  }
  if (p.min_p > 0 && p.temperature > 0) {
    const float top = *std::max_element(row, row + V);
    const float floor = top + p.temperature * std::log(p.min_p);
    for (int64_t t = 0; t < V; ++t)
      if (row[t] < floor)
        row[t] = kMasked;
  }
}

}  // namespace

bool needs_logit_processing(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f ||
         p.min_new_tokens > 0 || (p.min_p > 0 && p.temperature > 0);
}

void process_logits(const Seq& s, const DraftTree& tree, float* logits, int64_t V, const std::vector<int32_t>& eos) {
  const SamplingParams& p = s.req.params;
  if (!needs_logit_processing(p))
    return;
  Counts c(V);
  for (int32_t t : s.req.prompt)
    ++c.prompt[static_cast<size_t>(t)];
  for (int32_t t : s.result.tokens)
    ++c.output[static_cast<size_t>(t)];
  std::vector<int32_t> path;
  for (int64_t i = 0; i < tree.size(); ++i) {
    path.clear();  // node i's tokens after the root (the root is the context's last token)
    for (int32_t n = static_cast<int32_t>(i); n > 0; n = tree.parent[static_cast<size_t>(n)])
      path.push_back(tree.tokens[static_cast<size_t>(n)]);
    for (int32_t t : path) {
      UPD_CHECK(t >= 0 && t < V) << "process_logits: draft token " << t << " outside the vocabulary";
      ++c.output[static_cast<size_t>(t)];
    }
    apply_row(p, c, s.out_len() + static_cast<int64_t>(path.size()), eos, logits + i * V, V);
    for (int32_t t : path)
      --c.output[static_cast<size_t>(t)];
  }
}

}  // namespace updraft
