// SuffixIndex: model-free speculative drafts from text seen before (SuffixDecoding-style).
//
// What it computes. The index holds documents (a prompt, one sibling completion, a recent
// completion), each a token sequence with a weight w > 0. lookup(context, ...) takes the
// context's last max_match tokens and finds the longest suffix S of them (the match, length
// L >= 1) that occurs in a live document followed by at least one more token. An occurrence
// of S is a place where S ends at offset e of a document; e may be the document's end. The
// occurrence that ends at the current end of `exclude_doc` is skipped (a sequence must not
// match itself); earlier occurrences inside that document count like any other.
//   For a path P of tokens after S, C(P) = the summed weights of the occurrences that are
// followed by P, and C() = the summed weights of all occurrences. A node for path P+t has
// prob = C(P+t) / C(P) and path_prob = the product of prob along its path (= C(P+t) / C()).
// An occurrence with fewer than |P| + 1 tokens after it counts in C(P) but in no child of P,
// so the probabilities of a node's children may sum to less than 1 (an unknown continuation).
//   The tree grows best-first: a heap of candidates starts with the root's children; the best
// (highest path_prob; ties: smaller token id, then earlier insertion) becomes the next node and
// its children (depth <= max_depth) join the heap, until max_nodes nodes or no candidates.
// Candidates whose prob is below min_prob never join (so nothing below them appears). Nodes
// come in the order they were chosen, so parents precede children and path_prob never rises.
// No match (an empty context, or no suffix occurs followed by a token): match_length 0, no nodes.
//   Results are deterministic: they depend on the live documents (contents, weights, creation
// order) only, not on how the tokens arrived (whole, streamed, interleaved) or on compaction.
//
// Capacity (max_tokens > 0). Before tokens are added to document X, the oldest other documents
// (FIFO by creation) are evicted until everything fits. If X alone still does not fit, X keeps
// only its newest max_tokens tokens (its front is cut off, like a sliding window over a long
// stream); nothing throws. Evicted documents are gone: append/remove/exclude_doc on them throw.
//
// Data structure. Tokens live in per-document arrays. For each level m = 1, 2, 4, ... <=
// max_match, every position e with m tokens before it is chained (newest first) under a 64-bit
// hash of the m-gram ending at e; an open-addressing table maps the hash to its newest entry.
// A lookup hashes the context's last m tokens for each level, walks the chain of the largest
// level whose chain holds a verified occurrence with a continuation, and extends each entry's
// match backwards token by token (hash collisions are caught there), which gives L and the
// occurrences of S exactly. The continuation tree comes from those occurrences: a node owns a
// contiguous range of them, sorted by next token, so its children are sub-ranges.
//   Removal and eviction are lazy: the document is marked dead (its token array freed) and
// its chain entries are skipped; a document's cut-off front is skipped the same way. When dead
// entries outnumber live ones the index is rebuilt (compaction), so memory stays below about
// twice the live content.
//
// Complexity (M = max_match, G = 1 + floor(log2 M) levels, K = occurrences of the match):
//   add_document / append: O(M) per token (hashing G grams), plus amortised compaction.
//   remove: O(log documents), plus amortised compaction (O(M) per removed token).
//   lookup: O(M) hashing, O(M) per chain entry walked (the entries of the context's last m
//   tokens for each level tried, m <= L < 2m for the last; dead entries included), then per
//   expanded node O(K') for its K' occurrences, O(K' log K') when they continue differently.
//   Memory: 4 bytes (token) + 8 (position) + 4 G (chains) per stored position, plus 12 bytes
//   per table slot (1.4 to 2.9 slots per distinct (level, gram) pair); see README.md.
//
// API notes: the match length comes back inside SuffixTree (no match_length_of_last_lookup():
// a lookup leaves no result state behind). contains() tells whether a document is still live
// (capacity eviction can remove a sibling that is still streaming).
//
// Thread safety: none; one owner. lookup() is const but reuses internal scratch buffers, so
// not even concurrent lookups are allowed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace updraft {

// One node of a candidate tree.
struct SuffixCandidate {
  int32_t token = 0;
  int32_t parent = -1;     // index in SuffixTree::nodes; -1: a child of the root
  int32_t depth = 1;       // 1: the token right after the context
  double prob = 0.0;       // C(path) / C(parent path)
  double path_prob = 0.0;  // product of prob along the path from the root
};

struct SuffixTree {
  std::vector<SuffixCandidate> nodes;  // in selection order: parents before children
  int64_t match_length = 0;            // L, the matched suffix's length (0: no match)
};

class SuffixIndex {
 public:
  // max_match >= 1: longest context suffix looked up; max_tokens >= 0: capacity (0: unbounded).
  // Throws Error otherwise.
  explicit SuffixIndex(int64_t max_match = 32, int64_t max_tokens = 0);

  // Starts a document (weight finite and > 0, else Error) and returns its id (0, 1, 2, ...).
  int64_t add_document(const std::vector<int32_t>& tokens, double weight = 1.0);
  // Appends to a live document (Error if unknown, removed or evicted).
  void append(int64_t doc, const std::vector<int32_t>& tokens);
  // Removes a live document (Error if unknown, removed or evicted); its tokens stop matching.
  void remove(int64_t doc);
  // The candidate tree for `context` (see the top of this file). Error if max_depth < 0,
  // max_nodes < 0, min_prob outside [0, 1], or exclude_doc neither -1 nor a live document.
  SuffixTree lookup(const std::vector<int32_t>& context, int64_t max_depth, int64_t max_nodes, double min_prob = 0.0,
                    int64_t exclude_doc = -1) const;

  bool contains(int64_t doc) const { return live_.count(doc) != 0; }
  int64_t max_match() const { return static_cast<int64_t>(max_match_); }
  int64_t tokens() const { return static_cast<int64_t>(live_tokens_); }  // live tokens stored
  int64_t documents() const { return static_cast<int64_t>(live_.size()); }
  size_t memory_bytes() const;  // approximate heap bytes, scratch buffers included

 private:
  struct Doc {
    std::vector<int32_t> tokens;
    double weight = 1.0;
    size_t begin = 0;  // tokens before it were cut off by the capacity
    bool alive = true;
  };
  struct Pos {  // a chained position: the end offset e (>= 1) in docs_[slot]
    uint32_t slot, end;
  };
  struct Occ {  // lookup scratch: one occurrence of the match
    uint32_t slot, end, len;
    int32_t next;
    double weight;
  };
  struct Cand {  // lookup scratch: a heap candidate, owning occ_[lo, hi)
    double path_prob, prob, count;
    int32_t token, parent, depth;
    uint64_t seq;
    uint32_t lo, hi;
  };

  uint32_t slot_of(int64_t doc, const char* what) const;
  void append_tokens(uint32_t slot, const std::vector<int32_t>& tokens);
  void evict_for(uint32_t slot, size_t incoming);
  void drop(std::map<int64_t, uint32_t>::iterator it);
  void index_position(uint32_t slot, size_t end);
  void maybe_compact();
  void compact();
  uint32_t find_head(uint64_t key) const;
  uint32_t& head_slot(uint64_t key);
  void grow_table();
  size_t find_matches(const std::vector<int32_t>& context, uint32_t exclude) const;
  void grow_tree(SuffixTree& tree, int64_t max_depth, int64_t max_nodes, double min_prob) const;
  void push_children(int32_t parent, int32_t depth, uint32_t lo, uint32_t hi, double count, double path_prob,
                     double min_prob, uint64_t& seq) const;

  size_t max_match_, max_tokens_;
  int levels_;                        // chain levels: m = 1, 2, 4, ..., 2^(levels_ - 1)
  std::vector<Doc> docs_;             // by slot, in creation order (dead ones until compaction)
  std::map<int64_t, uint32_t> live_;  // live document id -> slot; begin() is the oldest
  int64_t next_id_ = 0;
  size_t live_tokens_ = 0, garbage_ = 0;  // garbage: dead positions and dead documents
  std::vector<Pos> where_;                // position id -> place
  std::vector<uint32_t> links_;           // [position id * levels_ + level] -> older position id
  std::vector<uint64_t> table_keys_;      // open addressing: gram key (0: empty slot) ->
  std::vector<uint32_t> table_heads_;     //   the newest position id in its chain
  size_t table_used_ = 0;
  mutable std::vector<Occ> occ_;
  mutable std::vector<Cand> heap_;
};

}  // namespace updraft
