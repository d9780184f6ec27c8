// SuffixIndex: see suffix_index.h for the contract, the data structure and its costs.
#include "drafter/suffix/suffix_index.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/core/error.h"

namespace updraft {
namespace {

constexpr uint32_t kNone = 0xffffffffu;
constexpr size_t kCompactMin = 64;  // garbage below this never triggers a compaction
constexpr int kMaxLevels = 64;
constexpr uint64_t kSeed = 0x2545f4914f6cdd1dULL;

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: a bijection with good avalanche
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Hashes the grams that end at `end` in toks (never reaching below `begin`), reading backwards:
// keys[li] is the key of the 2^li tokens before `end`, or 0 where fewer tokens are available.
void gram_keys(const int32_t* toks, size_t begin, size_t end, int levels, uint64_t* keys) {
  uint64_t h = kSeed;
  size_t m = 0;
  for (int li = 0; li < levels; ++li) {
    const size_t want = size_t{1} << li;
    while (m < want && end - m > begin) {
      h = mix(h ^ (static_cast<uint32_t>(toks[end - 1 - m]) + 0x9e3779b97f4a7c15ULL));
      ++m;
    }
    // The low 6 bits hold the level, so keys of different levels never meet; the top bit
    // keeps every key non-zero (0 marks an empty table slot).
    const uint64_t k = (mix(h) & ~uint64_t{63}) | (uint64_t{1} << 63) | static_cast<uint64_t>(li);
    keys[li] = m < want ? 0 : k;
  }
}

// How many of the context's last nc tokens equal the tokens before `end` in d, going backwards;
// 0 unless at least the last m do (a chain entry whose gram only shares the hash). Needs
// m <= nc and m <= end - d.begin.
template <typename DocT>
size_t backward_match(const std::vector<int32_t>& ctx, size_t nc, const DocT& d, size_t end, size_t m) {
  const int32_t* c = ctx.data() + ctx.size();
  const int32_t* t = d.tokens.data() + end;
  if (std::memcmp(c - m, t - m, m * sizeof(int32_t)) != 0)
    return 0;
  const size_t limit = std::min(nc, end - d.begin);
  size_t l = m;
  while (l < limit && c[-1 - static_cast<ptrdiff_t>(l)] == t[-1 - static_cast<ptrdiff_t>(l)])
    ++l;
  return l;
}

}  // namespace

SuffixIndex::SuffixIndex(int64_t max_match, int64_t max_tokens) {
  UPD_REQUIRE(max_match >= 1) << "SuffixIndex: max_match must be >= 1, got " << max_match;
  UPD_REQUIRE(max_tokens >= 0) << "SuffixIndex: max_tokens must be >= 0, got " << max_tokens;
  max_match_ = static_cast<size_t>(max_match);
  max_tokens_ = static_cast<size_t>(max_tokens);
  levels_ = 1;
  while (levels_ < kMaxLevels - 1 && (size_t{1} << levels_) <= max_match_)
    ++levels_;
}

uint32_t SuffixIndex::slot_of(int64_t doc, const char* what) const {
  const auto it = live_.find(doc);
  UPD_REQUIRE(it != live_.end()) << "SuffixIndex::" << what << ": document " << doc
                                 << " is not in the index (never added, removed or evicted)";
  return it->second;
}

int64_t SuffixIndex::add_document(const std::vector<int32_t>& tokens, double weight) {
  UPD_REQUIRE(std::isfinite(weight) && weight > 0)
      << "SuffixIndex::add_document: weight must be finite and > 0, got " << weight;
  UPD_REQUIRE(docs_.size() < kNone) << "SuffixIndex::add_document: too many documents";
  const int64_t id = next_id_++;
  const auto slot = static_cast<uint32_t>(docs_.size());
  docs_.emplace_back();
  docs_.back().weight = weight;
  live_.emplace(id, slot);
  append_tokens(slot, tokens);
  maybe_compact();
  return id;
}

void SuffixIndex::append(int64_t doc, const std::vector<int32_t>& tokens) {
  const uint32_t slot = slot_of(doc, "append");
  append_tokens(slot, tokens);
  maybe_compact();
}

void SuffixIndex::remove(int64_t doc) {
  slot_of(doc, "remove");
  drop(live_.find(doc));
  maybe_compact();
}

void SuffixIndex::append_tokens(uint32_t slot, const std::vector<int32_t>& tokens) {
  if (tokens.empty())
    return;
  size_t skip = 0;  // leading tokens of `tokens` that the capacity cuts off at once
  if (max_tokens_ > 0) {
    evict_for(slot, tokens.size());
    if (live_tokens_ + tokens.size() > max_tokens_) {  // the document alone does not fit
      Doc& d = docs_[slot];
      size_t over = live_tokens_ + tokens.size() - max_tokens_;
      const size_t cut = std::min(over, d.tokens.size() - d.begin);
      d.begin += cut;
      live_tokens_ -= cut;
      garbage_ += cut;
      skip = over - cut;
    }
  }
  for (size_t i = skip; i < tokens.size(); ++i) {
    docs_[slot].tokens.push_back(tokens[i]);
    ++live_tokens_;
    index_position(slot, docs_[slot].tokens.size());
  }
}

void SuffixIndex::evict_for(uint32_t slot, size_t incoming) {
  while (live_tokens_ + incoming > max_tokens_) {
    auto it = live_.begin();  // the oldest live document, unless it is the one growing
    if (it != live_.end() && it->second == slot)
      ++it;
    if (it == live_.end())
      return;
    drop(it);
  }
}

void SuffixIndex::drop(std::map<int64_t, uint32_t>::iterator it) {
  Doc& d = docs_[it->second];
  const size_t kept = d.tokens.size() - d.begin;
  live_tokens_ -= kept;
  garbage_ += kept + 1;  // its chain entries, and the document itself
  d.alive = false;
  std::vector<int32_t>().swap(d.tokens);  // chains never read a dead document's tokens
  d.begin = 0;
  live_.erase(it);
}

void SuffixIndex::index_position(uint32_t slot, size_t end) {
  UPD_REQUIRE(where_.size() < kNone) << "SuffixIndex: more than 2^32 - 1 stored positions";
  const auto id = static_cast<uint32_t>(where_.size());
  where_.push_back(Pos{slot, static_cast<uint32_t>(end)});
  const Doc& d = docs_[slot];
  uint64_t keys[kMaxLevels];
  gram_keys(d.tokens.data(), d.begin, end, levels_, keys);
  for (int li = 0; li < levels_; ++li) {
    uint32_t older = kNone;
    if (keys[li] != 0) {
      uint32_t& head = head_slot(keys[li]);
      older = head;
      head = id;
    }
    links_.push_back(older);
  }
}

void SuffixIndex::maybe_compact() {
  if (garbage_ > kCompactMin && garbage_ > live_tokens_ + live_.size())
    compact();
}

void SuffixIndex::compact() {
  std::vector<Doc> old;
  old.swap(docs_);
  docs_.reserve(live_.size());
  std::vector<Pos>().swap(where_);
  std::vector<uint32_t>().swap(links_);
  std::vector<uint64_t>().swap(table_keys_);
  std::vector<uint32_t>().swap(table_heads_);
  table_used_ = 0;
  where_.reserve(live_tokens_);
  links_.reserve(live_tokens_ * static_cast<size_t>(levels_));
  for (auto& [id, slot] : live_) {  // id order == creation order == old slot order
    Doc& d = old[slot];
    d.tokens.erase(d.tokens.begin(), d.tokens.begin() + static_cast<ptrdiff_t>(d.begin));
    d.tokens.shrink_to_fit();
    d.begin = 0;
    slot = static_cast<uint32_t>(docs_.size());
    docs_.push_back(std::move(d));
    for (size_t e = 1; e <= docs_[slot].tokens.size(); ++e)
      index_position(slot, e);
  }
  garbage_ = 0;
}

uint32_t SuffixIndex::find_head(uint64_t key) const {
  if (table_keys_.empty())
    return kNone;
  const size_t mask = table_keys_.size() - 1;
  for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
    if (table_keys_[i] == key)
      return table_heads_[i];
    if (table_keys_[i] == 0)
      return kNone;
  }
}

// The head of key's chain, inserted (as kNone) if absent.
uint32_t& SuffixIndex::head_slot(uint64_t key) {
  if ((table_used_ + 1) * 10 > table_keys_.size() * 7)
    grow_table();
  const size_t mask = table_keys_.size() - 1;
  size_t i = mix(key) & mask;
  while (table_keys_[i] != 0 && table_keys_[i] != key)
    i = (i + 1) & mask;
  if (table_keys_[i] == 0) {
    table_keys_[i] = key;
    table_heads_[i] = kNone;
    ++table_used_;
  }
  return table_heads_[i];
}

void SuffixIndex::grow_table() {
  std::vector<uint64_t> keys;
  std::vector<uint32_t> heads;
  keys.swap(table_keys_);
  heads.swap(table_heads_);
  table_keys_.assign(std::max<size_t>(64, keys.size() * 2), 0);
  table_heads_.assign(table_keys_.size(), kNone);
  const size_t mask = table_keys_.size() - 1;
  for (size_t j = 0; j < keys.size(); ++j) {
    if (keys[j] == 0)
      continue;
    size_t i = mix(keys[j]) & mask;
    while (table_keys_[i] != 0)
      i = (i + 1) & mask;
    table_keys_[i] = keys[j];
    table_heads_[i] = heads[j];
  }
}

SuffixTree SuffixIndex::lookup(const std::vector<int32_t>& context, int64_t max_depth, int64_t max_nodes,
                               double min_prob, int64_t exclude_doc) const {
  UPD_REQUIRE(max_depth >= 0) << "SuffixIndex::lookup: max_depth must be >= 0, got " << max_depth;
  UPD_REQUIRE(max_nodes >= 0) << "SuffixIndex::lookup: max_nodes must be >= 0, got " << max_nodes;
  UPD_REQUIRE(min_prob >= 0.0 && min_prob <= 1.0)
      << "SuffixIndex::lookup: min_prob must be in [0, 1], got " << min_prob;
  const uint32_t exclude = exclude_doc == -1 ? kNone : slot_of(exclude_doc, "lookup (exclude_doc)");
  SuffixTree tree;
  tree.match_length = static_cast<int64_t>(find_matches(context, exclude));
  if (tree.match_length > 0 && max_depth > 0 && max_nodes > 0)
    grow_tree(tree, max_depth, max_nodes, min_prob);
  return tree;
}

// Finds L and leaves the occurrences of the match in occ_ (sorted by slot, then end).
size_t SuffixIndex::find_matches(const std::vector<int32_t>& context, uint32_t exclude) const {
  occ_.clear();
  const size_t nc = std::min(context.size(), max_match_);
  if (nc == 0)
    return 0;
  uint64_t keys[kMaxLevels];
  gram_keys(context.data(), context.size() - nc, context.size(), levels_, keys);
  for (int li = levels_ - 1; li >= 0; --li) {
    if (keys[li] == 0)
      continue;
    const size_t m = size_t{1} << li;
    size_t best = 0;  // the longest verified match with a continuation
    for (uint32_t id = find_head(keys[li]); id != kNone; id = links_[id * static_cast<size_t>(levels_) + li]) {
      const Pos p = where_[id];
      const Doc& d = docs_[p.slot];
      if (!d.alive || p.end < d.begin + m)  // gone, or the gram lost its front to the capacity
        continue;
      if (p.slot == exclude && p.end == d.tokens.size())
        continue;
      const size_t len = backward_match(context, nc, d, p.end, m);
      if (len == 0)  // a hash collision
        continue;
      if (p.end < d.tokens.size())
        best = std::max(best, len);
      occ_.push_back(Occ{p.slot, p.end, static_cast<uint32_t>(len), 0, d.weight});
    }
    if (best == 0) {  // every match here ends a document: try a shorter gram
      occ_.clear();
      continue;
    }
    // Entries at this level match >= m tokens; those matching all of L are the occurrences.
    occ_.erase(std::remove_if(occ_.begin(), occ_.end(), [best](const Occ& o) { return o.len < best; }), occ_.end());
    // Chains run newest first, which is usually exactly the reverse of (slot, end) order.
    const auto by_place = [](const Occ& a, const Occ& b) { return a.slot != b.slot ? a.slot < b.slot : a.end < b.end; };
    std::reverse(occ_.begin(), occ_.end());
    if (!std::is_sorted(occ_.begin(), occ_.end(), by_place))
      std::sort(occ_.begin(), occ_.end(), by_place);
    return best;
  }
  return 0;
}

namespace {
// Heap order: a ranks below b (lower path_prob; ties: larger token, then later insertion).
template <typename C>
bool ranks_below(const C& a, const C& b) {
  if (a.path_prob != b.path_prob)
    return a.path_prob < b.path_prob;
  if (a.token != b.token)
    return a.token > b.token;
  return a.seq > b.seq;
}
}  // namespace

void SuffixIndex::grow_tree(SuffixTree& tree, int64_t max_depth, int64_t max_nodes, double min_prob) const {
  heap_.clear();
  uint64_t seq = 0;
  double total = 0.0;  // summed in (slot, end) order: the result must not depend on chain order
  for (const Occ& o : occ_)
    total += o.weight;
  push_children(-1, 0, 0, static_cast<uint32_t>(occ_.size()), total, 1.0, min_prob, seq);
  const auto cmp = [](const Cand& a, const Cand& b) { return ranks_below(a, b); };
  tree.nodes.reserve(static_cast<size_t>(std::min<int64_t>(max_nodes, 256)));
  while (!heap_.empty() && static_cast<int64_t>(tree.nodes.size()) < max_nodes) {
    std::pop_heap(heap_.begin(), heap_.end(), cmp);
    const Cand c = heap_.back();
    heap_.pop_back();
    const auto index = static_cast<int32_t>(tree.nodes.size());
    tree.nodes.push_back(SuffixCandidate{c.token, c.parent, c.depth, c.prob, c.path_prob});
    if (c.depth < max_depth)
      push_children(index, c.depth, c.lo, c.hi, c.count, c.path_prob, min_prob, seq);
  }
}

// Sorts occ_[lo, hi) (the occurrences of a node's path, `depth` tokens long) by next token and
// pushes one candidate per distinct next token.
void SuffixIndex::push_children(int32_t parent, int32_t depth, uint32_t lo, uint32_t hi, double count, double path_prob,
                                double min_prob, uint64_t& seq) const {
  // An occurrence with only `depth` tokens after it counted in `count` but has no next token:
  // drop it (a node is expanded once, so the tail of its range is free to overwrite).
  uint32_t kept = lo;
  bool grouped = true;  // next tokens non-decreasing so far
  for (uint32_t i = lo; i < hi; ++i) {
    const std::vector<int32_t>& t = docs_[occ_[i].slot].tokens;
    const size_t at = occ_[i].end + static_cast<size_t>(depth);
    if (at >= t.size())
      continue;
    Occ& o = occ_[kept];
    o = occ_[i];
    o.next = t[at];
    grouped = grouped && (kept == lo || occ_[kept - 1].next <= o.next);
    ++kept;
  }
  hi = kept;
  // Ranges arrive in (slot, end) order, so non-decreasing next tokens already are the order we
  // want: a loop or a long shared stretch costs O(K), not O(K log K).
  if (!grouped)
    std::sort(occ_.begin() + lo, occ_.begin() + hi, [](const Occ& a, const Occ& b) {
      if (a.next != b.next)
        return a.next < b.next;
      return a.slot != b.slot ? a.slot < b.slot : a.end < b.end;
    });
  const auto cmp = [](const Cand& a, const Cand& b) { return ranks_below(a, b); };
  for (uint32_t i = lo; i < hi;) {
    uint32_t j = i;
    double c = 0.0;
    for (; j < hi && occ_[j].next == occ_[i].next; ++j)
      c += occ_[j].weight;
    const double prob = c / count;
    if (prob >= min_prob) {
      heap_.push_back(Cand{path_prob * prob, prob, c, occ_[i].next, parent, depth + 1, seq++, i, j});
      std::push_heap(heap_.begin(), heap_.end(), cmp);
    }
    i = j;
  }
}

size_t SuffixIndex::memory_bytes() const {
  size_t b = sizeof(*this) + docs_.capacity() * sizeof(Doc);
  for (const Doc& d : docs_)
    b += d.tokens.capacity() * sizeof(int32_t);
  b += where_.capacity() * sizeof(Pos) + links_.capacity() * sizeof(uint32_t);
  b += table_keys_.capacity() * sizeof(uint64_t) + table_heads_.capacity() * sizeof(uint32_t);
  b += live_.size() * (sizeof(std::pair<const int64_t, uint32_t>) + 4 * sizeof(void*));  // tree nodes
  b += occ_.capacity() * sizeof(Occ) + heap_.capacity() * sizeof(Cand);
  return b;
}

}  // namespace updraft
