// SuffixIndex: lookups against a brute-force model (random small vocabularies, streaming, removal, eviction,
// exclude_doc), hand cases, streaming equivalence, capacity, errors, and a lookup time / memory micro-benchmark.
#include "drafter/suffix/suffix_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/core/error.h"

namespace updraft {
namespace {

using Toks = std::vector<int32_t>;

Toks random_toks(std::mt19937& rng, size_t n, uint32_t vocab) {
  Toks t(n);
  for (int32_t& x : t)
    x = static_cast<int32_t>(rng() % vocab);
  return t;
}

// The model: documents in creation order, rescanned on every lookup.
struct RefIndex {
  struct Doc {
    int64_t id;
    Toks toks;
    double w;
  };
  int64_t max_match, max_tokens, next_id = 0;
  std::vector<Doc> docs;

  int64_t total() const {
    return std::accumulate(docs.begin(), docs.end(), int64_t{0},
                           [](int64_t n, const Doc& d) { return n + static_cast<int64_t>(d.toks.size()); });
  }
  std::vector<Doc>::iterator at(int64_t id) {
    return std::find_if(docs.begin(), docs.end(), [&](const Doc& d) { return d.id == id; });
  }
  int64_t add(const Toks& t, double w) {
    docs.push_back({next_id, {}, w});
    append(next_id, t);
    return next_id++;
  }
  void append(int64_t id, const Toks& t) {  // tokens join, then the capacity is enforced
    at(id)->toks.insert(at(id)->toks.end(), t.begin(), t.end());
    while (max_tokens > 0 && total() > max_tokens) {  // the oldest other document goes, else the front
      const auto it = std::find_if(docs.begin(), docs.end(), [&](const Doc& d) { return d.id != id; });
      if (it != docs.end())
        docs.erase(it);
      else
        at(id)->toks.erase(at(id)->toks.begin(), at(id)->toks.end() - max_tokens);
    }
  }

  SuffixTree lookup(const Toks& ctx, int64_t max_depth, int64_t max_nodes, double min_prob, int64_t excl) const {
    SuffixTree out;
    std::vector<std::pair<const Doc*, size_t>> occ;  // (document, end offset of the match)
    for (size_t len = std::min<size_t>(ctx.size(), max_match); len > 0 && out.match_length == 0; --len) {
      occ.clear();
      for (const Doc& d : docs)
        for (size_t e = len; e <= d.toks.size(); ++e)
          if (!(d.id == excl && e == d.toks.size()) &&
              std::equal(ctx.end() - len, ctx.end(), d.toks.begin() + (e - len))) {
            occ.push_back({&d, e});
            if (e < d.toks.size())
              out.match_length = static_cast<int64_t>(len);
          }
    }
    if (out.match_length == 0)
      return out;
    std::map<Toks, double> count;  // every path after the match, up to max_depth tokens
    for (const auto& [d, e] : occ) {
      count[{}] += d->w;
      Toks path;
      for (size_t k = e; k < d->toks.size() && static_cast<int64_t>(path.size()) < max_depth; ++k) {
        path.push_back(d->toks[k]);
        count[path] += d->w;
      }
    }
    std::vector<std::pair<SuffixCandidate, Toks>> open;  // every candidate, in insertion order
    auto children = [&](const Toks& path, int32_t parent, double path_prob) {
      for (const auto& [p, c] : count)
        if (p.size() == path.size() + 1 && std::equal(path.begin(), path.end(), p.begin()) &&
            c / count[path] >= min_prob)
          open.push_back(
              {{p.back(), parent, static_cast<int32_t>(p.size()), c / count[path], path_prob * (c / count[path])}, p});
    };
    children({}, -1, 1.0);
    while (static_cast<int64_t>(out.nodes.size()) < max_nodes) {
      size_t best = open.size();  // highest path_prob, then smallest token, then oldest
      for (size_t i = 0; i < open.size(); ++i) {
        const SuffixCandidate &a = open[i].first, &b = open[best < open.size() ? best : i].first;
        if (a.path_prob >= 0 &&
            (best == open.size() || a.path_prob > b.path_prob || (a.path_prob == b.path_prob && a.token < b.token)))
          best = i;
      }
      if (best == open.size())
        break;
      const auto chosen = open[best];   // a copy: children() grows `open`
      open[best].first.path_prob = -1;  // taken
      out.nodes.push_back(chosen.first);
      children(chosen.second, static_cast<int32_t>(out.nodes.size()) - 1, chosen.first.path_prob);
    }
    return out;
  }
};

void expect_same(const SuffixTree& got, const SuffixTree& want, const std::string& where) {
  ASSERT_EQ(got.match_length, want.match_length) << where;
  ASSERT_EQ(got.nodes.size(), want.nodes.size()) << where;
  for (size_t i = 0; i < got.nodes.size(); ++i) {
    const SuffixCandidate &a = got.nodes[i], &b = want.nodes[i];
    ASSERT_TRUE(a.token == b.token && a.parent == b.parent && a.depth == b.depth) << where << " node " << i;
    ASSERT_DOUBLE_EQ(a.prob, b.prob) << where << " node " << i;
    ASSERT_DOUBLE_EQ(a.path_prob, b.path_prob) << where << " node " << i;
  }
}

// Invariants every tree has: parents first, depths, path products, limits, non-rising path_prob.
void expect_shape(const SuffixTree& t, int64_t max_depth, int64_t max_nodes, double min_prob) {
  ASSERT_LE(static_cast<int64_t>(t.nodes.size()), max_nodes);
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    const SuffixCandidate& n = t.nodes[i];
    ASSERT_LT(n.parent, static_cast<int32_t>(i));
    ASSERT_EQ(n.depth, n.parent < 0 ? 1 : t.nodes[static_cast<size_t>(n.parent)].depth + 1);
    ASSERT_TRUE(n.depth <= max_depth && n.prob >= min_prob);
    ASSERT_DOUBLE_EQ(n.path_prob, n.parent < 0 ? n.prob : t.nodes[static_cast<size_t>(n.parent)].path_prob * n.prob);
    ASSERT_LE(n.path_prob, i > 0 ? t.nodes[i - 1].path_prob : 1.0);
  }
}

TEST(SuffixIndex, MatchesBruteForceReference) {
  std::mt19937 rng(20240611);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  const double weights[] = {1.0, 0.5, 2.0, 0.3, 1.7};
  int lookups = 0, matched = 0, excluded = 0;
  for (int c = 0; c < 400; ++c) {
    const int32_t vocab = 3 + static_cast<int32_t>(pick(4));
    const int64_t matches[] = {1, 2, 3, 4, 5, 6, 8, 13, 32};
    const int64_t max_match = matches[pick(9)], cap = pick(3) == 0 ? 8 + pick(40) : 0;
    auto random = [&](int64_t n) { return random_toks(rng, static_cast<size_t>(n), static_cast<uint32_t>(vocab)); };
    SuffixIndex idx(max_match, cap);
    RefIndex ref{max_match, cap, 0, {}};
    for (int op = 0; op < 60; ++op) {
      const int64_t kind = pick(10);
      const int64_t some =
          ref.docs.empty() ? -1 : ref.docs[static_cast<size_t>(pick(static_cast<int64_t>(ref.docs.size())))].id;
      if (kind < 2 || some < 0) {  // a random document, or a sibling: a live one, mutated
        Toks t = some < 0 || pick(2) == 0 ? random(pick(16)) : ref.at(some)->toks;
        for (int32_t& x : t)
          x = pick(8) == 0 ? static_cast<int32_t>(pick(vocab)) : x;
        const double w = weights[pick(5)];
        ASSERT_EQ(idx.add_document(t, w), ref.add(t, w));
      } else if (kind < 5) {
        const Toks t = random(1 + pick(6));
        idx.append(some, t);
        ref.append(some, t);
      } else if (kind < 6) {
        idx.remove(some);
        ref.docs.erase(ref.at(some));
      } else {  // a random context, or (a prefix of) a live document, maybe excluding it
        Toks ctx = random(pick(9));
        int64_t excl = -1;
        if (pick(2) == 0) {
          const Toks& d = ref.at(some)->toks;
          ctx.assign(d.begin(), d.begin() + static_cast<ptrdiff_t>(
                                                pick(2) == 0 ? d.size() : pick(static_cast<int64_t>(d.size()) + 1)));
          excl = pick(3) == 0 ? -1 : some;
        }
        const int64_t depth = pick(6), nodes = pick(3) == 0 ? 1000 : pick(12);
        const double min_prob = pick(3) == 0 ? 0.3 * static_cast<double>(pick(3)) : 0.0;
        const SuffixTree got = idx.lookup(ctx, depth, nodes, min_prob, excl);
        expect_same(got, ref.lookup(ctx, depth, nodes, min_prob, excl),
                    "case " + std::to_string(c) + " op " + std::to_string(op));
        expect_shape(got, depth, nodes, min_prob);
        ++lookups, matched += got.match_length > 0, excluded += excl >= 0;
      }
      ASSERT_EQ(idx.tokens(), ref.total());
      ASSERT_EQ(idx.documents(), static_cast<int64_t>(ref.docs.size()));
      ASSERT_LE(idx.tokens(), cap > 0 ? cap : idx.tokens());
    }
    for (int64_t id = 0; id < ref.next_id; ++id)
      ASSERT_EQ(idx.contains(id), ref.at(id) != ref.docs.end());
  }
  EXPECT_GT(matched, lookups / 3);  // the cases exercise real matches, not only misses
  EXPECT_GT(excluded, lookups / 5);
}

// "a b c a b d" with a=1 b=2 c=3 d=4. After "a b": c (from offset 2) or d (offset 5), 1/2 each.
TEST(SuffixIndex, HandCasesAbcabdWeightsAndExclude) {
  SuffixIndex idx(8);
  idx.add_document({1, 2, 3, 1, 2, 4});
  // Best-first with ties by token: c (0.5), then c's child a (0.5, token 1 < 4), its child b,
  // then d (0.5), which ends the document and has no children.
  const SuffixTree t = idx.lookup({9, 1, 2}, 3, 16);
  expect_same(t, {{{3, -1, 1, 0.5, 0.5}, {1, 0, 2, 1.0, 0.5}, {2, 1, 3, 1.0, 0.5}, {4, -1, 1, 0.5, 0.5}}, 2}, "abcabd");
  EXPECT_EQ(idx.lookup({3, 1}, 4, 16).match_length, 2);  // "c a" -> b
  EXPECT_EQ(idx.lookup({4}, 4, 16).match_length, 0);     // d only ends the document
  EXPECT_EQ(idx.lookup({}, 4, 16).match_length, 0);
  // Limits: max_nodes, max_depth, min_prob.
  EXPECT_EQ(idx.lookup({1, 2}, 3, 2).nodes.size(), 2u);
  EXPECT_EQ(idx.lookup({1, 2}, 1, 16).nodes.size(), 2u);
  EXPECT_EQ(idx.lookup({1, 2}, 3, 16, 0.6).nodes.size(), 0u);  // both children have 0.5
  expect_same(idx.lookup({1, 2}, 0, 16), {{}, 2}, "depth 0");
  expect_same(idx.lookup({1, 2}, 3, 16), t, "repeat");  // the same query gives the same tree
  // Weights: 3 x "5 6 7" against 1 x "5 6 8"; then an occurrence that ends its document counts
  // in the parent but continues nowhere.
  idx.add_document({5, 6, 7}, 3.0);
  idx.add_document({5, 6, 8}, 1.0);
  expect_same(idx.lookup({5, 6}, 2, 16), {{{7, -1, 1, 0.75, 0.75}, {8, -1, 1, 0.25, 0.25}}, 2}, "weights");
  idx.add_document({9, 5, 6}, 4.0);
  expect_same(idx.lookup({5, 6}, 2, 16), {{{7, -1, 1, 0.375, 0.375}, {8, -1, 1, 0.125, 0.125}}, 2}, "ends");
  // exclude_doc: a sibling's own document holds the context as its suffix; that occurrence (offset
  // 5) must not count (it dilutes "3 1" to 1/2), the earlier one (offset 2) must.
  SuffixIndex own(8);
  const int64_t self = own.add_document({1, 2, 3, 1, 2});
  const Toks ctx = {1, 2, 3, 1, 2};
  expect_same(own.lookup(ctx, 2, 16), {{{3, -1, 1, 0.5, 0.5}, {1, 0, 2, 1.0, 0.5}}, 2}, "self counted");
  expect_same(own.lookup(ctx, 2, 16, 0.0, self), {{{3, -1, 1, 1.0, 1.0}, {1, 0, 2, 1.0, 1.0}}, 2}, "self skipped");
  own.append(self, {3});  // streaming on: now "1 2 3" at offset 0 continues
  EXPECT_EQ(own.lookup({1, 2, 3}, 2, 16, 0.0, self).match_length, 3);
}

TEST(SuffixIndex, StreamingEqualsWholeDocuments) {
  std::mt19937 rng(7);
  std::vector<Toks> docs(6);
  for (Toks& d : docs)
    d = random_toks(rng, 80, 5);
  SuffixIndex whole(6), streamed(6);
  std::vector<int64_t> ids;
  for (size_t i = 0; i < docs.size(); ++i) {
    whole.add_document(docs[i], 1.0 + 0.25 * static_cast<double>(i));
    ids.push_back(streamed.add_document({}, 1.0 + 0.25 * static_cast<double>(i)));
  }
  for (size_t k = 0; k < 80; ++k)  // interleaved, one token at a time
    for (size_t i = 0; i < docs.size(); ++i)
      streamed.append(ids[i], {docs[i][k]});
  EXPECT_EQ(whole.tokens(), streamed.tokens());
  for (int q = 0; q < 300; ++q) {
    const Toks ctx = random_toks(rng, 1 + rng() % 10, 5);
    const int64_t excl = q % 2 ? -1 : static_cast<int64_t>(rng() % docs.size());
    expect_same(streamed.lookup(ctx, 4, 12, 0.0, excl), whole.lookup(ctx, 4, 12, 0.0, excl),
                "query " + std::to_string(q));
  }
}

TEST(SuffixIndex, CapacityEvictsOldestFirstAndCutsOversizedDocuments) {
  SuffixIndex idx(4, 10);
  const int64_t a = idx.add_document({1, 2, 3, 4});
  const int64_t b = idx.add_document({5, 6, 7, 8});
  idx.append(a, {9});  // 9 tokens: fits
  EXPECT_EQ(idx.tokens(), 9);
  const int64_t c = idx.add_document({10, 11, 12});  // 12 > 10: the oldest (a) goes
  EXPECT_TRUE(!idx.contains(a) && idx.contains(b) && idx.contains(c));
  EXPECT_EQ(idx.tokens(), 7);
  EXPECT_EQ(idx.lookup({1, 2}, 2, 4).match_length, 0);
  EXPECT_THROW(idx.append(a, {1}), Error);
  idx.append(b, {13, 14, 15, 16});  // 11 > 10: c is the oldest other document
  EXPECT_FALSE(idx.contains(c));
  EXPECT_EQ(idx.tokens(), 8);
  // A document larger than the capacity alone keeps its newest 10 tokens.
  const int64_t d = idx.add_document({20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31});
  EXPECT_FALSE(idx.contains(b));
  EXPECT_EQ(idx.tokens(), 10);
  EXPECT_EQ(idx.lookup({20, 21}, 2, 4).match_length, 0);  // cut off
  EXPECT_EQ(idx.lookup({21, 22}, 2, 4).match_length, 1);  // "22" is the first kept token
  EXPECT_EQ(idx.lookup({22, 23}, 2, 4).match_length, 2);
  idx.append(d, {32, 33});  // the front slides on
  EXPECT_EQ(idx.tokens(), 10);
  EXPECT_EQ(idx.lookup({23, 24}, 2, 4).match_length, 1);
  EXPECT_EQ(idx.lookup({24, 25}, 2, 4).match_length, 2);
  // A long stream under a capacity: memory stays bounded (lazy removal compacts).
  SuffixIndex s(32, 2000);
  std::mt19937 rng(3);
  size_t peak = 0;
  for (int i = 0; i < 400; ++i) {
    const Toks t = random_toks(rng, 100 + rng() % 200, 1000);
    const int64_t id = s.add_document({});
    for (const int32_t x : t)
      s.append(id, {x});
    if (i % 3 == 0)
      s.remove(id);
    ASSERT_LE(s.tokens(), 2000);
    peak = std::max(peak, s.memory_bytes());
  }
  std::printf("capacity 2000, 400 streamed documents: peak memory %zu bytes (%.0f per capacity token)\n", peak,
              static_cast<double>(peak) / 2000.0);
  EXPECT_LT(peak, 2000u * 1024u);
}

TEST(SuffixIndex, BadArgumentsThrowError) {
  EXPECT_THROW(SuffixIndex(0), Error);
  EXPECT_THROW(SuffixIndex(4, -1), Error);
  SuffixIndex idx(4);
  for (const double w : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()})
    EXPECT_THROW(idx.add_document({1}, w), Error);
  const int64_t a = idx.add_document({1, 2});
  EXPECT_THROW(idx.append(a + 1, {1}), Error);
  EXPECT_THROW(idx.remove(-1), Error);
  EXPECT_THROW(idx.lookup({1}, -1, 4), Error);
  EXPECT_THROW(idx.lookup({1}, 2, -1), Error);
  for (const double p : {-0.1, 1.5, std::nan("")})
    EXPECT_THROW(idx.lookup({1}, 2, 4, p), Error);
  EXPECT_THROW(idx.lookup({1}, 2, 4, 0.0, a + 1), Error);
  EXPECT_THROW(idx.lookup({1}, 2, 4, 0.0, -2), Error);
  idx.remove(a);
  EXPECT_THROW(idx.remove(a), Error);
  EXPECT_THROW(idx.append(a, {1}), Error);
  EXPECT_EQ(idx.documents(), 0);
}

// Times `lookup` (max_depth 8, max_nodes 16) on each context `passes` times; prints the median.
void time_lookups(const char* what, const SuffixIndex& idx, const std::vector<Toks>& contexts, int passes) {
  std::vector<double> us;
  double nodes = 0, match = 0;
  for (int pass = 0; pass < passes; ++pass)
    for (const Toks& ctx : contexts) {
      const auto t0 = std::chrono::steady_clock::now();
      const SuffixTree t = idx.lookup(ctx, 8, 16);
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      nodes += static_cast<double>(t.nodes.size());
      match += static_cast<double>(t.match_length);
    }
  std::sort(us.begin(), us.end());
  const double n = static_cast<double>(us.size());
  std::printf("%s: %lld tokens, %.1f bytes/token; lookup median %.2f us, p90 %.2f us (mean match %.1f, nodes %.1f)\n",
              what, static_cast<long long>(idx.tokens()),
              static_cast<double>(idx.memory_bytes()) / static_cast<double>(idx.tokens()), us[us.size() / 2],
              us[us.size() * 9 / 10], match / n, nodes / n);
  EXPECT_GT(nodes / n, 1.0);
}

// 50k tokens like RL groups: a prompt plus 8 sibling completions per group, the siblings variants
// of one base text (3% substitutions, 1% four-token detours) made of phrases from a shared bank.
// Contexts: fresh siblings cut at random points. Then the degenerate case for this design: a
// completion stuck in a 50-token loop, where every match has about a thousand occurrences.
TEST(SuffixIndexBench, LookupCostAndMemory) {
  std::mt19937 rng(11);
  auto token = [&] { return static_cast<int32_t>(rng() % 32000); };
  std::vector<Toks> phrases(300);
  for (Toks& p : phrases)
    p = random_toks(rng, 6 + rng() % 10, 32000);
  auto base = [&] {
    Toks b;
    while (b.size() < 400)
      for (const int32_t x : phrases[rng() % phrases.size()])
        b.push_back(x);
    return b;
  };
  auto sibling = [&](const Toks& b) {
    Toks s;
    for (int32_t x : b) {
      const uint32_t r = rng() % 100;
      s.push_back(r < 3 ? token() : x);
      for (int k = 0; r == 3 && k < 4; ++k)
        s.push_back(token());
    }
    return s;
  };
  SuffixIndex idx(32);
  std::vector<Toks> bases;
  while (idx.tokens() < 50000) {
    idx.add_document(random_toks(rng, 150, 32000));  // the prompt
    bases.push_back(base());
    for (int s = 0; s < 8 && idx.tokens() < 50000; ++s)
      idx.add_document(sibling(bases.back()));
  }
  std::vector<Toks> contexts;
  for (int i = 0; i < 1000; ++i) {
    contexts.push_back(sibling(bases[rng() % bases.size()]));
    contexts.back().resize(40 + rng() % (contexts.back().size() - 40));
  }
  time_lookups("RL-like groups", idx, contexts, 20);
  const Toks loop = random_toks(rng, 50, 32000);
  SuffixIndex looped(32);
  Toks turns;  // 50 completions of 1000 tokens, each 20 turns of the loop
  for (int k = 0; k < 20; ++k)
    turns.insert(turns.end(), loop.begin(), loop.end());
  for (int d = 0; d < 50; ++d)
    looped.add_document(turns);
  contexts.clear();
  for (int i = 0; i < 50; ++i)
    contexts.push_back(Toks(loop.begin(), loop.begin() + 10 + i % 40));
  time_lookups("degenerate loop", looped, contexts, 4);
}

}  // namespace
}  // namespace updraft
