// Internal to the tokenizer's .cc files (rollout/tokenizer*.cc); nothing else includes it. What
// they share, in namespace updraft::tokenizer_detail, and where it is defined:
//  * UTF-8: utf8_seq (the length of a well-formed sequence) and utf8_decode (its code point),
//    in tokenizer_text.cc.
//  * ByteTable / byte_table(): the byte <-> character table of byte-level BPE, in
//    tokenizer_text.cc; finish_tables reads it too.
//  * StrHash / StrMap (string keys looked up by string_view) and MergeTable (a pair of ids ->
//    rank and merged id): the containers of Tokenizer::Impl, defined here.
//  * AddedToken and AddedMatcher, which finds added tokens in text (its split() is a template and
//    lives here; the other bodies are in tokenizer_added.cc).
//  * PreStep: one step of the pre-tokenizer.
// And, in namespace updraft, the definition of Tokenizer::Impl: tokenizer_parse.cc fills it from
// a tokenizer.json (parse, finish_tables); tokenizer.cc encodes with it (run_pre, bpe, the word
// cache) and holds the public methods and saving.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rollout/tokenizer.h"

namespace updraft::tokenizer_detail {

using Json = nlohmann::json;

// ---- UTF-8 (tokenizer_text.cc) ------------------------------------------------------------

// Length of the well-formed UTF-8 sequence at s[i] (1 to 4), or 0 with *bad set to the length
// of the maximal ill-formed prefix there (what from_utf8_lossy replaces by one U+FFFD).
size_t utf8_seq(std::string_view s, size_t i, size_t* bad);
// The code point of the well-formed sequence of length n at s[i].
uint32_t utf8_decode(std::string_view s, size_t i, size_t n);

// ---- the byte <-> character table of byte-level BPE (tokenizer_text.cc) --------------------

struct ByteTable {
  std::array<std::string, 256> spelling;  // byte -> UTF-8 of its character
  std::array<int16_t, 324> byte_of;       // code point -> byte, or -1
};

const ByteTable& byte_table();

// ---- containers ---------------------------------------------------------------------------

struct StrHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StrMap = std::unordered_map<std::string, V, StrHash, std::equal_to<>>;

// (left id, right id) -> (rank, merged id), open addressing on the packed pair.
class MergeTable {
 public:
  void reserve(size_t n) {
    int bits = 4;
    while ((size_t{1} << bits) < 2 * n + 16)
      ++bits;
    shift_ = 64 - bits;
    keys_.assign(size_t{1} << bits, kEmpty);
    vals_.assign(size_t{1} << bits, {0, 0});
  }
  void put(int32_t a, int32_t b, int32_t rank, int32_t merged) {  // a later put of a pair wins
    const uint64_t k = key(a, b);
    size_t i = slot(k);
    while (keys_[i] != kEmpty && keys_[i] != k)
      i = (i + 1) & (keys_.size() - 1);
    keys_[i] = k;
    vals_[i] = {rank, merged};
  }
  bool get(int32_t a, int32_t b, int32_t* rank, int32_t* merged) const {
    const uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & (keys_.size() - 1)) {
      if (keys_[i] == k) {
        *rank = vals_[i].first;
        *merged = vals_[i].second;
        return true;
      }
      if (keys_[i] == kEmpty)
        return false;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key(int32_t a, int32_t b) {
    return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_); }
  int shift_ = 60;
  std::vector<uint64_t> keys_ = std::vector<uint64_t>(16, kEmpty);
  std::vector<std::pair<int32_t, int32_t>> vals_ = std::vector<std::pair<int32_t, int32_t>>(16);
};

// ---- added tokens -------------------------------------------------------------------------

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// Finds added tokens in text as the aho-corasick matcher of `tokenizers` does (leftmost, then
// longest, non-overlapping), then applies single_word / lstrip / rstrip to each match.
class AddedMatcher {
 public:
  void add(const AddedToken* t);

  // fn(piece, token): token is null for the text between matches (never empty).
  template <typename Fn>
  void split(std::string_view text, const SplitRegex& word_char, Fn&& fn) const {
    size_t pos = 0, start_offset = 0;
    while (pos < text.size()) {
      if (!first_[static_cast<unsigned char>(text[pos])]) {
        ++pos;
        continue;
      }
      const AddedToken* best = nullptr;
      size_t stop = 0;
      for (size_t j = pos, node = 0; j < text.size(); ++j) {
        const int32_t nx = child(static_cast<int32_t>(node), static_cast<unsigned char>(text[j]));
        if (nx < 0)
          break;
        node = static_cast<size_t>(nx);
        if (nodes_[node].token != nullptr) {
          best = nodes_[node].token;
          stop = j + 1;
        }
      }
      if (best == nullptr) {
        ++pos;
        continue;
      }
      size_t start = pos;
      pos = stop;
      if (start < start_offset)
        continue;  // inside what an rstrip already took
      if (best->single_word && (word_before(text, start, word_char) || word_after(text, stop, word_char)))
        continue;
      if (best->lstrip)
        start = std::max(space_start_before(text, start), start_offset);
      if (best->rstrip)
        stop = space_end_after(text, stop);
      if (start > start_offset)
        fn(text.substr(start_offset, start - start_offset), nullptr);
      fn(text.substr(start, stop - start), best);
      start_offset = stop;
    }
    if (start_offset < text.size())
      fn(text.substr(start_offset), nullptr);
  }

  bool empty() const { return nodes_.size() == 1; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;
    const AddedToken* token = nullptr;
  };
  int32_t child(int32_t node, unsigned char c) const {
    for (const auto& [ch, nx] : nodes_[node].next)
      if (ch == c)
        return nx;
    return -1;
  }
  static size_t char_start_before(std::string_view s, size_t i);  // REQUIRES: i > 0
  static bool word_before(std::string_view s, size_t i, const SplitRegex& wc);
  static bool word_after(std::string_view s, size_t i, const SplitRegex& wc);
  static size_t space_start_before(std::string_view s, size_t i);
  static size_t space_end_after(std::string_view s, size_t i);

  std::vector<Node> nodes_ = std::vector<Node>(1);
  std::array<bool, 256> first_{};
};

// One step of the pre-tokenizer: a Split, or the final ByteLevel (whose own regex, when
// use_regex, is `regex`).
struct PreStep {
  std::unique_ptr<SplitRegex> regex;
  bool byte_level = false;
  bool add_prefix_space = false;
};

}  // namespace updraft::tokenizer_detail

namespace updraft {

// The tokenizer's state. parse() (tokenizer_parse.cc) fills it once; after that only the word
// cache changes, under cache_mu, so a const Impl may serve any number of threads.
struct Tokenizer::Impl {
  std::string where;
  // The BPE model.
  tokenizer_detail::StrMap<int32_t> vocab;                  // model token -> id
  std::vector<std::pair<std::string, int32_t>> entries;     // model vocab ordered by (id, token)
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  tokenizer_detail::MergeTable merge_table;
  std::array<int32_t, 256> byte_id{};
  tokenizer_detail::StrMap<int32_t> bytes_vocab;  // raw bytes -> id, for ignore_merges
  int32_t unk_id = -1;
  std::string unk_token;
  bool fuse_unk = false, ignore_merges = false;
  // Added tokens and the id -> token tables over both.
  std::vector<tokenizer_detail::AddedToken> added;
  tokenizer_detail::StrMap<int32_t> added_ids;
  tokenizer_detail::AddedMatcher raw_matcher, normalized_matcher;
  SplitRegex word_char{R"(\w)"};
  std::vector<std::string> spelling;  // id -> token ("" when absent)
  std::vector<std::string> id_bytes;  // id -> bytes the ByteLevel decoder gives
  std::vector<uint8_t> flags;         // bit 0: present, bit 1: special
  // Pipeline.
  std::vector<tokenizer_detail::PreStep> pre;
  std::vector<int32_t> prefix_ids, suffix_ids;  // add_special
  tokenizer_detail::Json normalizer, pre_tokenizer, post_processor, decoder, truncation, padding;
  // The word cache.
  mutable std::mutex cache_mu;
  mutable tokenizer_detail::StrMap<std::vector<int32_t>> cache;

  void parse(const tokenizer_detail::Json& j);
  void parse_model(const tokenizer_detail::Json& m);
  void parse_pre_tokenizer(const tokenizer_detail::Json& p);
  void parse_post_processor(const tokenizer_detail::Json& p);
  void finish_tables();

  template <typename Fn>
  void for_each_segment(std::string_view text, Fn&& fn) const {
    if (raw_matcher.empty() && normalized_matcher.empty()) {
      if (!text.empty())
        fn(text, nullptr);
      return;
    }
    raw_matcher.split(text, word_char, [&](std::string_view piece, const tokenizer_detail::AddedToken* t) {
      if (t != nullptr)
        fn(piece, t);
      else
        normalized_matcher.split(piece, word_char, fn);
    });
  }
  void run_pre(std::string_view piece, size_t step, std::vector<std::vector<std::string_view>>& bufs,
               const std::function<void(std::string_view)>& fn) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void merge_linear(std::vector<int32_t>& syms) const;
  void merge_heap(std::vector<int32_t>& syms) const;
};

}  // namespace updraft
