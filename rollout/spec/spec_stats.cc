#include "rollout/spec/spec_stats.h"

#include <algorithm>

#include "kernels/core/error.h"

namespace updraft {
namespace {

void add_into(std::vector<int64_t>& a, const std::vector<int64_t>& b, int64_t sign) {
  if (a.size() < b.size())
    a.resize(b.size(), 0);
  for (size_t j = 0; j < b.size(); ++j)
    a[j] += sign * b[j];
}

}  // namespace

double SpecStats::tau_at(int64_t depth) const {
  double t = 1.0;
  for (size_t j = 0; j < static_cast<size_t>(std::max<int64_t>(depth, 0)); ++j) {
    const int64_t tried = j < tried_at.size() ? tried_at[j] : 0;
    const int64_t acc = j < accepted_at.size() ? accepted_at[j] : 0;
    if (tried > 0)
      t += static_cast<double>(acc) / static_cast<double>(tried);
  }
  return t;
}

int64_t SpecStats::tried_depth(int64_t depth, int64_t min_tried) const {
  int64_t d = 0;
  while (d < depth && static_cast<size_t>(d) < tried_at.size() && tried_at[static_cast<size_t>(d)] >= min_tried)
    ++d;
  return d;
}

double SpecStats::alpha(size_t j) const {
  const int64_t prev = j == 0 ? rounds : (j - 1 < accepted_at.size() ? accepted_at[j - 1] : 0);
  const int64_t now = j < accepted_at.size() ? accepted_at[j] : 0;
  return prev == 0 ? 0.0 : static_cast<double>(now) / static_cast<double>(prev);
}

void SpecStats::add_round(int64_t drafted_tokens, int64_t accepted_tokens, int64_t depth) {
  if (depth <= 0)
    depth = drafted_tokens;
  UPD_CHECK(accepted_tokens <= depth) << "SpecStats: " << accepted_tokens << " accepted in a tree of depth " << depth;
  ++rounds;
  drafted += drafted_tokens;
  accepted += accepted_tokens;
  if (static_cast<int64_t>(accepted_at.size()) < accepted_tokens)
    accepted_at.resize(static_cast<size_t>(accepted_tokens), 0);
  for (int64_t j = 0; j < accepted_tokens; ++j)
    ++accepted_at[static_cast<size_t>(j)];
  if (static_cast<int64_t>(tried_at.size()) < depth)
    tried_at.resize(static_cast<size_t>(depth), 0);
  for (int64_t j = 0; j < depth; ++j)
    ++tried_at[static_cast<size_t>(j)];
}

void SpecStats::add_sources(const std::array<int32_t, kDraftSources>& d, const std::array<int32_t, kDraftSources>& a) {
  for (size_t k = 0; k < d.size(); ++k) {
    drafted_by[k] += d[k];
    accepted_by[k] += a[k];
  }
}

void SpecStats::merge(const SpecStats& o) {
  for (size_t k = 0; k < drafted_by.size(); ++k) {
    drafted_by[k] += o.drafted_by[k];
    accepted_by[k] += o.accepted_by[k];
  }
  rounds += o.rounds;
  drafted += o.drafted;
  accepted += o.accepted;
  add_into(accepted_at, o.accepted_at, 1);
  add_into(tried_at, o.tried_at, 1);
  truncated += o.truncated;
  draft_seconds += o.draft_seconds;
  verify_seconds += o.verify_seconds;
}

void SpecStats::subtract(const SpecStats& e) {
  UPD_CHECK(e.rounds <= rounds && e.accepted_at.size() <= accepted_at.size() && e.tried_at.size() <= tried_at.size())
      << "SpecStats: not an earlier snapshot";
  for (size_t k = 0; k < drafted_by.size(); ++k) {
    drafted_by[k] -= e.drafted_by[k];
    accepted_by[k] -= e.accepted_by[k];
  }
  rounds -= e.rounds;
  drafted -= e.drafted;
  accepted -= e.accepted;
  add_into(accepted_at, e.accepted_at, -1);
  add_into(tried_at, e.tried_at, -1);
  truncated -= e.truncated;
  draft_seconds -= e.draft_seconds;
  verify_seconds -= e.verify_seconds;
}

}  // namespace updraft
