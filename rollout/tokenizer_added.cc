// AddedMatcher (rollout/tokenizer_detail.h): building the trie of added tokens, and the
// single_word / lstrip / rstrip checks its split() makes around each match.
#include <algorithm>
#include <cstdint>
#include <string_view>

#include "rollout/tokenizer.h"
#include "rollout/tokenizer_detail.h"

namespace updraft::tokenizer_detail {
namespace {

// Rust's char::is_whitespace (the Unicode White_Space property).
bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace

void AddedMatcher::add(const AddedToken* t) {
  int32_t node = 0;
  for (unsigned char c : t->content) {
    int32_t nx = child(node, c);
    if (nx < 0) {
      nx = static_cast<int32_t>(nodes_.size());
      nodes_[node].next.emplace_back(c, nx);
      nodes_.emplace_back();
    }
    node = nx;
  }
  nodes_[node].token = t;
  first_[static_cast<unsigned char>(t->content[0])] = true;
}

size_t AddedMatcher::char_start_before(std::string_view s, size_t i) {
  size_t k = i - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80 && i - k < 4)
    --k;
  return k;
}

bool AddedMatcher::word_before(std::string_view s, size_t i, const SplitRegex& wc) {
  if (i == 0)
    return false;
  const size_t k = char_start_before(s, i);
  return wc.full_match(s.substr(k, i - k));
}

bool AddedMatcher::word_after(std::string_view s, size_t i, const SplitRegex& wc) {
  if (i >= s.size())
    return false;
  size_t bad = 0;
  const size_t n = std::max<size_t>(utf8_seq(s, i, &bad), 1);
  return wc.full_match(s.substr(i, n));
}

size_t AddedMatcher::space_start_before(std::string_view s, size_t i) {
  while (i > 0) {
    const size_t k = char_start_before(s, i);
    size_t bad = 0;
    const size_t n = utf8_seq(s, k, &bad);
    if (n != i - k || !is_white_space(utf8_decode(s, k, n)))
      break;
    i = k;
  }
  return i;
}

size_t AddedMatcher::space_end_after(std::string_view s, size_t i) {
  while (i < s.size()) {
    size_t bad = 0;
    const size_t n = utf8_seq(s, i, &bad);
    if (n == 0 || !is_white_space(utf8_decode(s, i, n)))
      break;
    i += n;
  }
  return i;
}

}  // namespace updraft::tokenizer_detail
