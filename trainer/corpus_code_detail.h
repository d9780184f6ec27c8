// Internal to the code corpus's .cc files (corpus_code*.cc); not part of the public API (see
// corpus.h) nor of corpus_detail.h's. It declares what they share: the placeholder table Vars,
// the generated function Fn, the name pools, the comparisons and the per-sample context Ctx, and
// the template families that corpus_code.cc registers.
//
// Contract of a family (void f(Ctx& c)): it sets c.f.name, c.f.params, c.f.desc and c.f.body
// (through Ctx::name and Ctx::sig), using the placeholders that make_code set in c.v ({L}, {n},
// {s}, {c}, {t}, {x}, {ch}, {i}, {acc}, {cnt}, {best}, {out}, {prod}) and any it sets
// itself. Its draws from c.rng, their number and order, are part of the corpus's definition:
// changing them changes every later sample's text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/core/error.h"
#include "trainer/corpus_detail.h"

namespace updraft::corpus::detail::code {

// Placeholder -> text. Filled templates must name only keys that are set.
class Vars {
 public:
  void set(std::string_view key, std::string value) {
    for (auto& kv : kv_)
      if (kv.first == key) {
        kv.second = std::move(value);
        return;
      }
    kv_.emplace_back(std::string(key), std::move(value));
  }
  const std::string& get(std::string_view key) const {
    for (const auto& kv : kv_)
      if (kv.first == key)
        return kv.second;
    UPD_CHECK(false) << "corpus template names unknown placeholder {" << key << "}";
    return kv_.front().second;  // not reached
  }
  std::string fill(std::string_view tmpl) const {
    std::string out;
    out.reserve(tmpl.size() + 32);
    for (size_t i = 0; i < tmpl.size(); ++i) {
      if (tmpl[i] != '{') {
        out += tmpl[i];
        continue;
      }
      const size_t end = tmpl.find('}', i);
      UPD_CHECK(end != std::string_view::npos) << "unclosed placeholder in " << tmpl;
      out += get(tmpl.substr(i + 1, end - i - 1));
      i = end;
    }
    return out;
  }

 private:
  std::vector<std::pair<std::string, std::string>> kv_;
};

// A generated function: set by a family through its Vars.
struct Fn {
  std::string name, params, desc, body;  // body: unindented lines, each ending in '\n'
};

// Name pools: every pool is disjoint from every other, so names never collide in a function.
inline constexpr const char* kLists[] = {"xs",   "nums",    "values", "items", "arr",
                                         "data", "numbers", "lst",    "seq",   "vals"};
inline constexpr const char* kListPairs[][2] = {{"xs", "ys"}, {"left", "right"}, {"first", "second"}, {"p", "q"},
                                                {"u", "w"},   {"a", "b"},        {"v1", "v2"}};
inline constexpr const char* kInts[] = {"n", "k", "m", "num", "val", "number", "z", "t"};
inline constexpr const char* kStrs[] = {"s", "text", "word", "line", "phrase", "msg", "sentence", "name"};
inline constexpr const char* kChars[] = {"c", "letter", "symbol", "char", "mark"};
inline constexpr const char* kTargets[] = {"target", "key", "needle", "wanted", "goal", "query"};
inline constexpr const char* kElems[] = {"x", "v", "el", "elem", "item"};
inline constexpr const char* kCharVars[] = {"ch", "cc", "cur"};
inline constexpr const char* kIndexVars[] = {"i", "j", "idx", "pos"};
inline constexpr const char* kAccs[] = {"total", "acc", "running", "tally"};
inline constexpr const char* kCounts[] = {"count", "cnt", "hits", "matches"};
inline constexpr const char* kBests[] = {"best", "top", "champ", "record"};
inline constexpr const char* kOuts[] = {"out", "res", "kept", "picked", "collected"};
inline constexpr const char* kProds[] = {"prod", "product", "result"};

struct Cmp {
  const char *op, *neg, *words, *tag;  // "x {op} K" means "x is {words} K"; neg is its negation
};
inline constexpr Cmp kCmps[] = {{">", "<=", "greater than", "above"},
                                {"<", ">=", "less than", "below"},
                                {">=", "<", "at least", "at_least"},
                                {"<=", ">", "at most", "at_most"},
                                {"==", "!=", "equal to", "equal_to"}};

struct Ctx {
  Rng& rng;
  Vars v;
  Fn f;
  template <size_t N>
  void name(const char* const (&names)[N]) {
    f.name = v.fill(rng.pick(names));
  }
  void sig(std::string_view params, std::string_view desc, std::string_view body) {
    f.params = v.fill(params);
    f.desc = v.fill(desc);
    f.body = v.fill(body);
  }
  void constant(std::string_view key, int lo, int hi) { v.set(key, std::to_string(rng.range(lo, hi))); }
  const Cmp& cmp() {
    const Cmp& c = rng.pick(kCmps);
    v.set("op", c.op);
    v.set("neg", c.neg);
    v.set("opw", c.words);
    v.set("tag", c.tag);
    return c;
  }
};

// Families over lists (corpus_code_lists.cc).
void extreme(Ctx& c);
void sum_list(Ctx& c);
void product_list(Ctx& c);
void count_cmp(Ctx& c);
void filter_cmp(Ctx& c);
void any_cmp(Ctx& c);
void all_cmp(Ctx& c);
void map_arith(Ctx& c);
void count_parity(Ctx& c);
void filter_parity(Ctx& c);
void sum_parity(Ctx& c);
void mean(Ctx& c);
void contains(Ctx& c);
void index_of(Ctx& c);
void reverse_list(Ctx& c);
void map_power(Ctx& c);
void count_multiples(Ctx& c);
void end_element(Ctx& c);
void running_sum(Ctx& c);
void dedupe(Ctx& c);
void differences(Ctx& c);
void dot(Ctx& c);
void combine_lists(Ctx& c);
void arg_extreme(Ctx& c);
void is_sorted(Ctx& c);
void count_between(Ctx& c);
void spread(Ctx& c);

// Families over integers (corpus_code_numbers.cc).
void factorial(Ctx& c);
void fibonacci(Ctx& c);
void sum_to(Ctx& c);
void power(Ctx& c);
void is_prime(Ctx& c);
void gcd(Ctx& c);
void abs_value(Ctx& c);
void clamp(Ctx& c);
void sign(Ctx& c);
void pick_two(Ctx& c);
void label_divisible(Ctx& c);
void digit_stat(Ctx& c);
void multiples_list(Ctx& c);
void collatz(Ctx& c);
void linear(Ctx& c);
void grade(Ctx& c);

// Families over strings (corpus_code_strings.cc).
void count_char(Ctx& c);
void count_vowels(Ctx& c);
void reverse_string(Ctx& c);
void is_palindrome(Ctx& c);
void count_words(Ctx& c);
void string_method(Ctx& c);
void repeat_string(Ctx& c);

}  // namespace updraft::corpus::detail::code
