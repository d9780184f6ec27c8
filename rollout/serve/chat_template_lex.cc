// Chat templates: the lexer, with jinja2's whitespace rules under trim_blocks and lstrip_blocks
// (chat_template.h).
#include <algorithm>
#include <cctype>
#include <string_view>

#include "rollout/serve/chat_template_internal.h"

namespace updraft::chat::detail {

size_t skip_py_space(const std::string& s, size_t pos) {
  while (pos < s.size()) {
    const auto b = static_cast<unsigned char>(s[pos]);
    const size_t n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
    const std::u32string c = utf8_decode(s.substr(pos, n));
    if (c.empty() || !py_isspace(c[0]))
      break;
    pos += n;
  }
  return pos;
}

namespace {

class Lexer {
 public:
  explicit Lexer(const std::string& source);
  std::vector<Token> run();

 private:
  int line_at(size_t pos) const {
    return 1 + static_cast<int>(std::upper_bound(newlines_.begin(), newlines_.end(), pos) - newlines_.begin());
  }
  void emit(Token::Type t, std::string text, size_t at) { out_.push_back({t, std::move(text), line_at(at)}); }
  void text_before(size_t start, char kind, char sign);
  void comment(size_t begin);
  void tag(char kind, size_t begin);
  bool tag_end(char kind);
  void token();
  void string_token();
  size_t ident_at(size_t pos, bool continuing) const;
  void number_token();

  std::string src_;
  std::vector<size_t> newlines_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

Lexer::Lexer(const std::string& source) {
  // jinja2 reads "\r\n" and "\r" as "\n" and (keep_trailing_newline=False) drops one final "\n".
  src_.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r' && i + 1 < source.size() && source[i + 1] == '\n')
      continue;
    src_ += source[i] == '\r' ? '\n' : source[i];
  }
  if (!src_.empty() && src_.back() == '\n')
    src_.pop_back();
  for (size_t i = 0; i < src_.size(); ++i)
    if (src_[i] == '\n')
      newlines_.push_back(i);
}

std::vector<Token> Lexer::run() {
  while (pos_ < src_.size()) {
    size_t start = pos_;
    while ((start = src_.find('{', start)) != std::string::npos && start + 1 < src_.size() &&
           std::string_view("{%#").find(src_[start + 1]) == std::string_view::npos)
      ++start;
    if (start == std::string::npos || start + 1 >= src_.size()) {
      emit(Token::kText, src_.substr(pos_), pos_);
      break;
    }
    const char kind = src_[start + 1];
    const char sign =
        start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+') ? src_[start + 2] : 0;
    text_before(start, kind, sign);
    pos_ = start + (sign != 0 ? 3 : 2);
    if (kind == '#')
      comment(start);
    else
      tag(kind, start);
    line_starting_ = src_[pos_ - 1] == '\n';
  }
  emit(Token::kEof, "", src_.size());
  return std::move(out_);
}

// The text before a tag: "{%-" strips all whitespace before it; lstrip_blocks strips the spaces
// and tabs between a line start and "{%" or "{#" unless the tag opens with "+".
void Lexer::text_before(size_t start, char kind, char sign) {
  std::string text = src_.substr(pos_, start - pos_);
  if (sign == '-') {
    text = py_strip(text, nullptr, false, true);
  } else if (sign != '+' && kind != '{') {
    const size_t nl = text.rfind('\n');
    const size_t l = nl == std::string::npos ? 0 : nl + 1;
    if ((l > 0 || line_starting_) && skip_py_space(text, l) == text.size())
      text.resize(l);
  }
  if (!text.empty())
    emit(Token::kText, std::move(text), pos_);
}

void Lexer::comment(size_t begin) {
  const size_t end = src_.find("#}", pos_);
  if (end == std::string::npos && pos_ == src_.size())
    return;  // jinja2 lets "{#" end the template
  if (end == std::string::npos)
    fail(line_at(begin), "missing end of comment tag '#}'");
  const char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
  pos_ = end + 2;
  if (sign == '-')
    pos_ = skip_py_space(src_, pos_);
  else if (sign != '+' && pos_ < src_.size() && src_[pos_] == '\n')
    ++pos_;  // trim_blocks
}

void Lexer::tag(char kind, size_t begin) {
  emit(kind == '%' ? Token::kBlockBegin : Token::kVarBegin, "", begin);
  const size_t first = out_.size();
  depth_ = 0;
  while (true) {
    pos_ = skip_py_space(src_, pos_);
    if (pos_ >= src_.size())
      fail(line_at(begin), kind == '%' ? "unclosed tag: missing '%}'" : "unclosed expression: missing '}}'");
    if (depth_ == 0 && tag_end(kind))
      break;
    token();
  }
  if (kind == '%' && out_.size() > first && out_[first].type == Token::kName && out_[first].text == "raw")
    fail(line_at(begin), "'{% raw %}' blocks are not supported");
}

// "%}" (trim_blocks drops one newline after it), "-%}" (drops all whitespace), "+%}" (neither);
// "}}" and "-}}". Only checked where brackets balance, as jinja2 does.
bool Lexer::tag_end(char kind) {
  size_t p = pos_;
  const char sign = src_[p] == '-' || (kind == '%' && src_[p] == '+') ? src_[p] : 0;
  p += sign != 0 ? 1 : 0;
  if (src_.compare(p, 2, kind == '%' ? "%}" : "}}") != 0)
    return false;
  emit(kind == '%' ? Token::kBlockEnd : Token::kVarEnd, "", pos_);
  pos_ = p + 2;
  if (sign == '-')
    pos_ = skip_py_space(src_, pos_);
  else if (kind == '%' && sign != '+' && pos_ < src_.size() && src_[pos_] == '\n')
    ++pos_;
  return true;
}

void Lexer::token() {
  const char c = src_[pos_];
  if (c == '\'' || c == '"')
    return string_token();
  if (c >= '0' && c <= '9')
    return number_token();
  if (ident_at(pos_, false) > 0) {
    size_t e = pos_;
    for (size_t n; (n = ident_at(e, true)) > 0;)
      e += n;
    emit(Token::kName, src_.substr(pos_, e - pos_), pos_);
    pos_ = e;
    return;
  }
  static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
  for (const char* op : kTwo) {
    if (src_.compare(pos_, 2, op) == 0) {
      emit(Token::kOp, op, pos_);
      pos_ += 2;
      return;
    }
  }
  if (std::string_view("+-*/%~()[]{}<>=.:|,").find(c) == std::string_view::npos)
    fail(line_at(pos_), std::string("unexpected character '") + c + "'");
  depth_ += (c == '(' || c == '[' || c == '{') ? 1 : (c == ')' || c == ']' || c == '}') && depth_ > 0 ? -1 : 0;
  emit(Token::kOp, std::string(1, c), pos_);
  ++pos_;
}

// The length of the identifier character at pos (0 if none). Names are Unicode identifiers in
// jinja2; beyond ASCII this takes letters to be everything but punctuation, symbols and emoji.
size_t Lexer::ident_at(size_t pos, bool continuing) const {
  if (pos >= src_.size())
    return 0;
  const auto b = static_cast<unsigned char>(src_[pos]);
  if (b < 0x80)
    return std::isalpha(b) || b == '_' || (continuing && std::isdigit(b)) ? 1 : 0;
  const size_t n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  const std::u32string u = utf8_decode(src_.substr(pos, n));
  const char32_t c = u.empty() ? 0 : u[0];
  const bool symbol = c < 0xC0 || c == 0xD7 || c == 0xF7 || (c >= 0x2000 && c <= 0x2BFF) ||
                      (c >= 0x3000 && c <= 0x303F) || (c >= 0xE000 && c <= 0xF8FF) || (c >= 0xFE30 && c <= 0xFE4F) ||
                      (c >= 0xFF00 && c <= 0xFF20) || (c >= 0xFF3B && c <= 0xFF40) || (c >= 0xFF5B && c <= 0xFF65) ||
                      c >= 0x1F000;
  return symbol ? 0 : n;
}

// A string literal with Python's escapes (jinja2 decodes them with "unicode-escape").
void Lexer::string_token() {
  const char q = src_[pos_];
  std::string out;
  size_t i = pos_ + 1;
  for (; i < src_.size() && src_[i] != q; ++i) {
    if (src_[i] != '\\' || i + 1 >= src_.size()) {
      out += src_[i];
      continue;
    }
    const char e = src_[++i];
    static const std::string_view kFrom = "\\'\"abfnrtv\n", kTo = "\\'\"\a\b\f\n\r\t\v";
    if (const size_t k = kFrom.find(e); k != std::string_view::npos) {
      if (e != '\n')
        out += kTo[k];
    } else if (e == 'x' || e == 'u' || e == 'U') {
      const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
      const std::string hex = src_.substr(i + 1, n);
      if (hex.size() != n || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
        fail(line_at(i), std::string("truncated \\") + e + " escape in a string literal");
      out += utf8_encode(std::u32string(1, static_cast<char32_t>(std::stoul(hex, nullptr, 16))));
      i += n;
    } else if (e >= '0' && e <= '7') {
      size_t n = 1;
      while (n < 3 && i + n < src_.size() && src_[i + n] >= '0' && src_[i + n] <= '7')
        ++n;
      out += utf8_encode(std::u32string(1, static_cast<char32_t>(std::stoul(src_.substr(i, n), nullptr, 8))));
      i += n - 1;
    } else {
      out += '\\';
      out += e;
    }
  }
  if (i >= src_.size())
    fail(line_at(pos_), "unterminated string literal");
  emit(Token::kString, std::move(out), pos_);
  pos_ = i + 1;
}

void Lexer::number_token() {
  size_t e = pos_;
  auto digits = [&] {
    while (e < src_.size() && src_[e] >= '0' && src_[e] <= '9')
      ++e;
  };
  digits();
  bool is_float = false;
  const bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';  // "a.0.1" is a.0 then .1
  if (!after_dot && e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
    ++e;
    digits();
    is_float = true;
  }
  if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
    size_t x = e + 1 + (e + 1 < src_.size() && (src_[e + 1] == '+' || src_[e + 1] == '-') ? 1 : 0);
    if (x < src_.size() && std::isdigit(static_cast<unsigned char>(src_[x]))) {
      e = x;
      digits();
      is_float = true;
    }
  }
  emit(is_float ? Token::kFloat : Token::kInt, src_.substr(pos_, e - pos_), pos_);
  pos_ = e;
}

}  // namespace

std::vector<Token> lex_template(const std::string& source) {
  return Lexer(source).run();
}

}  // namespace updraft::chat::detail
