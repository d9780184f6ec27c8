#include "drafter/draft_tree.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/core/error.h"

namespace updraft {

void SpecSettings::validate() const {
  UPD_REQUIRE(top_k >= 1 && steps >= 1) << "speculation: steps (" << steps << ") and top_k (" << top_k
                                        << ") must be at least 1";
  UPD_REQUIRE(steps <= 64 && top_k <= 64) << "speculation: steps and top_k must be at most 64";
  UPD_REQUIRE(draft_tokens >= 2 && draft_tokens <= 1 + pool_size())
      << "speculation: draft_tokens " << draft_tokens << " must be in [2, " << 1 + pool_size() << "] for steps "
      << steps << " and top_k " << top_k << " (it counts the root)";
  UPD_REQUIRE(stop_below >= 0 && stop_below < 1 && (stop_below == 0 || top_k == 1))
      << "speculation: stop_below " << stop_below << " must be in [0, 1), and 0 unless top_k is 1 (chains only)";
  UPD_REQUIRE(top_k > 1 || draft_tokens == steps + 1)
      << "speculation: a chain (top_k 1) of " << steps << " drafts has draft_tokens " << steps + 1
      << " (with the root), not " << draft_tokens << ": fewer would waste the deepest draft steps";
}

Tensor DraftTree::mask() const {
  const int64_t n = size();
  Tensor m = Tensor::zeros({n, n}, DType::Bool);
  uint8_t* p = m.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (parent[i] >= 0)
      std::copy(p + parent[i] * n, p + parent[i] * n + n, p + i * n);
    p[i * n + i] = 1;
  }
  return m;
}

std::vector<int32_t> DraftTree::children(int32_t node) const {
  std::vector<int32_t> c;
  for (int64_t i = node + 1; i < size(); ++i)
    if (parent[i] == node)
      c.push_back(static_cast<int32_t>(i));
  return c;
}

DraftTree DraftTree::single(int32_t root) {
  DraftTree t;
  t.tokens = {root};
  t.parent = {-1};
  t.depth = {0};
  t.score = {0.f};
  return t;
}

const char* draft_source_name(DraftSource s) {
  switch (s) {
    case DraftSource::kEagle:
      return "eagle";
    case DraftSource::kGroup:
      return "group";
    case DraftSource::kHistory:
      return "history";
  }
  return "?";
}

void TreeBuilder::expand(const std::vector<int32_t>& top_tokens, const std::vector<float>& top_logprobs) {
  const int64_t k = s_.top_k;
  const std::vector<int32_t> parents = levels_ == 0 ? std::vector<int32_t>{-1} : frontier_;
  UPD_CHECK(levels_ < s_.steps) << "draft tree: all " << s_.steps << " levels are built";
  UPD_CHECK(static_cast<int64_t>(top_tokens.size()) == static_cast<int64_t>(parents.size()) * k &&
            top_logprobs.size() == top_tokens.size())
      << "draft tree: expected " << parents.size() * k << " candidates, got " << top_tokens.size();
  const int32_t first = static_cast<int32_t>(pool_.size());
  for (size_t f = 0; f < parents.size(); ++f) {
    const int32_t par = parents[f];
    const float base = par < 0 ? 0.f : pool_[static_cast<size_t>(par)].score;
    const int32_t dep = par < 0 ? 1 : pool_[static_cast<size_t>(par)].depth + 1;
    for (int64_t c = 0; c < k; ++c) {
      const float lp = top_logprobs[f * k + c];
      pool_.push_back({top_tokens[f * k + c], par, dep, std::isnan(lp) ? -INFINITY : base + lp});
    }
  }
  // The next frontier: the best k of this level's candidates (ties: earlier first).
  std::vector<int32_t> cand(pool_.size() - static_cast<size_t>(first));
  std::iota(cand.begin(), cand.end(), first);
  std::stable_sort(cand.begin(), cand.end(), [&](int32_t a, int32_t b) { return pool_[a].score > pool_[b].score; });
  cand.resize(static_cast<size_t>(std::min<int64_t>(k, static_cast<int64_t>(cand.size()))));
  std::sort(cand.begin(), cand.end());
  frontier_ = cand;
  ++levels_;
}

DraftTree TreeBuilder::finish() const {
  UPD_CHECK(levels_ >= 1) << "draft tree: no level built";
  std::vector<int32_t> order(pool_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return pool_[a].score > pool_[b].score; });
  order.resize(static_cast<size_t>(std::min<int64_t>(s_.draft_tokens - 1, static_cast<int64_t>(order.size()))));
  std::sort(order.begin(), order.end());
  DraftTree t = DraftTree::single(root_);
  std::vector<int32_t> node_of(pool_.size(), -1);
  for (int32_t i : order) {
    const Entry& e = pool_[static_cast<size_t>(i)];
    const int32_t par = e.parent < 0 ? 0 : node_of[static_cast<size_t>(e.parent)];
    UPD_CHECK(par >= 0) << "draft tree: selected node without its parent";
    node_of[static_cast<size_t>(i)] = static_cast<int32_t>(t.tokens.size());
    t.tokens.push_back(e.token);
    t.parent.push_back(par);
    t.depth.push_back(e.depth);
    t.score.push_back(e.score);
  }
  return t;
}

}  // namespace updraft
