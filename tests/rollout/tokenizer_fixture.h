// Shared helpers of the tokenizer tests (tokenizer_test.cc, tokenizer_robustness_test.cc): the
// fixture files under tests/fixtures/tokenizer/ (the target defines UPDRAFT_SOURCE_DIR), a
// printable form of a string for failure messages, and seeded random UTF-8 text.
#pragma once

#include <cstddef>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fixture_util.h"

namespace updraft::testing_tokenizer {

// The whole file at `path` (empty if it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A file of tests/fixtures/tokenizer/.
inline std::string fixture(const std::string& name) {
  return fixture_util::source_path("tests/fixtures/tokenizer/" + name);
}

// `s` as a JSON string literal (quoted, control characters escaped), for failure messages.
inline std::string printable(const std::string& s) {
  return nlohmann::json(s).dump();
}

// Random valid UTF-8: ASCII-heavy, with whitespace runs, 2/3/4-byte characters and specials.
inline std::string random_text(std::mt19937_64& rng, size_t chars) {
  static const std::vector<std::string> pieces = {
      " ", "  ", "\n", "\t", "\r\n",   "'s",     "'LL",           "12",         "3.5",
      "é", "ж",  "東", "😀",  "\u00a0", "\u3000", "<|endoftext|>", "<|eot_id|>", "_"};
  std::string s;
  for (size_t i = 0; i < chars; ++i) {
    const uint64_t r = rng() % 100;
    if (r < 60)
      s += static_cast<char>('a' + rng() % 26);
    else if (r < 70)
      s += static_cast<char>(' ' + rng() % 95);
    else
      s += pieces[rng() % pieces.size()];
  }
  return s;
}

}  // namespace updraft::testing_tokenizer
