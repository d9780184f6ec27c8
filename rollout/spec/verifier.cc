#include "rollout/spec/verifier.h"

#include <algorithm>
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

namespace {

// Child c of a sampled draft (q: its row) tried against the residual P of total `mass`: accepted
// iff u < (P(x) / mass) / q(x); otherwise P becomes max(0, P / mass - q), returned as the new mass
// (with `wrong`, the negative control, P loses x alone, as for a point mass).
bool try_sampled(const DraftTree& tree, int32_t c, std::vector<double>& P, double& mass, float u, bool wrong) {
  const int64_t S = DraftTree::kSampledSupport, row = tree.q_row[static_cast<size_t>(c)];
  const int32_t* qt = tree.q_tokens.data() + row * S;
  const float* qp = tree.q_probs.data() + row * S;
  const int32_t x = tree.tokens[static_cast<size_t>(c)];
  double qx = 0;
  for (int64_t j = 0; j < S; ++j)
    if (qt[j] == x)
      qx += qp[j];
  UPD_CHECK(qx > 0) << "verify: sampled draft " << x << " outside its own distribution";
  if (static_cast<double>(u) * qx * mass < P[static_cast<size_t>(x)])
    return true;
  if (wrong) {
    mass -= P[static_cast<size_t>(x)];
    P[static_cast<size_t>(x)] = 0;
    return false;
  }
  const double m = mass;  // P changes only on q's support
  for (int64_t j = 0; j < S; ++j)
    if (qt[j] >= 0) {
      double& pj = P[static_cast<size_t>(qt[j])];
      const double after = std::max(0.0, pj - qp[j] * m);
      mass -= pj - after;
      pj = after;
    }
  return false;
}

// What a draw from the drafter's q at child c (its first child) is accepted with at a node whose
// policy distribution is p, and what its top token is: into the verdict's sums.
void measure_q(const DraftTree& tree, int32_t c, const float* p, Verdict& v) {
  const int64_t S = DraftTree::kSampledSupport, row = tree.q_row[static_cast<size_t>(c)];
  const int32_t* qt = tree.q_tokens.data() + row * S;
  const float* qp = tree.q_probs.data() + row * S;
  for (int64_t j = 0; j < S; ++j)
    if (qt[j] >= 0)
      v.q_overlap += std::min(static_cast<double>(qp[j]), static_cast<double>(p[qt[j]]));
  v.q_top += qt[0] >= 0 ? p[qt[0]] : 0.f;
  ++v.q_nodes;
}

}  // namespace

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
    double mass = 1.0;  // P's current total (p rows sum to 1): P / mass is the residual distribution
    int32_t next = -1;
    const std::vector<int32_t> kids = tree.children(node);
    if (!kids.empty() && tree.has_q(kids[0]))
      measure_q(tree, kids[0], p, v);
    for (size_t j = 0; j < kids.size(); ++j) {
      const int32_t tok = tree.tokens[kids[j]];
      UPD_CHECK(j == 0 || !tree.sampled(kids[j])) << "verify: a sampled draft must be its parent's first child";
      if (P[tok] <= 0.0 && !tree.sampled(kids[j]))
        continue;  // outside the filtered distribution: never accepted
      if (tree.sampled(kids[j])) {
        if (try_sampled(tree, kids[j], P, mass, accept_coin(seed, i, j), rule == AcceptRule::PointResidual)) {
          next = kids[j];
          break;
        }
        if (mass <= 1e-12) {  // q covered P (q = P up to rounding, rejected by a last-bit coin): p's draw
          for (int64_t t = 0; t < V; ++t)
            P[t] = p[t];
          break;
        }
        continue;
      }
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
