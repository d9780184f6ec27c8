// The code domain: small Python functions from template families. A family fills a template
// whose placeholders ({L}, {x}, {acc}, {K}, ...) are names drawn from disjoint pools, constants
// and operators. Everything the function's interface depends on (its name, its parameters,
// constants) is written in the prompt; local names are free (the reward renames them), so the
// response is determined by the prompt up to that renaming.
#include <string>
#include <utility>
#include <vector>

#include "kernels/core/error.h"
#include "trainer/corpus_detail.h"

namespace updraft::corpus::detail {
namespace {

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
constexpr const char* kLists[] = {"xs", "nums", "values", "items", "arr", "data", "numbers", "lst", "seq", "vals"};
constexpr const char* kListPairs[][2] = {{"xs", "ys"}, {"left", "right"}, {"first", "second"}, {"p", "q"},
                                         {"u", "w"},   {"a", "b"},        {"v1", "v2"}};
constexpr const char* kInts[] = {"n", "k", "m", "num", "val", "number", "z", "t"};
constexpr const char* kStrs[] = {"s", "text", "word", "line", "phrase", "msg", "sentence", "name"};
constexpr const char* kChars[] = {"c", "letter", "symbol", "char", "mark"};
constexpr const char* kTargets[] = {"target", "key", "needle", "wanted", "goal", "query"};
constexpr const char* kElems[] = {"x", "v", "el", "elem", "item"};
constexpr const char* kCharVars[] = {"ch", "cc", "cur"};
constexpr const char* kIndexVars[] = {"i", "j", "idx", "pos"};
constexpr const char* kAccs[] = {"total", "acc", "running", "tally"};
constexpr const char* kCounts[] = {"count", "cnt", "hits", "matches"};
constexpr const char* kBests[] = {"best", "top", "champ", "record"};
constexpr const char* kOuts[] = {"out", "res", "kept", "picked", "collected"};
constexpr const char* kProds[] = {"prod", "product", "result"};

struct Cmp {
  const char *op, *neg, *words, *tag;  // "x {op} K" means "x is {words} K"; neg is its negation
};
constexpr Cmp kCmps[] = {{">", "<=", "greater than", "above"},
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

void extreme(Ctx& c) {
  const bool mx = c.rng.chance(1, 2);
  c.v.set("gt", mx ? ">" : "<");
  c.v.set("ext", mx ? "largest" : "smallest");
  if (mx)
    c.name({"max_of", "largest", "find_max", "biggest", "max_value", "greatest", "maximum"});
  else
    c.name({"min_of", "smallest", "find_min", "least", "min_value", "lowest", "minimum"});
  c.sig("{L}", "returns the {ext} element of {L}",
        "{best} = {L}[0]\nfor {x} in {L}:\n    if {x} {gt} {best}:\n        {best} = {x}\nreturn {best}\n");
}

void sum_list(Ctx& c) {
  c.name({"sum_of", "list_sum", "add_all", "total_of", "sum_all", "add_up", "summed"});
  c.sig("{L}", "returns the sum of the numbers in {L}", "{acc} = 0\nfor {x} in {L}:\n    {acc} += {x}\nreturn {acc}\n");
}

void product_list(Ctx& c) {
  c.name({"product_of", "list_product", "multiply_all", "prod_all", "times_all", "multiply_list"});
  c.sig("{L}", "returns the product of the numbers in {L}",
        "{prod} = 1\nfor {x} in {L}:\n    {prod} *= {x}\nreturn {prod}\n");
}

void count_cmp(Ctx& c) {
  c.cmp();
  c.constant("K", 0, 20);
  c.name({"count_{tag}", "num_{tag}", "how_many_{tag}"});
  c.sig("{L}", "returns how many elements of {L} are {opw} {K}",
        "{cnt} = 0\nfor {x} in {L}:\n    if {x} {op} {K}:\n        {cnt} += 1\nreturn {cnt}\n");
}

void filter_cmp(Ctx& c) {
  c.cmp();
  c.constant("K", 0, 20);
  c.name({"keep_{tag}", "filter_{tag}", "only_{tag}"});
  c.sig("{L}", "returns a list of the elements of {L} that are {opw} {K}",
        "{out} = []\nfor {x} in {L}:\n    if {x} {op} {K}:\n        {out}.append({x})\nreturn {out}\n");
}

void any_cmp(Ctx& c) {
  c.cmp();
  c.constant("K", 0, 20);
  c.name({"any_{tag}", "has_one_{tag}", "some_{tag}"});
  c.sig("{L}", "returns True if some element of {L} is {opw} {K}, otherwise False",
        "for {x} in {L}:\n    if {x} {op} {K}:\n        return True\nreturn False\n");
}

void all_cmp(Ctx& c) {
  c.cmp();
  c.constant("K", 0, 20);
  c.name({"all_{tag}", "every_{tag}", "each_{tag}"});
  c.sig("{L}", "returns True if every element of {L} is {opw} {K}, otherwise False",
        "for {x} in {L}:\n    if {x} {neg} {K}:\n        return False\nreturn True\n");
}

void map_arith(Ctx& c) {
  const uint32_t form = c.rng.below(3);
  c.constant("K", 2, 12);
  static constexpr const char* kOps[] = {"+", "-", "*"};
  static constexpr const char* kDescs[] = {"{K} added to each element of {L}",
                                           "{K} subtracted from each element of {L}",
                                           "each element of {L} multiplied by {K}"};
  c.v.set("mop", kOps[form]);
  c.v.set("what", c.v.fill(kDescs[form]));
  if (form == 0)
    c.name({"add_to_each", "shift_up", "plus_each"});
  else if (form == 1)
    c.name({"subtract_from_each", "shift_down", "minus_each"});
  else
    c.name({"scale", "multiply_each", "times_each"});
  c.sig("{L}", "returns a new list with {what}",
        "{out} = []\nfor {x} in {L}:\n    {out}.append({x} {mop} {K})\nreturn {out}\n");
}

void parity_setup(Ctx& c) {
  const bool even = c.rng.chance(1, 2);
  c.v.set("par", even ? "even" : "odd");
  c.v.set("pars", even ? "evens" : "odds");
  c.v.set("pop", even ? "==" : "!=");
}

void count_parity(Ctx& c) {
  parity_setup(c);
  c.name({"count_{pars}", "num_{pars}", "how_many_{pars}"});
  c.sig("{L}", "returns how many elements of {L} are {par}",
        "{cnt} = 0\nfor {x} in {L}:\n    if {x} % 2 {pop} 0:\n        {cnt} += 1\nreturn {cnt}\n");
}

void filter_parity(Ctx& c) {
  parity_setup(c);
  c.name({"{pars}", "keep_{pars}", "only_{pars}"});
  c.sig("{L}", "returns a list of the {par} elements of {L}",
        "{out} = []\nfor {x} in {L}:\n    if {x} % 2 {pop} 0:\n        {out}.append({x})\nreturn {out}\n");
}

void sum_parity(Ctx& c) {
  parity_setup(c);
  c.name({"sum_{pars}", "total_{pars}", "add_{pars}"});
  c.sig("{L}", "returns the sum of the {par} elements of {L}",
        "{acc} = 0\nfor {x} in {L}:\n    if {x} % 2 {pop} 0:\n        {acc} += {x}\nreturn {acc}\n");
}

void mean(Ctx& c) {
  c.name({"mean", "average", "avg", "mean_of", "average_of", "list_mean"});
  c.sig("{L}", "returns the average of the numbers in {L}",
        "{acc} = 0\nfor {x} in {L}:\n    {acc} += {x}\nreturn {acc} / len({L})\n");
}

void contains(Ctx& c) {
  c.name({"contains", "has_value", "includes", "is_member", "occurs_in", "appears", "find_value"});
  c.sig("{L}, {t}", "returns True if {t} occurs in {L}, otherwise False",
        "for {x} in {L}:\n    if {x} == {t}:\n        return True\nreturn False\n");
}

void index_of(Ctx& c) {
  c.name({"index_of", "find_index", "position_of", "locate", "where_is", "first_index", "search"});
  c.sig("{L}, {t}", "returns the index of the first occurrence of {t} in {L}, or -1 if there is none",
        "for {i} in range(len({L})):\n    if {L}[{i}] == {t}:\n        return {i}\nreturn -1\n");
}

void reverse_list(Ctx& c) {
  c.name({"reverse_list", "reversed_copy", "backwards", "flip_list", "reverse_items", "mirror"});
  c.sig("{L}", "returns a new list with the elements of {L} in reverse order",
        "{out} = []\nfor {i} in range(len({L}) - 1, -1, -1):\n    {out}.append({L}[{i}])\nreturn {out}\n");
}

void factorial(Ctx& c) {
  c.name({"factorial", "fact", "product_up_to", "factorial_of", "fact_iter", "compute_factorial"});
  c.sig("{n}", "returns the factorial of {n}",
        "{prod} = 1\nfor {i} in range(2, {n} + 1):\n    {prod} *= {i}\nreturn {prod}\n");
}

void fibonacci(Ctx& c) {
  static constexpr const char* kPairs[][2] = {{"a", "b"}, {"prev", "curr"}, {"f0", "f1"}};
  const auto& p = c.rng.pick(kPairs);
  c.v.set("a", p[0]);
  c.v.set("b", p[1]);
  c.name({"fib", "fibonacci", "nth_fib", "fib_number", "fibo", "fib_iter"});
  c.sig("{n}", "returns the {n}-th Fibonacci number, counting fib(0) = 0",
        "{a}, {b} = 0, 1\nfor _ in range({n}):\n    {a}, {b} = {b}, {a} + {b}\nreturn {a}\n");
}

void sum_to(Ctx& c) {
  const bool sq = c.rng.chance(1, 2);
  c.v.set("term", sq ? "{i} * {i}" : "{i}");
  c.v.set("term", c.v.fill(c.v.get("term")));
  c.v.set("what", sq ? "the squares of the integers" : "the integers");
  if (sq)
    c.name({"sum_squares_to", "square_sum", "sum_of_squares", "squares_up_to", "sum_sq"});
  else
    c.name({"sum_to", "triangle", "sum_up_to", "triangular", "sum_first", "gauss_sum"});
  c.sig("{n}", "returns the sum of {what} from 1 to {n}",
        "{acc} = 0\nfor {i} in range(1, {n} + 1):\n    {acc} += {term}\nreturn {acc}\n");
}

void power(Ctx& c) {
  static constexpr const char* kParams[][2] = {{"base", "exp"}, {"b", "e"}, {"x", "n"},
                                               {"base", "n"},   {"a", "k"}, {"value", "times"}};
  const auto& p = c.rng.pick(kParams);
  c.v.set("B", p[0]);
  c.v.set("E", p[1]);
  c.name({"power", "pow_int", "raise_to", "int_power", "to_the_power", "exponent"});
  c.sig("{B}, {E}", "returns {B} raised to the power {E}, for {E} >= 0",
        "{prod} = 1\nfor _ in range({E}):\n    {prod} *= {B}\nreturn {prod}\n");
}

void is_prime(Ctx& c) {
  c.name({"is_prime", "prime", "check_prime", "prime_test", "is_a_prime", "primality"});
  c.sig("{n}", "returns True if {n} is a prime number, otherwise False",
        "if {n} < 2:\n    return False\n{i} = 2\nwhile {i} * {i} <= {n}:\n    if {n} % {i} == 0:\n        return "
        "False\n    {i} += 1\nreturn True\n");
}

void gcd(Ctx& c) {
  static constexpr const char* kParams[][2] = {{"a", "b"}, {"p", "q"}, {"m", "n"},
                                               {"u", "w"}, {"x", "y"}, {"first", "second"}};
  const auto& p = c.rng.pick(kParams);
  c.v.set("A", p[0]);
  c.v.set("B", p[1]);
  c.name({"gcd", "greatest_divisor", "common_divisor", "hcf", "gcd_of", "euclid"});
  c.sig("{A}, {B}", "returns the greatest common divisor of {A} and {B}",
        "while {B} != 0:\n    {A}, {B} = {B}, {A} % {B}\nreturn {A}\n");
}

void abs_value(Ctx& c) {
  c.name({"absolute", "abs_value", "magnitude", "absolute_value", "distance_from_zero", "abs_int"});
  c.sig("{n}", "returns the absolute value of {n}", "if {n} < 0:\n    return -{n}\nreturn {n}\n");
}

void clamp(Ctx& c) {
  static constexpr const char* kParams[][3] = {{"value", "low", "high"},     {"n", "lo", "hi"},
                                               {"amount", "lower", "upper"}, {"x", "lo", "hi"},
                                               {"score", "low", "high"},     {"t", "floor", "ceiling"}};
  const auto& p = c.rng.pick(kParams);
  c.v.set("X", p[0]);
  c.v.set("LO", p[1]);
  c.v.set("HI", p[2]);
  c.name({"clamp", "limit", "bound", "clip", "restrict", "clamp_value"});
  c.sig("{X}, {LO}, {HI}", "returns {X} limited to the range from {LO} to {HI}",
        "if {X} < {LO}:\n    return {LO}\nif {X} > {HI}:\n    return {HI}\nreturn {X}\n");
}

void sign(Ctx& c) {
  c.name({"sign", "sign_of", "signum", "get_sign", "polarity", "direction"});
  c.sig("{n}", "returns 1 if {n} is positive, -1 if it is negative and 0 otherwise",
        "if {n} > 0:\n    return 1\nif {n} < 0:\n    return -1\nreturn 0\n");
}

void pick_two(Ctx& c) {
  static constexpr const char* kParams[][2] = {{"a", "b"}, {"x", "y"}, {"p", "q"},
                                               {"m", "n"}, {"u", "w"}, {"first", "second"}};
  const auto& p = c.rng.pick(kParams);
  c.v.set("A", p[0]);
  c.v.set("B", p[1]);
  const bool mx = c.rng.chance(1, 2);
  c.v.set("gt", mx ? ">" : "<");
  c.v.set("ext", mx ? "larger" : "smaller");
  if (mx)
    c.name({"max_two", "bigger", "larger", "max_of_two", "pick_larger"});
  else
    c.name({"min_two", "smaller", "lesser", "min_of_two", "pick_smaller"});
  c.sig("{A}, {B}", "returns the {ext} of {A} and {B}", "if {A} {gt} {B}:\n    return {A}\nreturn {B}\n");
}

void count_char(Ctx& c) {
  c.name({"count_char", "char_count", "occurrences", "count_letter", "tally_char", "frequency"});
  c.sig("{s}, {c}", "returns how many times the character {c} occurs in {s}",
        "{cnt} = 0\nfor {ch} in {s}:\n    if {ch} == {c}:\n        {cnt} += 1\nreturn {cnt}\n");
}

void count_vowels(Ctx& c) {
  c.name({"count_vowels", "vowel_count", "num_vowels", "vowels_in", "count_aeiou"});
  c.sig("{s}", "returns how many lowercase vowels {s} contains",
        "{cnt} = 0\nfor {ch} in {s}:\n    if {ch} in 'aeiou':\n        {cnt} += 1\nreturn {cnt}\n");
}

void reverse_string(Ctx& c) {
  c.name({"reverse_string", "reversed_text", "flip", "reverse_text", "backwards_text", "mirror_string"});
  c.sig("{s}", "returns {s} with its characters in reverse order",
        "{out} = ''\nfor {ch} in {s}:\n    {out} = {ch} + {out}\nreturn {out}\n");
}

void is_palindrome(Ctx& c) {
  static constexpr const char* kPairs[][2] = {{"i", "j"}, {"lo", "hi"}, {"front", "back"}};
  const auto& p = c.rng.pick(kPairs);
  c.v.set("I", p[0]);
  c.v.set("J", p[1]);
  c.name({"is_palindrome", "palindrome", "reads_same", "check_palindrome", "symmetric", "is_mirror"});
  c.sig("{s}", "returns True if {s} reads the same forwards and backwards, otherwise False",
        "{I} = 0\n{J} = len({s}) - 1\nwhile {I} < {J}:\n    if {s}[{I}] != {s}[{J}]:\n        return False\n    {I} += "
        "1\n    {J} -= 1\nreturn True\n");
}

void map_power(Ctx& c) {
  const bool sq = c.rng.chance(1, 2);
  c.v.set("pw", sq ? "{x} * {x}" : "{x} * {x} * {x}");
  c.v.set("pw", c.v.fill(c.v.get("pw")));
  c.v.set("what", sq ? "squares" : "cubes");
  if (sq)
    c.name({"squares", "square_all", "squared", "square_each", "list_squares"});
  else
    c.name({"cubes", "cube_all", "cubed", "cube_each", "list_cubes"});
  c.sig("{L}", "returns a list of the {what} of the elements of {L}",
        "{out} = []\nfor {x} in {L}:\n    {out}.append({pw})\nreturn {out}\n");
}

void label_divisible(Ctx& c) {
  static constexpr const char* kWords[] = {"fizz", "buzz", "bang", "zap", "ping", "pop"};
  c.constant("K", 2, 9);
  c.v.set("W", c.rng.pick(kWords));
  c.name({"label", "tag_number", "classify", "fizz_label", "name_number", "label_of"});
  c.sig("{n}", "returns '{W}' if {n} is divisible by {K}, otherwise {n} as a string",
        "if {n} % {K} == 0:\n    return '{W}'\nreturn str({n})\n");
}

void count_multiples(Ctx& c) {
  c.constant("K", 2, 9);
  c.name({"count_multiples", "multiples_count", "num_divisible", "count_divisible", "divisible_count"});
  c.sig("{L}", "returns how many elements of {L} are divisible by {K}",
        "{cnt} = 0\nfor {x} in {L}:\n    if {x} % {K} == 0:\n        {cnt} += 1\nreturn {cnt}\n");
}

void end_element(Ctx& c) {
  const bool last = c.rng.chance(1, 2);
  c.v.set("pos", last ? "last" : "first");
  c.v.set("at", last ? "-1" : "0");
  if (last)
    c.name({"last", "last_item", "final_element", "tail_value", "get_last"});
  else
    c.name({"first", "first_item", "head", "front", "get_first"});
  c.sig("{L}", "returns the {pos} element of {L}", "return {L}[{at}]\n");
}

void running_sum(Ctx& c) {
  c.name({"running_sum", "prefix_sums", "cumulative", "running_totals", "cumsum", "partial_sums"});
  c.sig("{L}", "returns the list of running totals of {L}",
        "{out} = []\n{acc} = 0\nfor {x} in {L}:\n    {acc} += {x}\n    {out}.append({acc})\nreturn {out}\n");
}

void dedupe(Ctx& c) {
  c.name({"unique", "dedupe", "distinct", "remove_duplicates", "uniq", "no_repeats"});
  c.sig("{L}", "returns the elements of {L} without repeats, in order of first occurrence",
        "{out} = []\nfor {x} in {L}:\n    if {x} not in {out}:\n        {out}.append({x})\nreturn {out}\n");
}

void differences(Ctx& c) {
  c.name({"differences", "deltas", "steps_between", "gaps", "consecutive_diffs", "diffs"});
  c.sig("{L}", "returns the differences between consecutive elements of {L}",
        "{out} = []\nfor {i} in range(1, len({L})):\n    {out}.append({L}[{i}] - {L}[{i} - 1])\nreturn {out}\n");
}

void pair_setup(Ctx& c) {
  const auto& p = c.rng.pick(kListPairs);
  c.v.set("L1", p[0]);
  c.v.set("L2", p[1]);
}

void dot(Ctx& c) {
  pair_setup(c);
  c.name({"dot", "dot_product", "inner", "inner_product", "dot_of", "scalar_product"});
  c.sig("{L1}, {L2}", "returns the dot product of the equally long lists {L1} and {L2}",
        "{acc} = 0\nfor {i} in range(len({L1})):\n    {acc} += {L1}[{i}] * {L2}[{i}]\nreturn {acc}\n");
}

void combine_lists(Ctx& c) {
  pair_setup(c);
  const uint32_t form = c.rng.below(3);
  static constexpr const char* kOps[] = {"+", "-", "*"};
  static constexpr const char* kWhat[] = {"sums", "differences", "products"};
  c.v.set("mop", kOps[form]);
  c.v.set("what", kWhat[form]);
  if (form == 0)
    c.name({"add_lists", "pairwise_sum", "elementwise_add", "sum_lists", "zip_add"});
  else if (form == 1)
    c.name({"subtract_lists", "pairwise_diff", "elementwise_sub", "diff_lists", "zip_sub"});
  else
    c.name({"multiply_lists", "pairwise_product", "elementwise_mul", "product_lists", "zip_mul"});
  c.sig("{L1}, {L2}", "returns the element-wise {what} of the equally long lists {L1} and {L2}",
        "{out} = []\nfor {i} in range(len({L1})):\n    {out}.append({L1}[{i}] {mop} {L2}[{i}])\nreturn {out}\n");
}

void count_words(Ctx& c) {
  c.name({"count_words", "word_count", "num_words", "words_in", "how_many_words", "wc"});
  c.sig("{s}", "returns the number of words in {s}, separated by whitespace", "return len({s}.split())\n");
}

void digit_stat(Ctx& c) {
  const bool sum = c.rng.chance(1, 2);
  c.v.set("what", sum ? "the sum of the digits" : "the number of digits");
  c.v.set("upd", sum ? c.v.fill("{acc} += {n} % 10") : c.v.fill("{acc} += 1"));
  if (sum)
    c.name({"digit_sum", "sum_digits", "add_digits", "sum_of_digits", "digits_total"});
  else
    c.name({"digit_count", "count_digits", "num_digits", "length_of_number", "digits_in"});
  c.sig("{n}", "returns {what} of the positive integer {n}",
        "{acc} = 0\nwhile {n} > 0:\n    {upd}\n    {n} //= 10\nreturn {acc}\n");
}

void arg_extreme(Ctx& c) {
  const bool mx = c.rng.chance(1, 2);
  c.v.set("gt", mx ? ">" : "<");
  c.v.set("ext", mx ? "largest" : "smallest");
  if (mx)
    c.name({"argmax", "index_of_max", "max_index", "where_max", "pos_of_max"});
  else
    c.name({"argmin", "index_of_min", "min_index", "where_min", "pos_of_min"});
  c.sig("{L}", "returns the index of the first {ext} element of {L}",
        "{best} = 0\nfor {i} in range(1, len({L})):\n    if {L}[{i}] {gt} {L}[{best}]:\n        {best} = {i}\nreturn "
        "{best}\n");
}

void is_sorted(Ctx& c) {
  const bool up = c.rng.chance(1, 2);
  c.v.set("bad", up ? "<" : ">");
  c.v.set("order", up ? "ascending" : "descending");
  if (up)
    c.name({"is_sorted", "is_ascending", "in_order", "sorted_up", "is_increasing", "check_sorted"});
  else
    c.name({"is_descending", "sorted_down", "is_decreasing", "in_reverse_order", "check_descending"});
  c.sig("{L}", "returns True if {L} is in {order} order, otherwise False",
        "for {i} in range(1, len({L})):\n    if {L}[{i}] {bad} {L}[{i} - 1]:\n        return False\nreturn True\n");
}

void multiples_list(Ctx& c) {
  c.constant("K", 2, 12);
  c.name({"multiples", "first_multiples", "times_table", "multiples_of", "table_row", "list_multiples"});
  c.sig("{n}", "returns a list of the first {n} positive multiples of {K}",
        "{out} = []\nfor {i} in range(1, {n} + 1):\n    {out}.append({i} * {K})\nreturn {out}\n");
}

void count_between(Ctx& c) {
  const int lo = c.rng.range(0, 10);
  c.v.set("LO", std::to_string(lo));
  c.v.set("HI", std::to_string(lo + c.rng.range(1, 20)));
  c.name({"count_between", "count_in_range", "num_between", "between_count", "in_range_count"});
  c.sig("{L}", "returns how many elements of {L} lie between {LO} and {HI} inclusive",
        "{cnt} = 0\nfor {x} in {L}:\n    if {LO} <= {x} <= {HI}:\n        {cnt} += 1\nreturn {cnt}\n");
}

void string_method(Ctx& c) {
  const uint32_t form = c.rng.below(3);
  static constexpr const char* kMethods[] = {"upper", "lower", "strip"};
  static constexpr const char* kWhat[] = {"{s} in upper case", "{s} in lower case",
                                          "{s} without leading and trailing whitespace"};
  c.v.set("meth", kMethods[form]);
  c.v.set("what", c.v.fill(kWhat[form]));
  if (form == 0)
    c.name({"shout", "to_upper", "upper_case", "uppercase", "make_upper"});
  else if (form == 1)
    c.name({"whisper", "to_lower", "lower_case", "lowercase", "make_lower"});
  else
    c.name({"trim", "strip_spaces", "clean", "strip_text", "tidy"});
  c.sig("{s}", "returns {what}", "return {s}.{meth}()\n");
}

void repeat_string(Ctx& c) {
  c.constant("K", 2, 5);
  c.name({"repeat", "echo", "repeat_text", "copies", "duplicate_text", "repeat_word"});
  c.sig("{s}", "returns {s} repeated {K} times", "return {s} * {K}\n");
}

void spread(Ctx& c) {
  c.name({"spread", "value_range", "max_minus_min", "range_of", "span", "amplitude"});
  c.sig("{L}", "returns the largest element of {L} minus the smallest", "return max({L}) - min({L})\n");
}

void collatz(Ctx& c) {
  static constexpr const char* kSteps[] = {"steps", "moves", "turns"};
  c.v.set("st", c.rng.pick(kSteps));
  c.name({"collatz_steps", "collatz_length", "steps_to_one", "collatz_count", "hailstone_steps"});
  c.sig("{n}", "returns how many Collatz steps take the positive integer {n} to 1",
        "{st} = 0\nwhile {n} != 1:\n    if {n} % 2 == 0:\n        {n} = {n} // 2\n    else:\n        {n} = 3 * {n} + "
        "1\n    {st} += 1\nreturn {st}\n");
}

void linear(Ctx& c) {
  c.constant("A", 2, 9);
  c.constant("B", 1, 20);
  c.name({"linear", "affine", "line_value", "apply_line", "linear_map", "formula"});
  c.sig("{n}", "returns {A} times {n} plus {B}", "return {A} * {n} + {B}\n");
}

void grade(Ctx& c) {
  const int hi = c.rng.range(70, 95);
  c.v.set("T1", std::to_string(hi));
  c.v.set("T2", std::to_string(hi - c.rng.range(10, 30)));
  c.name({"grade", "letter_grade", "rank", "grade_of", "score_to_letter", "classify_score"});
  c.sig("{n}", "returns 'A' if {n} is at least {T1}, 'B' if it is at least {T2} and 'C' otherwise",
        "if {n} >= {T1}:\n    return 'A'\nelif {n} >= {T2}:\n    return 'B'\nelse:\n    return 'C'\n");
}

using Family = void (*)(Ctx&);
struct Entry {
  const char* name;
  Family fn;
};
constexpr Entry kFamilies[] = {
    {"extreme", extreme},
    {"sum_list", sum_list},
    {"product_list", product_list},
    {"count_cmp", count_cmp},
    {"filter_cmp", filter_cmp},
    {"any_cmp", any_cmp},
    {"all_cmp", all_cmp},
    {"map_arith", map_arith},
    {"count_parity", count_parity},
    {"filter_parity", filter_parity},
    {"sum_parity", sum_parity},
    {"mean", mean},
    {"contains", contains},
    {"index_of", index_of},
    {"reverse_list", reverse_list},
    {"factorial", factorial},
    {"fibonacci", fibonacci},
    {"sum_to", sum_to},
    {"power", power},
    {"is_prime", is_prime},
    {"gcd", gcd},
    {"abs_value", abs_value},
    {"clamp", clamp},
    {"sign", sign},
    {"pick_two", pick_two},
    {"count_char", count_char},
    {"count_vowels", count_vowels},
    {"reverse_string", reverse_string},
    {"is_palindrome", is_palindrome},
    {"map_power", map_power},
    {"label_divisible", label_divisible},
    {"count_multiples", count_multiples},
    {"end_element", end_element},
    {"running_sum", running_sum},
    {"dedupe", dedupe},
    {"differences", differences},
    {"dot", dot},
    {"combine_lists", combine_lists},
    {"count_words", count_words},
    {"digit_stat", digit_stat},
    {"arg_extreme", arg_extreme},
    {"is_sorted", is_sorted},
    {"multiples_list", multiples_list},
    {"count_between", count_between},
    {"string_method", string_method},
    {"repeat_string", repeat_string},
    {"spread", spread},
    {"collatz", collatz},
    {"linear", linear},
    {"grade", grade},
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
