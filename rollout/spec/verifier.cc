#include "rollout/spec/verifier.h"

#include <cmath>

#include "kernels/core/error.h"
#include "kernels/ops/sampling.h"

namespace updraft {
namespace {

int32_t argmax_row(const float* x, int64_t V) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (x[i] > x[best])
      best = i;
  return static_cast<int32_t>(best);
}

// As ops::sample_from_probs: the first token whose cumulative mass exceeds u * total.
int32_t draw(const std::vector<double>& p, float u) {
  double total = 0.0;
  for (double v : p)
    total += v;
  UPD_CHECK(total > 0.0) << "verify: no probability mass left to sample from";
  const double target = static_cast<double>(u) * total;
  double cum = 0.0;
  int64_t last = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0.0)
      continue;
    last = static_cast<int64_t>(i);
    cum += p[i];
    if (cum > target)
      return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last);
}

}  // namespace

float accept_coin(uint64_t seed, uint64_t i, uint64_t j) {
  return ops::uniform01(ops::mix64(seed ^ 0x6a09e667f3bcc909ull), (i << 8) | (j & 0xff));
}

Verdict verify_greedy(const DraftTree& tree, const float* logits, const float* logp, int64_t V) {
  Verdict v;
  int32_t node = 0;
  for (;;) {
    const int32_t tok = argmax_row(logits + node * V, V);
    v.tokens.push_back(tok);
    v.logprobs.push_back(logp[node * V + tok]);
    int32_t next = -1;
    for (int32_t c : tree.children(node))
      if (tree.tokens[c] == tok) {
        next = c;
        break;
      }
    if (next < 0)
      return v;
    v.nodes.push_back(next);
    node = next;
  }
}

Verdict verify_sampled(const DraftTree& tree, const float* probs, int64_t V, uint64_t seed, uint64_t first_index,
                       AcceptRule rule) {
  Verdict v;
  int32_t node = 0;
  std::vector<double> P(static_cast<size_t>(V));
  for (;;) {
    const float* p = probs + node * V;
    const uint64_t i = first_index + v.tokens.size();
    for (int64_t t = 0; t < V; ++t)
      P[t] = p[t];
    double mass = 1.0;  // P's current total (p rows sum to 1)
    int32_t next = -1;
    const std::vector<int32_t> kids = tree.children(node);
    for (size_t j = 0; j < kids.size(); ++j) {
      const int32_t tok = tree.tokens[kids[j]];
      if (P[tok] <= 0.0)
        continue;  // outside the filtered distribution: never accepted
      if (static_cast<double>(accept_coin(seed, i, j)) * mass < P[tok]) {
        next = kids[j];
        break;
      }
      mass -= P[tok];
      P[tok] = 0.0;
    }
    if (next >= 0) {
      const int32_t tok = tree.tokens[next];
      v.nodes.push_back(next);
      v.tokens.push_back(tok);
      v.logprobs.push_back(std::log(p[tok]));
      node = next;
      continue;
    }
    if (rule == AcceptRule::NoResidual)
      for (int64_t t = 0; t < V; ++t)
        P[t] = p[t];
    const int32_t tok = draw(P, ops::uniform01(seed, i));
    v.tokens.push_back(tok);
    v.logprobs.push_back(std::log(p[tok]));
    return v;
  }
}

}  // namespace updraft
