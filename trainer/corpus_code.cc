// The code domain: small Python functions from template families. A family fills a template
// whose placeholders ({L}, {x}, {acc}, {K}, ...) are names drawn from disjoint pools, constants
// and operators. Everything the function's interface depends on (its name, its parameters,
// constants) is written in the prompt; local names are free (the reward renames them), so the
// response is determined by the prompt up to that renaming.
//
// The families are in corpus_code_lists.cc, corpus_code_numbers.cc and corpus_code_strings.cc
// (shared internals in corpus_code_detail.h); this file keeps their registry, whose order fixes
// the family of every sample, and the public entry points.
#include <string>

#include "kernels/core/error.h"
#include "trainer/corpus_code_detail.h"
#include "trainer/corpus_detail.h"

namespace updraft::corpus::detail {

using code::Ctx;
using code::kAccs;
using code::kBests;
using code::kChars;
using code::kCharVars;
using code::kCounts;
using code::kElems;
using code::kIndexVars;
using code::kInts;
using code::kLists;
using code::kOuts;
using code::kProds;
using code::kStrs;
using code::kTargets;
using code::Vars;

namespace {

using Family = void (*)(Ctx&);
struct Entry {
  const char* name;
  Family fn;
};
constexpr Entry kFamilies[] = {
    {"extreme", code::extreme},
    {"sum_list", code::sum_list},
    {"product_list", code::product_list},
    {"count_cmp", code::count_cmp},
    {"filter_cmp", code::filter_cmp},
    {"any_cmp", code::any_cmp},
    {"all_cmp", code::all_cmp},
    {"map_arith", code::map_arith},
    {"count_parity", code::count_parity},
    {"filter_parity", code::filter_parity},
    {"sum_parity", code::sum_parity},
    {"mean", code::mean},
    {"contains", code::contains},
    {"index_of", code::index_of},
    {"reverse_list", code::reverse_list},
    {"factorial", code::factorial},
    {"fibonacci", code::fibonacci},
    {"sum_to", code::sum_to},
    {"power", code::power},
    {"is_prime", code::is_prime},
    {"gcd", code::gcd},
    {"abs_value", code::abs_value},
    {"clamp", code::clamp},
    {"sign", code::sign},
    {"pick_two", code::pick_two},
    {"count_char", code::count_char},
    {"count_vowels", code::count_vowels},
    {"reverse_string", code::reverse_string},
    {"is_palindrome", code::is_palindrome},
    {"map_power", code::map_power},
    {"label_divisible", code::label_divisible},
    {"count_multiples", code::count_multiples},
    {"end_element", code::end_element},
    {"running_sum", code::running_sum},
    {"dedupe", code::dedupe},
    {"differences", code::differences},
    {"dot", code::dot},
    {"combine_lists", code::combine_lists},
    {"count_words", code::count_words},
    {"digit_stat", code::digit_stat},
    {"arg_extreme", code::arg_extreme},
    {"is_sorted", code::is_sorted},
    {"multiples_list", code::multiples_list},
    {"count_between", code::count_between},
    {"string_method", code::string_method},
    {"repeat_string", code::repeat_string},
    {"spread", code::spread},
    {"collatz", code::collatz},
    {"linear", code::linear},
    {"grade", code::grade},
};
constexpr int kNumCodeFamilies = static_cast<int>(sizeof(kFamilies) / sizeof(kFamilies[0]));

}  // namespace

int code_family_count() {
  return kNumCodeFamilies;
}

std::string_view code_family_name(int family) {
  UPD_CHECK(family >= 0 && family < kNumCodeFamilies) << "code family " << family;
  return kFamilies[family].name;
}

Sample make_code(Rng& rng) {
  Sample s;
  s.domain = Domain::kCode;
  s.family = static_cast<int>(rng.below(kNumCodeFamilies));
  Ctx c{rng, {}, {}};
  c.v.set("L", rng.pick(kLists));
  c.v.set("n", rng.pick(kInts));
  c.v.set("s", rng.pick(kStrs));
  c.v.set("c", rng.pick(kChars));
  c.v.set("t", rng.pick(kTargets));
  c.v.set("x", rng.pick(kElems));
  c.v.set("ch", rng.pick(kCharVars));
  c.v.set("i", rng.pick(kIndexVars));
  c.v.set("acc", rng.pick(kAccs));
  c.v.set("cnt", rng.pick(kCounts));
  c.v.set("best", rng.pick(kBests));
  c.v.set("out", rng.pick(kOuts));
  c.v.set("prod", rng.pick(kProds));
  kFamilies[s.family].fn(c);

  static constexpr const char* kOpeners[] = {"write {sig} that {desc}", "implement {sig}, which {desc}",
                                             "define {sig} so that it {desc}", "complete {sig}; it {desc}",
                                             "{sig} {desc}"};
  const std::string sig = c.f.name + "(" + c.f.params + ")";
  Vars p;
  p.set("sig", sig);
  p.set("desc", c.f.desc);
  s.prompt = "# Task: " + p.fill(rng.pick(kOpeners)) + "\n";
  s.response = "def " + sig + ":\n";
  size_t begin = 0;
  while (begin < c.f.body.size()) {
    const size_t end = c.f.body.find('\n', begin);
    s.response += "    " + c.f.body.substr(begin, end - begin + 1);
    begin = end + 1;
  }
  s.answer = s.response;
  return s;
}

}  // namespace updraft::corpus::detail
