#include "rollout/engine/commit.h"

#include <algorithm>
#include <cmath>

#include "kernels/core/error.h"

namespace updraft {
namespace {

bool is_stop(const Seq& s, int32_t tok, const std::vector<int32_t>& eos) {
  const auto& stops = s.req.params.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), tok) != stops.end())
    return true;
  return !s.req.params.ignore_eos && std::find(eos.begin(), eos.end(), tok) != eos.end();
}

// Appends emitted tokens until a stop or the length limit; how many were kept.
size_t emit(Seq& s, const Verdict& v, const std::vector<int32_t>& eos) {
  size_t k = 0;
  while (k < v.tokens.size() && !s.finished()) {
    s.result.tokens.push_back(v.tokens[k]);
    s.result.logprobs.push_back(v.logprobs[k]);
    int32_t matched = -1;
    if (is_stop(s, v.tokens[k], eos))
      s.result.finish_reason = "stop";
    else if (s.req.stop_check && (matched = s.req.stop_check(s.result.tokens)) >= 0) {
      s.result.finish_reason = "stop";
      s.result.matched_stop = matched;
    } else if (s.out_len() >= s.req.params.max_new_tokens)
      s.result.finish_reason = "length";
    ++k;
  }
  return k;
}

// The k most likely tokens of a host row with their log-probabilities (ties: lower id first);
// a row of probabilities lists only tokens with a non-zero one.
std::vector<std::pair<int32_t, float>> top_of(const float* row, bool probs, int64_t V, int32_t k) {
  std::vector<int32_t> ids(static_cast<size_t>(V));
  for (int64_t t = 0; t < V; ++t)
    ids[static_cast<size_t>(t)] = static_cast<int32_t>(t);
  const size_t n = std::min<size_t>(static_cast<size_t>(k), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(), [&](int32_t a, int32_t b) {
    return row[a] != row[b] ? row[a] > row[b] : a < b;
  });
  std::vector<std::pair<int32_t, float>> out;
  for (size_t i = 0; i < n; ++i) {
    const float x = row[ids[i]];
    if (probs && x <= 0)
      break;
    out.emplace_back(ids[i], probs ? std::log(x) : x);
  }
  return out;
}

// Records the input logprobs of the prompt rows an entry ran (log_softmax of the raw logits).
void record_input_logprobs(Seq& s, const EntryRows& at, const Tensor& host_logits, int64_t V) {
  for (int64_t i = 0; i < at.inputs; ++i) {
    const int64_t pos = at.input_pos + i;
    UPD_CHECK(s.wants_input_logprob(pos)) << "input logprob of position " << pos << " not asked for";
    const float* row = host_logits.data<float>() + (at.first_input + i) * V;
    const float top = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t t = 0; t < V; ++t)
      sum += std::exp(static_cast<double>(row[t] - top));
    s.result.input_logprobs[static_cast<size_t>(pos - s.req.input_logprobs_from)] =
        static_cast<float>(row[s.token_at(pos)] - top - std::log(sum));
  }
}

}  // namespace

SpecRound round_of(const DraftTree& tree, const Verdict& v) {
  SpecRound r;
  r.drafted = static_cast<int32_t>(tree.size() - 1);
  r.accepted = static_cast<int32_t>(v.nodes.size());
  r.drawn = tree.drawn;
  for (int64_t i = 1; i < tree.size(); ++i) {
    const auto k = static_cast<size_t>(tree.source_of(i));
    ++r.drafted_by[k];
    if (k != static_cast<size_t>(DraftSource::kEagle))
      r.suffix_claimed += std::exp(tree.score[static_cast<size_t>(i)]);
    r.depth = std::max(r.depth, tree.depth[static_cast<size_t>(i)]);
    if (k == static_cast<size_t>(DraftSource::kEagle))
      r.eagle_depth = std::max(r.eagle_depth, tree.depth[static_cast<size_t>(i)]);
  }
  bool eagle = true, suffix = true;
  for (int32_t n : v.nodes) {
    const DraftSource src = tree.source_of(n);
    ++r.accepted_by[static_cast<size_t>(src)];
    eagle = eagle && src == DraftSource::kEagle;
    suffix = suffix && tree.from_suffix(n);
    r.eagle_run += eagle ? 1 : 0;
    r.suffix_run += suffix ? 1 : 0;
  }
  return r;
}

std::vector<Committed> verify_commit(const StepPlan& plan, const RunOut& run, KvCache& cache,
                                     const CommitOptions& opts, EngineStats& stats) {
  const int64_t V = opts.vocab;
  std::vector<Committed> out(plan.entries.size());
  for (size_t e = 0; e < plan.entries.size(); ++e) {
    Seq& s = *plan.entries[e].seq;
    const EntryRows& at = run.at[e];
    Committed& c = out[e];
    c.first_pos = at.cached;
    if (plan.entries[e].prefill > 0)
      for (int64_t i = 0; i < at.rows; ++i)
        c.rows.push_back(static_cast<int32_t>(at.first_row + i));
    record_input_logprobs(s, at, run.host_logits, V);
    if (at.logits == 0)
      continue;
    const bool decode = plan.entries[e].prefill == 0;
    const DraftTree tree = decode ? s.tree : DraftTree::single(s.token_at(at.cached + at.rows - 1));
    UPD_CHECK(tree.size() == at.logits) << "verify: tree of " << tree.size() << " nodes, " << at.logits << " logit rows";
    const SamplingParams& p = s.req.params;
    const int64_t lr = at.first_logit;
    const Verdict v =
        p.temperature == 0
            ? verify_greedy(tree, run.host_logits.data<float>() + lr * V, run.host_logp.data<float>() + lr * V, V)
            : verify_sampled(tree, run.host_probs.data<float>() + lr * V, V, s.seed,
                             static_cast<uint64_t>(s.out_len()), opts.accept_rule);
    stats.q_overlap += v.q_overlap;
    stats.q_top += v.q_top;
    stats.q_nodes += v.q_nodes;
    if (tree.size() > 1) {
      const SpecRound r = round_of(tree, v);
      s.result.spec.add_round(r.drafted, r.accepted, r.depth);
      s.result.spec.add_sources(r.drafted_by, r.accepted_by);
      s.result.rounds.push_back(r);
      stats.spec.add_round(r.drafted, r.accepted, r.depth);
      stats.spec.add_sources(r.drafted_by, r.accepted_by);
      if (r.drafted_by[0] > 0)
        stats.drafter_spec.add_round(r.drafted_by[0], r.eagle_run, r.eagle_depth);
      if (s.req.probe) {
        stats.probe_spec.add_round(r.drafted, r.accepted, r.depth);
        stats.probe_spec.add_sources(r.drafted_by, r.accepted_by);
      }
      s.last_tree = tree;
      c.round = true;
    }
    if (decode && tree.size() == 1)
      ++s.result.plain_steps;
    const size_t kept = emit(s, v, opts.eos_token_ids);
    stats.generated_tokens += static_cast<int64_t>(kept);
    if (tree.size() > 1 && kept < v.tokens.size()) {
      ++s.result.spec.truncated;
      ++stats.spec.truncated;
    } else if (tree.size() > 1 && !tree.children(v.nodes.empty() ? 0 : v.nodes.back()).empty()) {
      s.result.rounds.back().rejected_at = static_cast<int32_t>(s.out_len() - 1);  // the bonus token
    }
    for (size_t i = 0; i < kept; ++i)
      c.teacher_rows.push_back(static_cast<int32_t>(lr + (i == 0 ? 0 : v.nodes[i - 1])));
    if (s.req.top_logprobs > 0) {
      const Tensor& dist = p.temperature == 0 ? run.host_logp : run.host_probs;
      for (size_t i = 0; i < kept; ++i)
        s.result.top_logprobs.push_back(top_of(dist.data<float>() + c.teacher_rows[i] * V, p.temperature != 0, V,
                                               s.req.top_logprobs));
    }
    c.tokens.assign(v.tokens.begin(), v.tokens.begin() + static_cast<std::ptrdiff_t>(kept));
    c.logprobs.assign(v.logprobs.begin(), v.logprobs.begin() + static_cast<std::ptrdiff_t>(kept));
    if (decode) {  // keep the root and the accepted path in the policy's cache
      std::vector<int64_t> keep = {0};
      keep.insert(keep.end(), v.nodes.begin(), v.nodes.end());
      cache.keep(s.kv, at.cached, keep);
      for (int64_t node : keep)
        c.rows.push_back(static_cast<int32_t>(at.first_row + node));
    }
    s.tree = DraftTree();
  }
  return out;
}

}  // namespace updraft
