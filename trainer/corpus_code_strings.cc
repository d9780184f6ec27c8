// Code-corpus families over strings: characters, words and string methods. Their draws from
// c.rng are part of the corpus's definition (see corpus_code_detail.h).
#include <cstdint>
#include <string>

#include "trainer/corpus_code_detail.h"

namespace updraft::corpus::detail::code {

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

void count_words(Ctx& c) {
  c.name({"count_words", "word_count", "num_words", "words_in", "how_many_words", "wc"});
  c.sig("{s}", "returns the number of words in {s}, separated by whitespace", "return len({s}.split())\n");
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

}  // namespace updraft::corpus::detail::code
