#include "rollout/spec/speculator.h"

#include <algorithm>

#include "drafter/proposer.h"
#include "kernels/core/error.h"
#include "kernels/ops.h"

namespace updraft {
namespace {

Tensor iota_i32(int64_t n, int64_t from = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<int32_t>(from + i);
  return Tensor::from_i32(v, {n});
}

}  // namespace

SpecSettings settings_at_depth(const SpecSettings& full, int64_t depth) {
  UPD_CHECK(depth >= 1 && depth <= full.steps && (full.chain() || depth == full.steps))
      << "speculation depth " << depth << " under steps " << full.steps << ", top_k " << full.top_k;
  if (depth == full.steps)
    return full;
  SpecSettings s = full;
  s.steps = depth;
  s.top_k = 1;
  s.draft_tokens = depth + 1;
  return s;
}

std::vector<int64_t> allowed_depths(const SpecSettings& full) {
  std::vector<int64_t> d = {0};
  for (int64_t k = full.chain() ? 1 : full.steps; k <= full.steps; ++k)
    d.push_back(k);
  return d;
}

void keep_pairs(const std::vector<Seq*>& seqs, const std::vector<std::vector<int32_t>>& rows,
                const std::vector<std::vector<int32_t>>& tokens, const Tensor& aux) {
  std::vector<int32_t> src;
  for (size_t i = 0; i < seqs.size(); ++i) {
    UPD_CHECK(rows[i].size() == tokens[i].size())
        << "keep_pairs: " << rows[i].size() << " rows, " << tokens[i].size() << " tokens";
    src.insert(src.end(), rows[i].begin(), rows[i].end());
  }
  if (src.empty())
    return;
  const int64_t M = static_cast<int64_t>(src.size()), W = aux.numel() / aux.size(0);
  Tensor kept = Tensor::empty({M, W}, aux.dtype(), aux.device());
  ops::copy_rows(aux.reshape({aux.size(0), W}), Tensor::from_i32(src, {M}), kept, iota_i32(M));
  int64_t at = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto n = static_cast<int64_t>(rows[i].size());
    if (n == 0)
      continue;
    seqs[i]->pending_aux.push_back(kept.rows(at, at + n));
    seqs[i]->pending_tokens.insert(seqs[i]->pending_tokens.end(), tokens[i].begin(), tokens[i].end());
    at += n;
  }
}

void copy_pending(const Seq& s, Tensor& dst, int64_t row) {
  for (const Tensor& c : s.pending_aux) {
    ops::copy_rows(c, iota_i32(c.size(0)), dst, iota_i32(c.size(0), row));
    row += c.size(0);
  }
}

int64_t draft_step(const DraftModel& drafter, KvCache& cache, const std::vector<Seq*>& proposers,
                   const std::vector<Seq*>& absorb, const SpecSettings& settings) {
  std::vector<Seq*> all = proposers;
  for (Seq* s : absorb)
    if (s->pending() > 0)
      all.push_back(s);
  int64_t T = 0;
  for (Seq* s : all)
    T += s->pending();
  if (T == 0)
    return 0;
  const Tensor& first = all.front()->pending_aux.front();
  const int64_t W = first.numel() / first.size(0);
  Tensor hidden = Tensor::empty({T, W}, first.dtype(), first.device());
  std::vector<SeqStep> steps(all.size());
  int64_t row = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    Seq& s = *all[i];
    UPD_CHECK(s.pending() > 0) << "draft_step: sequence " << s.id << " has no pending pair to propose from";
    copy_pending(s, hidden, row);
    row += s.pending();
    steps[i].kv = &s.dkv;
    steps[i].tokens = s.pending_tokens;
    if (i < proposers.size())
      steps[i].logit_rows = {static_cast<int32_t>(s.pending() - 1)};
  }
  UPD_CHECK(row == T) << "draft_step: pending rows " << row << " != pairs " << T;
  // Only the proposers' last rows go past the KV writes: out.state holds their states, in order.
  DraftOut out = drafter.forward(cache, steps, hidden, /*states_at_logit_rows=*/true);
  for (Seq* s : all) {
    s->drop_pending();
    UPD_CHECK(s->dkv.length == s->kv.length)
        << "draft_step: draft cache holds " << s->dkv.length << " pairs, the policy's " << s->kv.length;
  }
  if (proposers.empty())
    return T;
  const auto P = static_cast<int64_t>(proposers.size());
  UPD_CHECK(out.state.size(0) == P) << "draft_step: " << out.state.size(0) << " states for " << P << " proposers";
  const Tensor& h_last = out.state;
  std::vector<ProposeSeq> ps;
  for (Seq* s : proposers) {
    const SamplingParams& p = s->req.params;
    ps.push_back(
        {&s->dkv, s->pending_token(), p.temperature, p.top_k, p.top_p, s->seed, static_cast<uint64_t>(s->out_len())});
  }
  std::vector<DraftTree> trees = propose(drafter, cache, ps, h_last, out.logits, settings);
  for (size_t i = 0; i < proposers.size(); ++i)
    proposers[i]->tree = std::move(trees[i]);
  return T;
}

void recompute_pairs(const PolicyModel& policy, Seq& s, KvCache& scratch, const std::vector<int64_t>& aux_layers,
                     int64_t chunk) {
  s.drop_pending();
  const int64_t n = s.kv.length;
  if (n == 0)
    return;
  SeqKv skv;
  UPD_CHECK(scratch.reserve(skv, n)) << "recompute_pairs: the scratch cache cannot hold " << n << " positions";
  ForwardOptions fopts;
  fopts.aux = true;
  fopts.aux_layers = aux_layers;
  try {
    for (int64_t p0 = 0; p0 < n; p0 += chunk) {
      const int64_t c = std::min(chunk, n - p0);
      std::vector<SeqStep> pol(1);
      pol[0].kv = &skv;
      for (int64_t p = p0; p < p0 + c; ++p) {
        pol[0].tokens.push_back(s.token_at(p));
        s.pending_tokens.push_back(s.token_at(p + 1));
      }
      ForwardOut fo = policy.forward(scratch, pol, fopts);
      s.pending_aux.push_back(fo.aux.reshape({c, fo.aux.numel() / c}));
    }
  } catch (...) {
    scratch.release(skv);
    s.drop_pending();
    throw;
  }
  scratch.release(skv);
}

}  // namespace updraft
