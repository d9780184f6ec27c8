#include "rollout/spec/suffix_drafts.h"

#include <algorithm>
#include <cmath>

#include "kernels/core/error.h"
#include "kernels/ops/sampling.h"

namespace updraft {
namespace {

// The group key of requests that name none: their prompt's hash, with the top bit set so that it
// never collides with a caller's small group numbers (nor is 0).
uint64_t prompt_group(const std::vector<int32_t>& prompt) {
  uint64_t h = ops::mix64(prompt.size());
  for (int32_t t : prompt)
    h = ops::mix64(h ^ static_cast<uint32_t>(t));
  return h | (uint64_t{1} << 63);
}

int32_t child_with(const DraftTree& t, int32_t parent, int32_t token) {
  for (int64_t i = parent + 1; i < t.size(); ++i)
    if (t.parent[static_cast<size_t>(i)] == parent && t.tokens[static_cast<size_t>(i)] == token)
      return static_cast<int32_t>(i);
  return -1;
}

// Renumbers the nodes breadth-first with each node's children by descending score (ties: the
// earlier node first), so that sampling verification, which tries children in index order,
// tries the likelier candidate first whichever source proposed it; a sampled draft (a sampling
// chain's: DraftTree::q_row) stays its parent's first child, as the verifier requires.
void order_children_by_score(DraftTree& t) {
  const auto n = static_cast<size_t>(t.size());
  std::vector<std::vector<int32_t>> kids(n);
  for (size_t i = 1; i < n; ++i)
    kids[static_cast<size_t>(t.parent[i])].push_back(static_cast<int32_t>(i));
  std::vector<int32_t> order = {0}, new_of(n, -1);
  new_of[0] = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    std::vector<int32_t>& c = kids[static_cast<size_t>(order[k])];
    std::stable_sort(c.begin(), c.end(), [&](int32_t a, int32_t b) {
      return t.sampled(a) != t.sampled(b) ? t.sampled(a) : t.score[a] > t.score[b];
    });
    for (int32_t x : c) {
      new_of[static_cast<size_t>(x)] = static_cast<int32_t>(order.size());
      order.push_back(x);
    }
  }
  DraftTree r;
  r.drawn = t.drawn;
  r.q_tokens = std::move(t.q_tokens);
  r.q_probs = std::move(t.q_probs);
  for (int32_t old : order) {
    const auto o = static_cast<size_t>(old);
    r.tokens.push_back(t.tokens[o]);
    r.parent.push_back(old == 0 ? -1 : new_of[static_cast<size_t>(t.parent[o])]);
    r.depth.push_back(t.depth[o]);
    r.score.push_back(t.score[o]);
    r.source.push_back(t.source[o]);
    r.proposers.push_back(t.proposers[o]);
    if (!t.q_row.empty())
      r.q_row.push_back(t.q_row[o]);
  }
  t = std::move(r);
}

}  // namespace

const char* suffix_mode_name(SuffixMode m) {
  switch (m) {
    case SuffixMode::kOff:
      return "off";
    case SuffixMode::kGroup:
      return "group";
    case SuffixMode::kHistory:
      return "history";
    case SuffixMode::kBoth:
      return "both";
  }
  return "?";
}

SuffixMode parse_suffix_mode(const std::string& s) {
  for (SuffixMode m : {SuffixMode::kOff, SuffixMode::kGroup, SuffixMode::kHistory, SuffixMode::kBoth})
    if (s == suffix_mode_name(m))
      return m;
  throw Error("suffix drafts: '" + s + "' is not one of off, group, history, both");
}

void SuffixOptions::validate() const {
  UPD_REQUIRE(max_nodes >= 1 && max_nodes <= 64)
      << "suffix drafts: max_nodes must be in [1, 64] (got " << max_nodes << ")";
  UPD_REQUIRE(max_depth >= 1 && max_depth <= 64)
      << "suffix drafts: max_depth must be in [1, 64] (got " << max_depth << ")";
  UPD_REQUIRE(min_prob >= 0 && min_prob <= 1) << "suffix drafts: min_prob must be in [0, 1] (got " << min_prob << ")";
  UPD_REQUIRE(max_match >= 1 && max_match <= 1024)
      << "suffix drafts: max_match must be in [1, 1024] (got " << max_match << ")";
  UPD_REQUIRE(history_tokens >= 1) << "suffix drafts: history_tokens must be at least 1 (got " << history_tokens << ")";
  UPD_REQUIRE(std::isfinite(spec_factor) && spec_factor > 0)
      << "suffix drafts: spec_factor must be a finite number > 0 (got " << spec_factor << ")";
  UPD_REQUIRE(min_match >= 1 && min_match <= max_match)
      << "suffix drafts: min_match must be in [1, max_match] (got " << min_match << ")";
  UPD_REQUIRE(std::isfinite(version_weight) && version_weight >= 1)
      << "suffix drafts: version_weight must be a finite number >= 1 (got " << version_weight << ")";
}

int64_t graft_candidates(DraftTree& tree, const std::vector<std::vector<SourcedCandidate>>& trees, int64_t budget,
                         double min_prob) {
  UPD_CHECK(tree.size() >= 1) << "graft: the tree has no root";
  if (tree.source.empty())
    tree.source.assign(tree.tokens.size(), DraftSource::kEagle);
  if (tree.proposers.empty())
    for (DraftSource s : tree.source)
      tree.proposers.push_back(static_cast<uint8_t>(1u << static_cast<int>(s)));
  struct Ref {
    size_t t, i;
  };
  std::vector<Ref> order;
  for (size_t t = 0; t < trees.size(); ++t)
    for (size_t i = 0; i < trees[t].size(); ++i)
      order.push_back({t, i});
  std::stable_sort(order.begin(), order.end(), [&](const Ref& a, const Ref& b) {
    return trees[a.t][a.i].c.path_prob > trees[b.t][b.i].c.path_prob;
  });
  std::vector<std::vector<int32_t>> node(trees.size());
  for (size_t t = 0; t < trees.size(); ++t)
    node[t].assign(trees[t].size(), -1);
  int64_t added = 0;
  for (const Ref& r : order) {
    const SourcedCandidate& sc = trees[r.t][r.i];
    UPD_CHECK(sc.c.parent < static_cast<int32_t>(r.i)) << "graft: a candidate precedes its parent";
    const int32_t par = sc.c.parent < 0 ? 0 : node[r.t][static_cast<size_t>(sc.c.parent)];
    if (par < 0)
      continue;  // its parent did not make it
    int32_t n = child_with(tree, par, sc.c.token);
    if (n < 0 && added < budget && sc.c.path_prob >= min_prob) {
      n = static_cast<int32_t>(tree.size());
      tree.tokens.push_back(sc.c.token);
      tree.parent.push_back(par);
      tree.depth.push_back(tree.depth[static_cast<size_t>(par)] + 1);
      tree.score.push_back(static_cast<float>(std::log(sc.c.path_prob)));
      tree.source.push_back(sc.source);
      tree.proposers.push_back(0);
      if (!tree.q_row.empty())
        tree.q_row.push_back(-1);  // a point mass
      ++added;
    }
    if (n >= 0)
      tree.proposers[static_cast<size_t>(n)] |= static_cast<uint8_t>(1u << static_cast<int>(sc.source));
    node[r.t][r.i] = n;
  }
  if (added > 0)
    order_children_by_score(tree);
  return added;
}

SuffixDrafts::SuffixDrafts(const SuffixOptions& opts) : opts_(opts) {
  opts_.validate();
  if (opts_.history())
    history_ = std::make_unique<SuffixIndex>(opts_.max_match, opts_.history_tokens);
}

void SuffixDrafts::join(uint64_t id, uint64_t group, const std::vector<int32_t>& prompt) {
  if (!opts_.group())
    return;
  UPD_CHECK(members_.count(id) == 0) << "suffix drafts: request " << id << " joined twice";
  const uint64_t key = group != 0 ? group : prompt_group(prompt);
  std::unique_ptr<Group>& g = groups_[key];
  if (!g)
    g = std::make_unique<Group>(opts_.max_match);
  ++g->members;
  members_[id] = {key, g->index.add_document(prompt)};
}

void SuffixDrafts::extend(uint64_t id, const std::vector<int32_t>& tokens) {
  const auto it = members_.find(id);
  if (it == members_.end() || tokens.empty())
    return;
  groups_.at(it->second.group)->index.append(it->second.doc, tokens);
}

void SuffixDrafts::leave(uint64_t id, bool completed, const std::vector<int32_t>& prompt,
                         const std::vector<int32_t>& output) {
  if (history_ && completed && !output.empty()) {
    std::vector<int32_t> text = prompt;
    text.insert(text.end(), output.begin(), output.end());
    const double w = std::exp(std::min(600.0, static_cast<double>(generation_) * std::log(opts_.version_weight)));
    history_->add_document(text, w);
  }
  const auto it = members_.find(id);
  if (it == members_.end())
    return;
  const auto g = groups_.find(it->second.group);
  if (--g->second->members == 0)
    groups_.erase(g);
  else
    g->second->index.remove(it->second.doc);
  members_.erase(it);
}

SuffixFound SuffixDrafts::lookup(uint64_t id, const std::vector<int32_t>& context, int64_t max_depth) const {
  const int64_t depth = std::min(max_depth, opts_.max_depth);
  SuffixFound found;
  if (depth < 1 || context.empty())
    return found;
  auto take = [&](const SuffixTree& t, DraftSource src) {
    if (t.match_length < opts_.min_match)
      return;
    const auto n = std::min(t.nodes.size(), static_cast<size_t>(std::ceil(opts_.spec_factor * t.match_length)));
    std::vector<SourcedCandidate> v;
    for (size_t i = 0; i < n; ++i)  // selection order: a prefix keeps parents before children
      v.push_back({t.nodes[i], src});
    found.push_back(std::move(v));
  };
  const auto m = members_.find(id);
  if (m != members_.end()) {
    const SuffixIndex& gi = groups_.at(m->second.group)->index;
    take(gi.lookup(context, depth, opts_.max_nodes, opts_.min_prob, m->second.doc), DraftSource::kGroup);
  }
  if (history_)
    take(history_->lookup(context, depth, opts_.max_nodes, opts_.min_prob), DraftSource::kHistory);
  return found;
}

int64_t SuffixDrafts::graft(uint64_t id, const std::vector<int32_t>& context, int64_t max_depth, DraftTree& tree) {
  return graft_candidates(tree, lookup(id, context, max_depth), opts_.max_nodes);
}

int32_t deepest(const SuffixFound& found) {
  int32_t d = 0;
  for (const auto& v : found)
    for (const SourcedCandidate& c : v)
      d = std::max(d, c.c.depth);
  return d;
}

size_t SuffixDrafts::memory_bytes() const {
  size_t b = history_ ? history_->memory_bytes() : 0;
  for (const auto& [k, g] : groups_)
    b += g->index.memory_bytes();
  return b + members_.size() * sizeof(Member);
}

}  // namespace updraft
