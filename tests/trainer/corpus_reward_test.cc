// The reward of the built-in corpus (trainer/corpus.h, docs/corpus.md): arith responses scored on
// their first final line; code responses compared as Python token streams regardless of layout
// and local names, other programs refused or given format credit only; garbage and huge inputs
// scored 0, format credit or 1, quickly and without crashing. Every generated sample's full
// reward on its own response is checked in corpus_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "trainer/corpus.h"

namespace updraft::corpus {
namespace {

// A small deterministic generator for the garbage tests (independent of the corpus's own).
struct TestRng {
  uint64_t s;
  uint64_t next() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return s >> 33;
  }
};

Sample arith_sample() {
  Sample s;
  s.domain = Domain::kArith;
  s.prompt =
      "Question: Mia has 12 apples. She gives 5 to Leo and buys 3 more. How many apples does Mia have now?\nAnswer:";
  s.response = " 12 - 5 = 7. 7 + 3 = 10. The answer is 10.\n";
  s.answer = "10";
  return s;
}

TEST(CorpusReward, ArithScoresTheFirstFinalLine) {
  const Sample s = arith_sample();
  EXPECT_EQ(reward(s, s.response), 1.0);
  EXPECT_EQ(reward(s, " The answer is 10."), 1.0) << "the worked solution is not graded";
  EXPECT_EQ(reward(s, " 12 - 5 = 8. The answer is 10.\n"), 1.0);
  EXPECT_EQ(reward(s, " 12 - 5 = 7. 7 + 3 = 11. The answer is 11.\n"), kFormatCredit);
  EXPECT_EQ(reward(s, " The answer is 11.\n", 0.0), 0.0);
  EXPECT_EQ(reward(s, " The answer is 010.\n"), kFormatCredit) << "the answer's text must match";
  EXPECT_EQ(reward(s, " The answer is -10.\n"), kFormatCredit);
  EXPECT_EQ(reward(s, " The answer is 11. The answer is 10.\n"), kFormatCredit) << "only the first counts";
  EXPECT_EQ(reward(s, " The answer is 10\n"), 0.0);
  EXPECT_EQ(reward(s, " The answer is 10"), 0.0);
  EXPECT_EQ(reward(s, " The answer is ten."), 0.0);
  EXPECT_EQ(reward(s, " The answer is ."), 0.0);
  EXPECT_EQ(reward(s, " The answer is 1234567890123456789."), 0.0) << "more than 18 digits";
  EXPECT_EQ(reward(s, " the answer is 10."), 0.0);
  EXPECT_EQ(reward(s, " 12 - 5 = 7. 7 + 3 = 10."), 0.0);
  EXPECT_EQ(reward(s, ""), 0.0);
  EXPECT_EQ(reward(s, "The answer is "), 0.0);
}

Sample code_sample() {
  Sample s;
  s.domain = Domain::kCode;
  s.prompt = "# Task: write max_of(xs) that returns the largest element of xs\n";
  s.response =
      "def max_of(xs):\n    best = xs[0]\n    for x in xs:\n        if x > best:\n            best = x\n    return "
      "best\n";
  s.answer = s.response;
  return s;
}

TEST(CorpusReward, CodeIgnoresLayoutAndLocalNames) {
  const Sample s = code_sample();
  EXPECT_EQ(reward(s, s.response), 1.0);
  EXPECT_EQ(
      reward(s, "def max_of(xs):\n  best = xs[0]\n  for x in xs:\n    if x > best:\n      best = x\n  return best"),
      1.0);
  EXPECT_EQ(reward(s, "def max_of(xs):\n\tbest=xs[0]\n\tfor x in xs:\n\t\tif x>best:\n\t\t\tbest=x\n\treturn best\n"),
            1.0);
  EXPECT_EQ(reward(s,
                   "# the maximum\ndef max_of( xs ) :\r\n\n    best = xs[\n 0 ]  # start\n\n    for x in xs:\n"
                   "        if x > best :\n            best = x\n    return best   \n\n"),
            1.0);
  EXPECT_EQ(
      reward(s,
             "def max_of(xs):\n    m = xs[0]\n    for v in xs:\n        if v > m:\n            m = v\n    return m\n"),
      1.0)
      << "consistent renaming of locals";
}

TEST(CorpusReward, CodeRejectsOtherPrograms) {
  const Sample s = code_sample();
  const double credit = kFormatCredit;
  // Same def line, different body: format credit.
  EXPECT_EQ(reward(s,
                   "def max_of(xs):\n    best = xs[0]\n    for x in xs:\n        if x < best:\n            best = x\n"
                   "    return best\n"),
            credit);
  EXPECT_EQ(reward(s, "def max_of(xs):\n    return max(xs)\n"), credit);
  EXPECT_EQ(
      reward(s,
             "def max_of(xs):\n    m = xs[0]\n    for m in xs:\n        if m > m:\n            m = m\n    return m\n"),
      credit)
      << "two locals merged into one name";
  EXPECT_EQ(reward(s,
                   "def max_of(xs):\n    xs = xs[0]\n    for x in xs:\n        if x > xs:\n            xs = x\n"
                   "    return xs\n"),
            credit)
      << "a local renamed to the parameter";
  EXPECT_EQ(reward(s,
                   "def max_of(xs):\n    best = xs[0]\n    for x in xs:\n        if x > best:\n            best = x\n"
                   "        return best\n"),
            credit)
      << "indentation is structure";
  // Another def line, or not exactly one well-formed function: 0.
  EXPECT_EQ(reward(s,
                   "def biggest(xs):\n    best = xs[0]\n    for x in xs:\n        if x > best:\n            best = x\n"
                   "    return best\n"),
            0.0);
  EXPECT_EQ(reward(s, "def max_of(ys):\n    return max(ys)\n"), 0.0);
  EXPECT_EQ(reward(s, s.response + "def other():\n    return 1\n"), 0.0);
  EXPECT_EQ(reward(s, s.response + "print(max_of([1]))\n"), 0.0);
  EXPECT_EQ(reward(s, "x = 1\n" + s.response), 0.0);
  EXPECT_EQ(reward(s, "  " + s.response), 0.0);
  EXPECT_EQ(reward(s, "def max_of(xs):\n"), 0.0);
  EXPECT_EQ(reward(s, "def max_of(xs):\nreturn 1\n"), 0.0);
  EXPECT_EQ(reward(s, "def max_of(xs):\n    return max(xs\n"), 0.0) << "unbalanced bracket";
  EXPECT_EQ(reward(s, "def max_of(xs):\n    return 'abc\n"), 0.0) << "unclosed string";
  EXPECT_EQ(reward(s, "def max_of(xs):\n        a = 1\n    return a\n"), 0.0) << "dedent to a width never opened";
  EXPECT_EQ(reward(s, ""), 0.0);
  EXPECT_EQ(reward(s, "\n\n   \n# nothing\n"), 0.0);
  // Every strict prefix that drops a token scores below 1.
  for (size_t n = 0; n + 2 < s.response.size(); ++n)
    EXPECT_LT(reward(s, s.response.substr(0, n)), 1.0) << n;
}

TEST(CorpusReward, GarbageAndHugeInputsAreSafe) {
  TestRng rng{12345};
  const Sample samples[] = {arith_sample(), code_sample(), make_sample(Domain::kCode, 1, 3),
                            make_sample(Domain::kArith, 1, 3)};
  auto valid = [](double r) { return r == 0.0 || r == kFormatCredit || r == 1.0; };
  for (int trial = 0; trial < 3000; ++trial) {
    const Sample& s = samples[trial % 4];
    std::string g;
    if (trial % 3 == 0) {  // random bytes
      g.resize(rng.next() % 400);
      for (char& c : g)
        c = static_cast<char>(rng.next() & 0xff);
    } else {  // the correct response with a few bytes changed, inserted or removed
      g = s.response;
      for (int k = 0, edits = 1 + static_cast<int>(rng.next() % 4); k < edits && !g.empty(); ++k) {
        const size_t at = rng.next() % g.size();
        const char c = "\n\t ():'\"#[]{}x0.=-"[rng.next() % 18];
        const uint64_t kind = rng.next() % 3;
        if (kind == 0)
          g[at] = c;
        else if (kind == 1)
          g.insert(g.begin() + static_cast<std::ptrdiff_t>(at), c);
        else
          g.erase(at, 1);
      }
    }
    const double r = reward(s, g);
    EXPECT_TRUE(valid(r)) << r;
  }
  // Huge inputs: random bytes, repeated final lines, deep nesting and indentation.
  std::string big(16 << 20, '\0');
  for (char& c : big)
    c = static_cast<char>(rng.next() & 0xff);
  std::string lines;
  while (lines.size() < (8u << 20))
    lines += "The answer is 99999999999999999999";
  std::string nested = "def max_of(xs):\n    return " + std::string(1 << 20, '(');
  std::string deep = "def max_of(xs):\n";
  for (int i = 1; i < 300; ++i)
    deep += std::string(static_cast<size_t>(i), ' ') + "if x:\n";
  const auto t0 = std::chrono::steady_clock::now();
  for (const Sample& s : samples)
    for (const std::string* g : {&big, &lines, &nested, &deep})
      EXPECT_TRUE(valid(reward(s, *g)));
  EXPECT_EQ(reward(code_sample(), deep), kFormatCredit) << "deep but well formed";
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 10.0);
}

}  // namespace
}  // namespace updraft::corpus
