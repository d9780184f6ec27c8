// Verifiable rewards (contract in corpus.h, rules in docs/corpus.md). Everything here must hold
// for arbitrary bytes: no exceptions, no recursion, time linear in the input (code responses
// over kMaxCodeBytes score 0 before any work).
#include <cstddef>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trainer/corpus.h"

namespace updraft::corpus {
namespace {

constexpr size_t kMaxCodeBytes = 64 * 1024;

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_ident_char(char c) {
  return is_ident_start(c) || is_digit(c);
}
bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\f';
}

double arith_reward(const Sample& s, std::string_view r, double credit) {
  constexpr std::string_view kLead = "The answer is ";
  const size_t at = r.find(kLead);
  if (at == std::string_view::npos)
    return 0.0;
  const size_t start = at + kLead.size();
  size_t i = start;
  if (i < r.size() && r[i] == '-')
    ++i;
  const size_t first_digit = i;
  while (i < r.size() && is_digit(r[i]) && i - first_digit <= 18)
    ++i;
  const size_t digits = i - first_digit;
  if (digits == 0 || digits > 18 || i >= r.size() || r[i] != '.')
    return 0.0;
  return r.substr(start, i - start) == s.answer ? 1.0 : credit;
}

// Python tokens as views into the source, plus the structural markers below (which contain
// whitespace, so no source token can equal them).
constexpr std::string_view kNewline = "\n";
constexpr std::string_view kIndent = "\t>";
constexpr std::string_view kDedent = "\t<";

// Tokenises a Python subset: comments and blank lines dropped, lines joined inside brackets,
// indentation turned into INDENT/DEDENT (tabs to multiples of 8, as Python does). False on an
// unclosed string, unbalanced brackets or a dedent to a width never opened.
bool tokenize(std::string_view src, std::vector<std::string_view>& out) {
  static constexpr std::string_view kOps3[] = {"**=", "//=", ">>=", "<<=", "..."};
  static constexpr std::string_view kOps2[] = {
      "==", "!=", "<=", ">=", "//", "**", "+=", "-=", "*=", "/=", "%=", "->", "<<", ">>", "&=", "|=", "^=", ":="};
  std::vector<size_t> indents{0};
  int depth = 0;
  size_t pos = 0;
  while (pos <= src.size()) {
    size_t eol = src.find('\n', pos);
    if (eol == std::string_view::npos)
      eol = src.size();
    const std::string_view line = src.substr(pos, eol - pos);
    pos = eol + 1;
    size_t i = 0, width = 0;
    for (; i < line.size() && is_blank(line[i]); ++i)
      width = line[i] == '\t' ? (width / 8 + 1) * 8 : width + 1;
    if (i == line.size() || line[i] == '#')
      continue;
    if (depth == 0) {
      if (width > indents.back()) {
        indents.push_back(width);
        out.push_back(kIndent);
      }
      while (width < indents.back()) {
        indents.pop_back();
        out.push_back(kDedent);
      }
      if (width != indents.back())
        return false;
    }
    while (i < line.size()) {
      const char c = line[i];
      size_t n = 1;
      if (is_blank(c)) {
        ++i;
        continue;
      }
      if (c == '#')
        break;
      if (is_ident_start(c) || is_digit(c)) {
        while (i + n < line.size() && (is_ident_char(line[i + n]) || (is_digit(c) && line[i + n] == '.')))
          ++n;
      } else if (c == '\'' || c == '"') {
        while (i + n < line.size() && line[i + n] != c)
          n += line[i + n] == '\\' ? 2 : 1;
        if (i + n >= line.size())
          return false;
        ++n;
      } else {
        const std::string_view rest = line.substr(i);
        for (std::string_view op : kOps3)
          if (n == 1 && rest.substr(0, 3) == op)
            n = 3;
        for (std::string_view op : kOps2)
          if (n == 1 && rest.substr(0, 2) == op)
            n = 2;
        if (c == '(' || c == '[' || c == '{')
          ++depth;
        if ((c == ')' || c == ']' || c == '}') && --depth < 0)
          return false;
      }
      out.push_back(line.substr(i, n));
      i += n;
    }
    if (depth == 0)
      out.push_back(kNewline);
  }
  if (depth != 0)
    return false;
  for (; indents.size() > 1; indents.pop_back())
    out.push_back(kDedent);
  return true;
}

// Index of the NEWLINE ending the def line when the tokens are exactly one top-level function
// ("def" ... NEWLINE INDENT ... DEDENT and nothing after), else 0.
size_t single_function(const std::vector<std::string_view>& t) {
  if (t.size() < 4 || t[0] != "def")
    return 0;
  size_t k = 1;
  while (k < t.size() && t[k] != kNewline)
    ++k;
  if (k + 1 >= t.size() || t[k + 1] != kIndent)
    return 0;
  int level = 0;
  for (size_t j = k + 1; j < t.size(); ++j) {
    level += t[j] == kIndent ? 1 : t[j] == kDedent ? -1 : 0;
    if (level == 0)
      return j + 1 == t.size() ? k : 0;
  }
  return 0;
}

bool kept_name(std::string_view id) {
  static constexpr std::string_view kKept[] = {
      "False",     "None",   "True",     "and",   "as",         "assert",   "async",   "await", "break", "class",
      "continue",  "def",    "del",      "elif",  "else",       "except",   "finally", "for",   "from",  "global",
      "if",        "import", "in",       "is",    "lambda",     "nonlocal", "not",     "or",    "pass",  "raise",
      "return",    "try",    "while",    "with",  "yield",      "abs",      "all",     "any",   "bool",  "dict",
      "enumerate", "filter", "float",    "int",   "isinstance", "len",      "list",    "map",   "max",   "min",
      "print",     "range",  "reversed", "round", "set",        "sorted",   "str",     "sum",   "tuple", "zip"};
  for (std::string_view k : kKept)
    if (id == k)
      return true;
  return false;
}

// Equal token streams once local names are numbered by first use on each side. Names kept:
// keywords and builtins, the names of the def line (function and parameters), attributes.
bool same_up_to_locals(const std::vector<std::string_view>& want, const std::vector<std::string_view>& got,
                       size_t def_end) {
  if (want.size() != got.size())
    return false;
  std::vector<std::string_view> interface(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(def_end));
  auto is_local = [&](const std::vector<std::string_view>& t, size_t j) {
    if (j < def_end || !is_ident_start(t[j][0]) || kept_name(t[j]) || (j > 0 && t[j - 1] == "."))
      return false;
    for (std::string_view k : interface)
      if (k == t[j])
        return false;
    return true;
  };
  std::unordered_map<std::string_view, size_t> want_ids, got_ids;
  for (size_t j = 0; j < want.size(); ++j) {
    const bool local = is_local(want, j);
    if (local != is_local(got, j))
      return false;
    if (!local) {
      if (want[j] != got[j])
        return false;
      continue;
    }
    const size_t a = want_ids.emplace(want[j], want_ids.size()).first->second;
    const size_t b = got_ids.emplace(got[j], got_ids.size()).first->second;
    if (a != b)
      return false;
  }
  return true;
}

double code_reward(const Sample& s, std::string_view r, double credit) {
  if (r.size() > kMaxCodeBytes || s.answer.size() > kMaxCodeBytes)
    return 0.0;
  std::vector<std::string_view> want, got;
  if (!tokenize(s.answer, want) || !tokenize(r, got))
    return 0.0;
  const size_t def_end = single_function(want);
  if (def_end == 0 || single_function(got) == 0)
    return 0.0;
  if (same_up_to_locals(want, got, def_end))
    return 1.0;
  if (got.size() <= def_end)
    return 0.0;
  for (size_t j = 0; j <= def_end; ++j)
    if (want[j] != got[j])
      return 0.0;
  return credit;
}

}  // namespace

double reward(const Sample& s, std::string_view generated_response, double format_credit) {
  return s.domain == Domain::kArith ? arith_reward(s, generated_response, format_credit)
                                    : code_reward(s, generated_response, format_credit);
}

}  // namespace updraft::corpus
