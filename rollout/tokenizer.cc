#include "rollout/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "kernels/core/error.h"
#include "kernels/io/atomic_file.h"

namespace updraft {
namespace {

using Json = nlohmann::json;

// Ids above this are refused, so that a damaged file cannot make us allocate without bound.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;
// The word cache: words up to this many bytes, cleared when it holds this many words.
constexpr size_t kMaxCachedWord = 256;
constexpr size_t kCacheCapacity = 1 << 17;
// Words longer than this are merged with a heap instead of the quadratic linear scan.
constexpr size_t kHeapMergeThreshold = 96;

// ---- UTF-8 --------------------------------------------------------------------------------

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Length of the well-formed UTF-8 sequence at s[i] (1 to 4), or 0 with *bad set to the length
// of the maximal ill-formed prefix there (what from_utf8_lossy replaces by one U+FFFD).
size_t utf8_seq(std::string_view s, size_t i, size_t* bad) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80)
    return 1;
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    lo = c == 0xE0 ? 0xA0 : 0x80;
    hi = c == 0xED ? 0x9F : 0xBF;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    lo = c == 0xF0 ? 0x90 : 0x80;
    hi = c == 0xF4 ? 0x8F : 0xBF;
  } else {
    *bad = 1;
    return 0;
  }
  size_t k = 0;
  for (; k < need && i + 1 + k < s.size(); ++k) {
    const auto b = static_cast<unsigned char>(s[i + 1 + k]);
    if (b < (k == 0 ? lo : 0x80) || b > (k == 0 ? hi : 0xBF))
      break;
  }
  if (k == need)
    return need + 1;
  *bad = k + 1;
  return 0;
}

}  // namespace

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t bad = 0;
    const size_t n = utf8_seq(s, i, &bad);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

namespace {

// The code point of the well-formed sequence of length n at s[i].
uint32_t utf8_decode(std::string_view s, size_t i, size_t n) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k])); };
  if (n == 1)
    return b(0);
  if (n == 2)
    return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
  if (n == 3)
    return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

// Rust's char::is_whitespace (the Unicode White_Space property).
bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// ---- the byte <-> character table of byte-level BPE ---------------------------------------

struct ByteTable {
  std::array<std::string, 256> spelling;  // byte -> UTF-8 of its character
  std::array<int16_t, 324> byte_of;       // code point -> byte, or -1
};

const ByteTable& byte_table() {
  static const ByteTable table = [] {
    ByteTable t;
    t.byte_of.fill(-1);
    uint32_t extra = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? b : 256 + extra++;
      append_utf8(t.spelling[b], cp);
      t.byte_of[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return table;
}

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

}  // namespace

// ---- SplitRegex ---------------------------------------------------------------------------

struct SplitRegex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

// Per-thread match state: PCRE2 match data and a JIT stack that grows on demand.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
  MatchState() {
    UPD_CHECK(data != nullptr && context != nullptr && stack != nullptr) << "PCRE2 out of memory";
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

namespace {

// Letters and numbers that Unicode 15.0-16.0 added: PCRE2 10.42 knows Unicode 14, the Oniguruma
// of `tokenizers` 0.21 knows them (a newer PCRE2 already has them, which is harmless).
constexpr const char* kNewerLetters =
    R"(\x{1C89}-\x{1C8A}\x{A7CB}-\x{A7CD}\x{A7DA}-\x{A7DC}\x{105C0}-\x{105F3}\x{10D4A}-\x{10D65})"
    R"(\x{10D6F}-\x{10D85}\x{10EC2}-\x{10EC4}\x{1123F}-\x{11240}\x{11380}-\x{11389}\x{1138B}\x{1138E})"
    R"(\x{11390}-\x{113B5}\x{113B7}\x{113D1}\x{113D3}\x{11BC0}-\x{11BE0}\x{11F02}\x{11F04}-\x{11F10})"
    R"(\x{11F12}-\x{11F33}\x{1342F}\x{13441}-\x{13446}\x{13460}-\x{143FA}\x{16100}-\x{1611D})"
    R"(\x{16D40}-\x{16D6C}\x{18CFF}\x{1B132}\x{1B155}\x{1DF25}-\x{1DF2A}\x{1E030}-\x{1E06D})"
    R"(\x{1E4D0}-\x{1E4EB}\x{1E5D0}-\x{1E5ED}\x{1E5F0}\x{2B739}\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF})";
constexpr const char* kNewerNumbers =
    R"(\x{10D40}-\x{10D49}\x{116D0}-\x{116E3}\x{11BF0}-\x{11BF9}\x{11F50}-\x{11F59}\x{16130}-\x{16139})"
    R"(\x{16D70}-\x{16D79}\x{1CCF0}-\x{1CCF9}\x{1D2C0}-\x{1D2D3}\x{1E4F0}-\x{1E4F9}\x{1E5F1}-\x{1E5FA})";

// Rewrites a pattern so that PCRE2 classifies characters as Oniguruma does: \s and \S become
// the Unicode White_Space property (PCRE2's own \s also takes U+180E), and \p{L} / \p{N} take
// the characters above. \P{L} / \P{N} inside a [...] class, \Q...\E quotes and every other
// escape are copied as they are.
std::string onig_compatible(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char ch = p[i];
    if (ch == '\\' && i + 1 < p.size()) {
      const char c = p[i + 1];
      if (c == 'Q') {
        const size_t end = p.find("\\E", i + 2);
        const size_t stop = end == std::string::npos ? p.size() : end + 2;
        out += p.substr(i, stop - i);
        i = stop - 1;
      } else if (c == 's' || c == 'S') {
        out += c == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
        ++i;
      } else if ((c == 'p' || c == 'P') && (p.compare(i + 2, 3, "{L}") == 0 || p.compare(i + 2, 3, "{N}") == 0) &&
                 !(in_class && c == 'P')) {
        const std::string cls =
            std::string("\\p{") + p[i + 3] + "}" + (p[i + 3] == 'L' ? kNewerLetters : kNewerNumbers);
        out += in_class ? cls : (c == 'p' ? "[" : "[^") + cls + "]";
        i += 4;
      } else {
        out += p.substr(i, 2);
        ++i;
      }
    } else if (!in_class && ch == '[') {
      in_class = true;
      out += ch;
      if (i + 1 < p.size() && p[i + 1] == '^')
        out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']')  // a leading ']' is a member
        out += p[++i];
    } else if (in_class && ch == '[' && i + 1 < p.size() && p[i + 1] == ':' &&
               p.find(":]", i + 2) != std::string::npos) {
      const size_t end = p.find(":]", i + 2);  // [:alpha:]
      out += p.substr(i, end + 2 - i);
      i = end + 1;
    } else {
      in_class = in_class && ch != ']';
      out += ch;
    }
  }
  return out;
}

}  // namespace

SplitRegex::SplitRegex(const std::string& pattern) : pattern_(pattern), code_(std::make_unique<Code>()) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  const std::string translated = onig_compatible(pattern);
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
  UPD_REQUIRE(code_->code != nullptr) << "split pattern \"" << pattern << "\": " << pcre2_message(err);
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);  // the interpreter serves if JIT is unavailable
}

SplitRegex::~SplitRegex() = default;
SplitRegex::SplitRegex(SplitRegex&&) noexcept = default;
SplitRegex& SplitRegex::operator=(SplitRegex&&) noexcept = default;

void SplitRegex::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  MatchState& st = match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t last = 0, off = 0;
  while (off < text.size()) {
    const int rc = pcre2_match(code_->code, subject, text.size(), off, 0, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH)
      break;
    UPD_REQUIRE(rc >= 0) << "split pattern \"" << pattern_ << "\": " << pcre2_message(rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t s = ov[0], e = ov[1];
    if (e <= s) {  // an empty match splits nothing: go on from the next character
      off = s + 1;
      while (off < text.size() && (static_cast<unsigned char>(text[off]) & 0xC0) == 0x80)
        ++off;
      continue;
    }
    if (s > last)
      pieces.push_back(text.substr(last, s - last));
    pieces.push_back(text.substr(s, e - s));
    last = off = e;
  }
  if (last < text.size())
    pieces.push_back(text.substr(last));
}

bool SplitRegex::full_match(std::string_view text) const {
  MatchState& st = match_state();
  const int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                             PCRE2_ANCHORED | PCRE2_ENDANCHORED, st.data, st.context);
  return rc >= 0;
}

// ---- byte-level spelling ------------------------------------------------------------------

std::string byte_level_encode(std::string_view bytes) {
  const ByteTable& t = byte_table();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes)
    out += t.spelling[c];
  return out;
}

bool byte_level_decode(std::string_view token, std::string& bytes) {
  const ByteTable& t = byte_table();
  bytes.clear();
  for (size_t i = 0; i < token.size();) {
    size_t bad = 0;
    const size_t n = utf8_seq(token, i, &bad);
    if (n == 0)
      return false;
    const uint32_t cp = utf8_decode(token, i, n);
    if (cp >= t.byte_of.size() || t.byte_of[cp] < 0)
      return false;
    bytes += static_cast<char>(t.byte_of[cp]);
    i += n;
  }
  return true;
}

// ---- Tokenizer ----------------------------------------------------------------------------

namespace {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// Finds added tokens in text as the aho-corasick matcher of `tokenizers` does (leftmost, then
// longest, non-overlapping), then applies single_word / lstrip / rstrip to each match.
class AddedMatcher {
 public:
  void add(const AddedToken* t) {
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
  static size_t char_start_before(std::string_view s, size_t i) {  // REQUIRES: i > 0
    size_t k = i - 1;
    while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80 && i - k < 4)
      --k;
    return k;
  }
  static bool word_before(std::string_view s, size_t i, const SplitRegex& wc) {
    if (i == 0)
      return false;
    const size_t k = char_start_before(s, i);
    return wc.full_match(s.substr(k, i - k));
  }
  static bool word_after(std::string_view s, size_t i, const SplitRegex& wc) {
    if (i >= s.size())
      return false;
    size_t bad = 0;
    const size_t n = std::max<size_t>(utf8_seq(s, i, &bad), 1);
    return wc.full_match(s.substr(i, n));
  }
  static size_t space_start_before(std::string_view s, size_t i) {
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
  static size_t space_end_after(std::string_view s, size_t i) {
    while (i < s.size()) {
      size_t bad = 0;
      const size_t n = utf8_seq(s, i, &bad);
      if (n == 0 || !is_white_space(utf8_decode(s, i, n)))
        break;
      i += n;
    }
    return i;
  }

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

}  // namespace

struct Tokenizer::Impl {
  std::string where;
  // The BPE model.
  StrMap<int32_t> vocab;                                    // model token -> id
  std::vector<std::pair<std::string, int32_t>> entries;     // model vocab ordered by (id, token)
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  MergeTable merge_table;
  std::array<int32_t, 256> byte_id{};
  StrMap<int32_t> bytes_vocab;  // raw bytes -> id, for ignore_merges
  int32_t unk_id = -1;
  std::string unk_token;
  bool fuse_unk = false, ignore_merges = false;
  // Added tokens and the id -> token tables over both.
  std::vector<AddedToken> added;
  StrMap<int32_t> added_ids;
  AddedMatcher raw_matcher, normalized_matcher;
  SplitRegex word_char{R"(\w)"};
  std::vector<std::string> spelling;  // id -> token ("" when absent)
  std::vector<std::string> id_bytes;  // id -> bytes the ByteLevel decoder gives
  std::vector<uint8_t> flags;         // bit 0: present, bit 1: special
  // Pipeline.
  std::vector<PreStep> pre;
  std::vector<int32_t> prefix_ids, suffix_ids;  // add_special
  Json normalizer, pre_tokenizer, post_processor, decoder, truncation, padding;
  // The word cache.
  mutable std::mutex cache_mu;
  mutable StrMap<std::vector<int32_t>> cache;

  void parse(const Json& j);
  void parse_model(const Json& m);
  void parse_pre_tokenizer(const Json& p);
  void parse_post_processor(const Json& p);
  void finish_tables();

  template <typename Fn>
  void for_each_segment(std::string_view text, Fn&& fn) const {
    if (raw_matcher.empty() && normalized_matcher.empty()) {
      if (!text.empty())
        fn(text, nullptr);
      return;
    }
    raw_matcher.split(text, word_char, [&](std::string_view piece, const AddedToken* t) {
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

namespace {


const Json& field(const Json& j, const char* key) {
  static const Json null_json;
  return j.is_object() && j.contains(key) ? j[key] : null_json;
}

bool opt_bool(const Json& j, const char* key, bool dflt, const std::string& where) {
  const Json& v = field(j, key);
  if (v.is_null())
    return dflt;
  UPD_REQUIRE(v.is_boolean()) << where << ": \"" << key << "\" must be true or false, not " << v.dump();
  return v.get<bool>();
}

std::string type_of(const Json& j, const std::string& where, const char* what) {
  UPD_REQUIRE(j.is_object() && field(j, "type").is_string()) << where << ": " << what << " has no \"type\"";
  return j["type"].get<std::string>();
}

int32_t read_id(const Json& v, const std::string& where, const std::string& what) {
  UPD_REQUIRE(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxTokenId)
      << where << ": " << what << " has an id that is not an integer in [0, " << kMaxTokenId << "]: " << v.dump();
  return static_cast<int32_t>(v.get<int64_t>());
}

}  // namespace

void Tokenizer::Impl::parse_model(const Json& m) {
  UPD_REQUIRE(m.is_object()) << where << ": no \"model\" object";
  const Json& type = field(m, "type");
  UPD_REQUIRE(type.is_null() || (type.is_string() && type.get<std::string>() == "BPE"))
      << where << ": model type " << type.dump() << " is not supported (only \"BPE\")";
  const Json& dropout = field(m, "dropout");
  UPD_REQUIRE(dropout.is_null() || (dropout.is_number() && dropout.get<double>() == 0.0))
      << where << ": BPE dropout " << dropout.dump() << " is not supported";
  UPD_REQUIRE(!opt_bool(m, "byte_fallback", false, where)) << where << ": BPE byte_fallback is not supported";
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json& v = field(m, key);
    UPD_REQUIRE(v.is_null() || (v.is_string() && v.get<std::string>().empty()))
        << where << ": BPE " << key << " " << v.dump() << " is not supported";
  }
  fuse_unk = opt_bool(m, "fuse_unk", false, where);
  ignore_merges = opt_bool(m, "ignore_merges", false, where);

  const Json& v = field(m, "vocab");
  UPD_REQUIRE(v.is_object()) << where << ": model.vocab must be an object of token -> id";
  vocab.reserve(v.size());
  entries.reserve(v.size());
  for (const auto& [tok, id] : v.items()) {
    const int32_t i = read_id(id, where, "vocab token \"" + tok + "\"");
    vocab.emplace(tok, i);
    entries.emplace_back(tok, i);
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second < b.second : a.first < b.first;
  });

  const Json& u = field(m, "unk_token");
  UPD_REQUIRE(u.is_null() || u.is_string()) << where << ": model.unk_token must be a string or null";
  if (u.is_string()) {
    unk_token = u.get<std::string>();
    auto it = vocab.find(unk_token);
    unk_id = it == vocab.end() ? -1 : it->second;
  }

  const Json& ms = field(m, "merges");
  UPD_REQUIRE(ms.is_array() || ms.is_null()) << where << ": model.merges must be a list";
  merges.reserve(ms.size());
  merge_table.reserve(ms.size());
  for (size_t r = 0; r < ms.size(); ++r) {
    const Json& e = ms[r];
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      UPD_REQUIRE(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos)
          << where << ": merge #" << r << " " << e.dump() << " is not two tokens separated by one space";
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {
      UPD_REQUIRE(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string())
          << where << ": merge #" << r << " " << e.dump() << " is neither \"a b\" nor [\"a\", \"b\"]";
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    }
    const auto ia = vocab.find(a), ib = vocab.find(b), iab = vocab.find(a + b);
    for (const auto& [it, t] : {std::pair{ia, a}, std::pair{ib, b}, std::pair{iab, a + b}})
      UPD_REQUIRE(it != vocab.end()) << where << ": merge #" << r << " " << e.dump() << " names \"" << t
                                     << "\", which is not in the vocab";
    merge_table.put(ia->second, ib->second, static_cast<int32_t>(r), iab->second);
    merges.emplace_back(std::move(a), std::move(b));
  }
}

void Tokenizer::Impl::parse_pre_tokenizer(const Json& p) {
  const std::string type = type_of(p, where, "pre_tokenizer");
  if (type == "Sequence") {
    const Json& list = field(p, "pretokenizers");
    UPD_REQUIRE(list.is_array()) << where << ": Sequence pre_tokenizer without a \"pretokenizers\" list";
    for (const Json& e : list)
      parse_pre_tokenizer(e);
    return;
  }
  UPD_REQUIRE(pre.empty() || !pre.back().byte_level)
      << where << ": pre_tokenizer " << type << " after ByteLevel is not supported (ByteLevel must come last)";
  const auto compile = [&](const std::string& pattern) {
    try {
      return std::make_unique<SplitRegex>(pattern);
    } catch (const Error& e) {
      UPD_FAIL() << where << ": " << e.what();
    }
    return std::unique_ptr<SplitRegex>();
  };
  PreStep step;
  if (type == "ByteLevel") {
    step.byte_level = true;
    step.add_prefix_space = opt_bool(p, "add_prefix_space", true, where);
    if (opt_bool(p, "use_regex", true, where))
      step.regex = compile(kGpt2SplitPattern);
  } else if (type == "Split") {
    const Json& pat = field(p, "pattern");
    const Json& behavior = field(p, "behavior");
    UPD_REQUIRE(behavior.is_string() && behavior.get<std::string>() == "Isolated")
        << where << ": Split behavior " << behavior.dump() << " is not supported (only \"Isolated\")";
    UPD_REQUIRE(!opt_bool(p, "invert", false, where)) << where << ": Split with invert true is not supported";
    if (field(pat, "Regex").is_string()) {
      step.regex = compile(pat["Regex"].get<std::string>());
    } else if (field(pat, "String").is_string()) {
      std::string escaped;
      for (char c : pat["String"].get<std::string>()) {
        if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c)))
          escaped += '\\';
        escaped += c;
      }
      step.regex = compile(escaped);
    } else {
      UPD_FAIL() << where << ": Split pattern " << pat.dump() << " is neither {\"Regex\": ...} nor {\"String\": ...}";
    }
  } else {
    UPD_FAIL() << where << ": pre_tokenizer type \"" << type << "\" is not supported";
  }
  pre.push_back(std::move(step));
}

void Tokenizer::Impl::parse_post_processor(const Json& p) {
  if (p.is_null())
    return;
  const std::string type = type_of(p, where, "post_processor");
  if (type == "ByteLevel")
    return;
  if (type == "Sequence") {
    const Json& list = field(p, "processors");
    UPD_REQUIRE(list.is_array()) << where << ": Sequence post_processor without a \"processors\" list";
    for (const Json& e : list)
      parse_post_processor(e);
    return;
  }
  std::vector<int32_t> pre_ids, post_ids;
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const Json& v = field(p, key);
      UPD_REQUIRE(v.is_array() && v.size() == 2) << where << ": " << type << " needs \"" << key << "\": [token, id]";
      (std::string(key) == "cls" ? pre_ids : post_ids).push_back(read_id(v[1], where, type + "." + key));
    }
  } else if (type == "TemplateProcessing") {
    const Json& single = field(p, "single");
    const Json& specials = field(p, "special_tokens");
    UPD_REQUIRE(single.is_array()) << where << ": TemplateProcessing without a \"single\" template";
    bool seen_a = false;
    for (const Json& item : single) {
      if (field(item, "Sequence").is_object()) {
        const Json& id = field(item["Sequence"], "id");
        UPD_REQUIRE(id == "A" && !seen_a)
            << where << ": TemplateProcessing single template " << single.dump() << " must hold the sequence A once";
        seen_a = true;
      } else {
        const Json& name = field(field(item, "SpecialToken"), "id");
        UPD_REQUIRE(name.is_string()) << where << ": bad TemplateProcessing item " << item.dump();
        const Json& ids = field(field(specials, name.get<std::string>().c_str()), "ids");
        UPD_REQUIRE(ids.is_array()) << where << ": TemplateProcessing special token " << name.dump()
                                    << " is not in \"special_tokens\"";
        for (const Json& id : ids)
          (seen_a ? post_ids : pre_ids).push_back(read_id(id, where, "special token " + name.dump()));
      }
    }
    UPD_REQUIRE(seen_a) << where << ": TemplateProcessing single template has no sequence A";
  } else {
    UPD_FAIL() << where << ": post_processor type \"" << type << "\" is not supported";
  }
  // A later processor wraps what the earlier ones produced.
  prefix_ids.insert(prefix_ids.begin(), pre_ids.begin(), pre_ids.end());
  suffix_ids.insert(suffix_ids.end(), post_ids.begin(), post_ids.end());
}

void Tokenizer::Impl::parse(const Json& j) {
  UPD_REQUIRE(j.is_object()) << where << ": not a JSON object";
  parse_model(field(j, "model"));

  normalizer = field(j, "normalizer");
  if (!normalizer.is_null()) {
    const std::string type = type_of(normalizer, where, "normalizer");
    bool ok = type == "NFC";
    if (type == "Sequence" && field(normalizer, "normalizers").is_array()) {
      ok = true;
      for (const Json& n : normalizer["normalizers"])
        ok = ok && field(n, "type") == "NFC";
    }
    UPD_REQUIRE(ok) << where << ": normalizer " << normalizer.dump() << " is not supported (only null or NFC)";
  }

  pre_tokenizer = field(j, "pre_tokenizer");
  UPD_REQUIRE(!pre_tokenizer.is_null()) << where << ": no pre_tokenizer (byte-level BPE needs ByteLevel)";
  parse_pre_tokenizer(pre_tokenizer);
  UPD_REQUIRE(!pre.empty() && pre.back().byte_level)
      << where << ": pre_tokenizer " << pre_tokenizer.dump() << " does not end in ByteLevel";

  decoder = field(j, "decoder");
  UPD_REQUIRE(decoder.is_object() && field(decoder, "type") == "ByteLevel")
      << where << ": decoder " << decoder.dump() << " is not supported (only ByteLevel)";

  post_processor = field(j, "post_processor");
  parse_post_processor(post_processor);
  truncation = field(j, "truncation");
  padding = field(j, "padding");

  const Json& at = field(j, "added_tokens");
  UPD_REQUIRE(at.is_null() || at.is_array()) << where << ": added_tokens must be a list";
  added.reserve(at.size());
  for (const Json& e : at) {
    UPD_REQUIRE(e.is_object() && field(e, "content").is_string() && !e["content"].get<std::string>().empty())
        << where << ": added token " << e.dump() << " has no content";
    AddedToken t;
    t.content = e["content"].get<std::string>();
    t.id = read_id(field(e, "id"), where, "added token \"" + t.content + "\"");
    t.special = opt_bool(e, "special", false, where);
    t.single_word = opt_bool(e, "single_word", false, where);
    t.lstrip = opt_bool(e, "lstrip", false, where);
    t.rstrip = opt_bool(e, "rstrip", false, where);
    t.normalized = opt_bool(e, "normalized", !t.special, where);
    added.push_back(std::move(t));
  }
  finish_tables();
}

void Tokenizer::Impl::finish_tables() {
  for (const AddedToken& t : added) {
    added_ids[t.content] = t.id;
    (t.normalized ? normalized_matcher : raw_matcher).add(&t);
  }
  int64_t size = 0;
  for (const auto& [tok, id] : entries)
    size = std::max<int64_t>(size, id + 1);
  for (const AddedToken& t : added)
    size = std::max<int64_t>(size, t.id + 1);
  spelling.assign(size, std::string());
  flags.assign(size, 0);
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {  // the first token of an id wins
    spelling[it->second] = it->first;
    flags[it->second] = 1;
  }
  for (const AddedToken& t : added) {
    spelling[t.id] = t.content;
    flags[t.id] = static_cast<uint8_t>(1 | (t.special ? 2 : 0));
  }
  id_bytes.assign(size, std::string());
  for (int64_t i = 0; i < size; ++i)
    if (flags[i] && !byte_level_decode(spelling[i], id_bytes[i]))
      id_bytes[i] = spelling[i];  // not byte-level spelled: the ByteLevel decoder keeps it as is

  const ByteTable& bt = byte_table();
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(bt.spelling[b]);
    byte_id[b] = it == vocab.end() ? -1 : it->second;
  }
  if (ignore_merges) {
    std::string bytes;
    for (const auto& [tok, id] : entries)
      if (byte_level_decode(tok, bytes))
        bytes_vocab.emplace(bytes, id);
  }
  for (int32_t id : prefix_ids)
    UPD_REQUIRE(id < size && flags[id]) << where << ": post_processor adds id " << id << ", which has no token";
  for (int32_t id : suffix_ids)
    UPD_REQUIRE(id < size && flags[id]) << where << ": post_processor adds id " << id << ", which has no token";
}

// ---- encoding -----------------------------------------------------------------------------

void Tokenizer::Impl::run_pre(std::string_view piece, size_t step, std::vector<std::vector<std::string_view>>& bufs,
                              const std::function<void(std::string_view)>& fn) const {
  if (step == pre.size()) {
    fn(piece);
    return;
  }
  const PreStep& s = pre[step];
  std::string prefixed;
  if (s.add_prefix_space && piece.front() != ' ') {
    prefixed = " ";
    prefixed += piece;
    piece = prefixed;
  }
  if (!s.regex) {
    run_pre(piece, step + 1, bufs, fn);
    return;
  }
  std::vector<std::string_view>& out = bufs[step];
  out.clear();
  s.regex->split(piece, out);
  for (size_t i = 0; i < out.size(); ++i)  // out stays put: deeper steps use other buffers
    run_pre(out[i], step + 1, bufs, fn);
}

void Tokenizer::Impl::merge_linear(std::vector<int32_t>& syms) const {
  if (syms.size() < 2)
    return;
  std::vector<int32_t> rank(syms.size() - 1), merged(syms.size() - 1);
  const auto look = [&](size_t i) {
    if (!merge_table.get(syms[i], syms[i + 1], &rank[i], &merged[i]))
      rank[i] = INT32_MAX;
  };
  for (size_t i = 0; i + 1 < syms.size(); ++i)
    look(i);
  for (;;) {
    size_t best = rank.size();
    int32_t best_rank = INT32_MAX;
    for (size_t i = 0; i < rank.size(); ++i)
      if (rank[i] < best_rank) {
        best_rank = rank[i];
        best = i;
      }
    if (best == rank.size())
      return;
    syms[best] = merged[best];
    syms.erase(syms.begin() + static_cast<ptrdiff_t>(best) + 1);
    rank.erase(rank.begin() + static_cast<ptrdiff_t>(best));
    merged.erase(merged.begin() + static_cast<ptrdiff_t>(best));
    if (best > 0)
      look(best - 1);
    if (best < rank.size())
      look(best);
  }
}

void Tokenizer::Impl::merge_heap(std::vector<int32_t>& syms) const {
  // The lowest rank first, then the leftmost position: the order `tokenizers` merges in.
  struct Cand {
    int32_t rank, pos, merged;
    bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const auto n = static_cast<int32_t>(syms.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  std::priority_queue<Cand> heap;
  const auto push = [&](int32_t pos) {
    int32_t rank = 0, merged = 0;
    if (next[pos] < n && merge_table.get(syms[pos], syms[next[pos]], &rank, &merged))
      heap.push({rank, pos, merged});
  };
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1;
  }
  for (int32_t i = 0; i + 1 < n; ++i)
    push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int32_t right = next[c.pos];
    int32_t rank = 0, merged = 0;
    if (!alive[c.pos] || right >= n || !merge_table.get(syms[c.pos], syms[right], &rank, &merged) || merged != c.merged)
      continue;  // stale: one of the two symbols has changed since
    syms[c.pos] = merged;
    alive[right] = false;
    next[c.pos] = next[right];
    if (next[right] < n)
      prev[next[right]] = c.pos;
    if (prev[c.pos] >= 0)
      push(prev[c.pos]);
    push(c.pos);
  }
  size_t w = 0;
  for (int32_t i = 0; i < n; i = next[i])
    syms[w++] = syms[i];
  syms.resize(w);
}

void Tokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    auto it = bytes_vocab.find(word);
    if (it != bytes_vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> syms;
  syms.reserve(word.size());
  bool last_unk = false;
  for (unsigned char c : word) {
    if (byte_id[c] >= 0) {
      syms.push_back(byte_id[c]);
      last_unk = false;
    } else if (unk_id >= 0 && !(fuse_unk && last_unk)) {  // without an unk token the byte is dropped
      syms.push_back(unk_id);
      last_unk = true;
    }
  }
  if (syms.size() > kHeapMergeThreshold)
    merge_heap(syms);
  else
    merge_linear(syms);
  out.insert(out.end(), syms.begin(), syms.end());
}

void Tokenizer::Impl::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  const bool cacheable = word.size() <= kMaxCachedWord;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = cache.find(word);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out.size();
  bpe(word, out);
  if (cacheable) {
    std::vector<int32_t> ids(out.begin() + static_cast<ptrdiff_t>(before), out.end());
    std::lock_guard<std::mutex> lock(cache_mu);
    if (cache.size() >= kCacheCapacity)
      cache.clear();
    cache.emplace(std::string(word), std::move(ids));
  }
}

// ---- the public class ---------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& where) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::exception& e) {
    UPD_FAIL() << where << ": not valid JSON: " << e.what();
  }
  auto impl = std::make_unique<Impl>();
  impl->where = where;
  try {
    impl->parse(j);
  } catch (const Json::exception& e) {  // a value of an unexpected type deep inside
    UPD_FAIL() << where << ": malformed tokenizer: " << e.what();
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::error_code ec;
  const std::string file = std::filesystem::is_directory(path, ec) ? path + "/tokenizer.json" : path;
  return from_json(read_file(file), file);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special)
    out = m.prefix_ids;
  std::vector<std::vector<std::string_view>> bufs(m.pre.size());
  const std::function<void(std::string_view)> word_fn = [&](std::string_view w) { m.encode_word(w, out); };
  m.for_each_segment(text, [&](std::string_view piece, const AddedToken* t) {
    if (t != nullptr)
      out.push_back(t->id);
    else
      m.run_pre(piece, 0, bufs, word_fn);
  });
  if (add_special)
    out.insert(out.end(), m.suffix_ids.begin(), m.suffix_ids.end());
  return out;
}

std::string Tokenizer::decode_bytes(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= m.flags.size() || !(m.flags[id] & 1))
      continue;
    if (skip_special && (m.flags[id] & 2))
      continue;
    bytes += m.id_bytes[id];
  }
  return bytes;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  return utf8_lossy(decode_bytes(ids, skip_special));
}

void Tokenizer::pre_tokenize(std::string_view text, const std::function<void(std::string_view)>& fn) const {
  const Impl& m = *impl_;
  std::vector<std::vector<std::string_view>> bufs(m.pre.size());
  m.for_each_segment(text, [&](std::string_view piece, const AddedToken* t) {
    if (t == nullptr)
      m.run_pre(piece, 0, bufs, fn);
  });
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> words;
  pre_tokenize(text, [&](std::string_view w) { words.emplace_back(w); });
  return words;
}

int32_t Tokenizer::token_id(std::string_view token) const {
  if (auto it = impl_->added_ids.find(token); it != impl_->added_ids.end())
    return it->second;
  auto it = impl_->vocab.find(token);
  return it == impl_->vocab.end() ? -1 : it->second;
}

std::string Tokenizer::token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->spelling.size())
    return std::string();
  return impl_->spelling[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->flags.size() && (impl_->flags[id] & 2);
}

int64_t Tokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->spelling.size());
}

// ---- saving -------------------------------------------------------------------------------

std::string Tokenizer::to_json() const {
  const Impl& m = *impl_;
  const auto q = [](const std::string& s) { return Json(s).dump(); };
  std::string o = "{\n  \"version\": \"1.0\",\n";
  o += "  \"truncation\": " + m.truncation.dump() + ",\n";
  o += "  \"padding\": " + m.padding.dump() + ",\n";
  o += "  \"added_tokens\": [";
  for (size_t i = 0; i < m.added.size(); ++i) {
    const AddedToken& t = m.added[i];
    const auto b = [](bool v) { return v ? "true" : "false"; };
    o += i == 0 ? "\n" : ",\n";
    o += "    {\"id\": " + std::to_string(t.id) + ", \"content\": " + q(t.content) +
         ", \"single_word\": " + b(t.single_word) + ", \"lstrip\": " + b(t.lstrip) + ", \"rstrip\": " + b(t.rstrip) +
         ", \"normalized\": " + b(t.normalized) + ", \"special\": " + b(t.special) + "}";
  }
  o += m.added.empty() ? "],\n" : "\n  ],\n";
  o += "  \"normalizer\": " + m.normalizer.dump() + ",\n";
  o += "  \"pre_tokenizer\": " + m.pre_tokenizer.dump() + ",\n";
  o += "  \"post_processor\": " + m.post_processor.dump() + ",\n";
  o += "  \"decoder\": " + m.decoder.dump() + ",\n";
  o += "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n";
  o += "    \"unk_token\": " + (m.unk_token.empty() ? std::string("null") : q(m.unk_token)) + ",\n";
  o += "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n";
  o += std::string("    \"fuse_unk\": ") + (m.fuse_unk ? "true" : "false") + ",\n";
  o += "    \"byte_fallback\": false,\n";
  o += std::string("    \"ignore_merges\": ") + (m.ignore_merges ? "true" : "false") + ",\n";
  o += "    \"vocab\": {";
  for (size_t i = 0; i < m.entries.size(); ++i)
    o += (i == 0 ? "\n      " : ",\n      ") + q(m.entries[i].first) + ": " + std::to_string(m.entries[i].second);
  o += m.entries.empty() ? "},\n" : "\n    },\n";
  // "a b" strings read everywhere (also in `tokenizers` < 0.20); pairs only when a token has a space.
  bool pairs = false;
  for (const auto& [a, b] : m.merges)
    pairs = pairs || a.find(' ') != std::string::npos || b.find(' ') != std::string::npos;
  o += "    \"merges\": [";
  for (size_t i = 0; i < m.merges.size(); ++i) {
    const auto& [a, b] = m.merges[i];
    o += (i == 0 ? "\n      " : ",\n      ") + (pairs ? "[" + q(a) + ", " + q(b) + "]" : q(a + " " + b));
  }
  o += m.merges.empty() ? "]\n" : "\n    ]\n";
  o += "  }\n}\n";
  return o;
}

void Tokenizer::save(const std::string& path) const {
  write_file_atomic(path, to_json());
}

}  // namespace updraft
