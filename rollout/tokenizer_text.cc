// Text: UTF-8 (utf8_lossy and the helpers the tokenizer shares), the byte <-> character table of
// byte-level BPE, SplitRegex (PCRE2, rewritten to classify characters as Oniguruma does) and the
// byte-level spelling (byte_level_encode / byte_level_decode).
#include "rollout/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/core/error.h"
#include "rollout/tokenizer_detail.h"

namespace updraft {

using tokenizer_detail::byte_table;
using tokenizer_detail::ByteTable;
using tokenizer_detail::utf8_decode;
using tokenizer_detail::utf8_seq;

namespace {

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

}  // namespace

namespace tokenizer_detail {

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

}  // namespace tokenizer_detail

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

// ---- the byte <-> character table of byte-level BPE ---------------------------------------

namespace tokenizer_detail {

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

}  // namespace tokenizer_detail

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

}  // namespace updraft
