// Code-corpus families over integers: loops up to n, divisibility, small formulas and
// comparisons of two numbers. Their draws from c.rng are part of the corpus's definition (see
// corpus_code_detail.h).
#include <cstdint>
#include <string>

#include "trainer/corpus_code_detail.h"

namespace updraft::corpus::detail::code {

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

void label_divisible(Ctx& c) {
  static constexpr const char* kWords[] = {"fizz", "buzz", "bang", "zap", "ping", "pop"};
  c.constant("K", 2, 9);
  c.v.set("W", c.rng.pick(kWords));
  c.name({"label", "tag_number", "classify", "fizz_label", "name_number", "label_of"});
  c.sig("{n}", "returns '{W}' if {n} is divisible by {K}, otherwise {n} as a string",
        "if {n} % {K} == 0:\n    return '{W}'\nreturn str({n})\n");
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

void multiples_list(Ctx& c) {
  c.constant("K", 2, 12);
  c.name({"multiples", "first_multiples", "times_table", "multiples_of", "table_row", "list_multiples"});
  c.sig("{n}", "returns a list of the first {n} positive multiples of {K}",
        "{out} = []\nfor {i} in range(1, {n} + 1):\n    {out}.append({i} * {K})\nreturn {out}\n");
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

}  // namespace updraft::corpus::detail::code
