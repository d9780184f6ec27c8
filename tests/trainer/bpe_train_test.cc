// Byte-level BPE training: the committed fixtures (whose HF encodings cases.json holds) are
// reproduced byte for byte, training is deterministic, the vocabulary layout and tie-break are
// as documented, bad options are rejected, and training is fast.
//
// UPDRAFT_WRITE_TOKENIZER_FIXTURES=1 makes BpeTrain.ReproducesCommittedFixtures (re)write
// tests/fixtures/tokenizer/updraft_*.json instead of comparing; then run
// tools/make_tokenizer_fixtures.py again to record their HF encodings.
// UPDRAFT_BPE_BENCH=<MB> makes BpeTrain.Speed train on that many MB (default 2).
#include "trainer/bpe_train.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "kernels/core/error.h"
#include "tests/fixture_util.h"

namespace updraft {
namespace {

using Json = nlohmann::json;
using fixture_util::source_path;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string fixture(const std::string& name) {
  return source_path("tests/fixtures/tokenizer/" + name);
}

struct FixtureSpec {
  const char* file;
  BpeTrainOptions options;
};

// The trained fixtures: corpus.txt as one text, 500 tokens.
std::vector<FixtureSpec> fixture_specs() {
  BpeTrainOptions gpt2;
  gpt2.vocab_size = 500;
  gpt2.special_tokens = {"<|endoftext|>", "<|pad|>"};
  BpeTrainOptions llama3 = gpt2;
  llama3.special_tokens = {"<|begin_of_text|>", "<|end_of_text|>", "<|endoftext|>"};
  llama3.split_pattern = kLlama3SplitPattern;
  return {{"updraft_bpe_gpt2.json", gpt2}, {"updraft_bpe_llama3.json", llama3}};
}

TEST(BpeTrain, ReproducesCommittedFixtures) {
  const std::string corpus = read_file(fixture("corpus.txt"));
  ASSERT_GT(corpus.size(), 10000u);
  const bool write = std::getenv("UPDRAFT_WRITE_TOKENIZER_FIXTURES") != nullptr;
  for (const FixtureSpec& spec : fixture_specs()) {
    const Tokenizer tok = train_bpe(std::vector<std::string>{corpus}, spec.options);
    if (write) {
      tok.save(fixture(spec.file));
      std::printf("wrote %s (vocab %lld)\n", fixture(spec.file).c_str(), static_cast<long long>(tok.vocab_size()));
      continue;
    }
    EXPECT_EQ(tok.to_json(), read_file(fixture(spec.file))) << spec.file << " differs from a fresh training";
    EXPECT_EQ(tok.vocab_size(), 500) << spec.file;
  }
}

TEST(BpeTrain, FixtureFormats) {
  const Json gpt2 = Json::parse(read_file(fixture("updraft_bpe_gpt2.json")));
  EXPECT_EQ(gpt2["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(gpt2["pre_tokenizer"]["use_regex"], true);
  const Json llama3 = Json::parse(read_file(fixture("updraft_bpe_llama3.json")));
  EXPECT_EQ(llama3["pre_tokenizer"]["type"], "Sequence");
  EXPECT_EQ(llama3["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"], kLlama3SplitPattern);
  EXPECT_EQ(llama3["pre_tokenizer"]["pretokenizers"][1]["use_regex"], false);
  EXPECT_TRUE(llama3["model"]["merges"][0].is_string());
}

TEST(BpeTrain, DeterministicAndStreamingEqualsVector) {
  const std::string corpus = read_file(fixture("corpus.txt"));
  std::vector<std::string> texts;
  for (size_t i = 0; i < corpus.size(); i += 1000)
    texts.push_back(corpus.substr(i, 1000));
  BpeTrainOptions opt;
  opt.vocab_size = 700;
  opt.special_tokens = {"<|endoftext|>"};
  opt.min_frequency = 1;
  const std::string a = train_bpe(texts, opt).to_json();
  const std::string b = train_bpe(texts, opt).to_json();
  EXPECT_EQ(a, b);
  size_t i = 0;
  const std::string c = train_bpe(
                            [&](std::string& t) {
                              if (i == texts.size())
                                return false;
                              t = texts[i++];
                              return true;
                            },
                            opt)
                            .to_json();
  EXPECT_EQ(a, c);
}

TEST(BpeTrain, VocabularyLayout) {
  BpeTrainOptions opt;
  opt.vocab_size = 300;
  opt.special_tokens = {"<s>", "</s>", "<|endoftext|>"};
  const Tokenizer tok = train_bpe(std::vector<std::string>{read_file(fixture("corpus.txt"))}, opt);
  ASSERT_EQ(tok.vocab_size(), 300);
  for (int32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(tok.token(i), opt.special_tokens[i]);
    EXPECT_TRUE(tok.is_special(i));
  }
  for (int b = 0; b < 256; ++b)
    EXPECT_EQ(tok.token(3 + b), byte_level_encode(std::string(1, static_cast<char>(b)))) << b;
  EXPECT_EQ(tok.encode("<s>hello</s>", false).front(), 0);
  const std::string text = "def total_7(left, right):\n    return left * 7 + right\n";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  EXPECT_LT(tok.encode(text).size(), text.size() * 3 / 4);
}

TEST(BpeTrain, TieBreakIsHighestCountThenSmallestPair) {
  BpeTrainOptions opt;
  opt.vocab_size = 256 + 4;
  opt.min_frequency = 1;
  // Words "xy", " ab" and " ab": ( " ", a) and (a, b) twice, (x, y) once.
  const Tokenizer tok = train_bpe(std::vector<std::string>{"xy ab ab"}, opt);
  EXPECT_EQ(tok.token(256), "Ġa");  // count 2; " " (0x20) < "a"
  EXPECT_EQ(tok.token(257), "Ġab");
  EXPECT_EQ(tok.token(258), "xy");
  EXPECT_EQ(tok.vocab_size(), 259);  // nothing left to merge
  const Json j = Json::parse(tok.to_json());
  EXPECT_EQ(j["model"]["merges"], Json::parse(R"(["Ġ a", "Ġa b", "x y"])"));
}

TEST(BpeTrain, RunsOfOneByteAndMinFrequency) {
  BpeTrainOptions opt;
  opt.vocab_size = 270;
  opt.min_frequency = 3;
  // "aaaa" twice: (a, a) counts 6, then (aa, aa) 2 < 3 stops training.
  const Tokenizer tok = train_bpe(std::vector<std::string>{"aaaa", "aaaa"}, opt);
  EXPECT_EQ(tok.vocab_size(), 257);
  EXPECT_EQ(tok.token(256), "aa");
  EXPECT_EQ(tok.encode("aaaaa"), (std::vector<int32_t>{256, 256, 'a'}));
}

TEST(BpeTrain, SpecialTokensInTextAreNotLearnt) {
  BpeTrainOptions opt;
  opt.vocab_size = 400;
  opt.special_tokens = {"<|endoftext|>"};
  std::string text;
  for (int i = 0; i < 100; ++i)
    text += "<|endoftext|>";
  const Tokenizer tok = train_bpe(std::vector<std::string>{text}, opt);
  EXPECT_EQ(tok.vocab_size(), 257);
  EXPECT_EQ(tok.encode(text), std::vector<int32_t>(100, 0));
}

TEST(BpeTrain, RejectsBadOptions) {
  const std::vector<std::string> texts = {"hello hello"};
  BpeTrainOptions opt;
  opt.special_tokens = {"<a>", "<b>"};
  opt.vocab_size = 257;
  EXPECT_THROW(train_bpe(texts, opt), Error);
  opt.vocab_size = 258;  // exactly the byte and special tokens: valid, no merges
  EXPECT_EQ(train_bpe(texts, opt).vocab_size(), 258);
  opt.vocab_size = 1000;
  for (const std::vector<std::string>& specials :
       {std::vector<std::string>{"<a>", "<a>"}, {""}, {"\xff"}, {"!"}, {"Ġ"}})
    EXPECT_THROW(
        {
          BpeTrainOptions o = opt;
          o.special_tokens = specials;
          train_bpe(texts, o);
        },
        Error)
        << Json(specials.size()).dump();
  BpeTrainOptions bad_pattern = opt;
  bad_pattern.split_pattern = "([a-";
  EXPECT_THROW(train_bpe(texts, bad_pattern), Error);
  BpeTrainOptions bad_freq = opt;
  bad_freq.min_frequency = -1;
  EXPECT_THROW(train_bpe(texts, bad_freq), Error);
}

TEST(BpeTrain, ReportsProgress) {
  BpeTrainOptions opt;
  opt.vocab_size = 320;
  std::vector<BpeTrainProgress> seen;
  opt.progress = [&](const BpeTrainProgress& p) { seen.push_back(p); };
  train_bpe(std::vector<std::string>{read_file(fixture("corpus.txt"))}, opt);
  ASSERT_GE(seen.size(), 3u);
  EXPECT_EQ(seen.front().stage, BpeTrainProgress::Stage::kCounting);
  EXPECT_EQ(seen.back().stage, BpeTrainProgress::Stage::kDone);
  EXPECT_EQ(seen.back().merges, 320 - 256);
  EXPECT_EQ(seen.back().vocab, 320);
  EXPECT_EQ(seen.back().texts, 1);
  for (size_t i = 1; i < seen.size(); ++i)
    EXPECT_GE(seen[i].merges, seen[i - 1].merges);
}

// Seeded synthetic text in the style of the built-in corpus (word problems, Python-like code),
// with a skewed vocabulary of invented words so that there are many distinct words to merge.
std::string synthetic_text(size_t bytes, uint64_t seed) {
  static const char* syllables[] = {"ka",  "lo",  "mi",  "ne", "ra", "to", "su", "vi", "an", "el", "or", "un", "ex",
                                    "pre", "con", "ing", "ed", "er", "st", "th", "qu", "ba", "de", "fo", "gi", "hu"};
  static const char* ops[] = {" + ", " - ", " * ", " // ", " == ", " <= "};
  std::mt19937_64 rng(seed);
  const auto skewed = [&](uint64_t n) {  // small values much more likely (about Zipf)
    const double u = static_cast<double>(rng() >> 11) / 9007199254740992.0;
    return static_cast<uint64_t>(static_cast<double>(n) * u * u * u);
  };
  const auto word = [&] {
    std::mt19937_64 w(skewed(20000));  // word #k is always spelled the same
    std::string out;
    for (uint64_t i = 0, n = 1 + w() % 4; i < n; ++i)
      out += syllables[w() % (sizeof(syllables) / sizeof(syllables[0]))];
    return out;
  };
  const auto num = [&] { return std::to_string(skewed(100000)); };
  std::string s;
  while (s.size() < bytes) {
    const std::string n = word(), it = word();
    s += "Question: " + n + " has " + num() + " " + it + " and " + word() + " " + num() + " more " + word() +
         ". How many " + it + " does " + n + " have?\nAnswer: " + num() + ops[rng() % 6] + num() + " = " + num() +
         ". The answer is " + num() + ".\n<|endoftext|>";
    const std::string f = word(), x = word(), y = word();
    s += "def " + f + "_" + num() + "(" + x + ", " + y + "):\n    " + f + " = " + num() + "\n    for i in range(" +
         num() + "):\n        " + f + " += " + x + "[i]" + ops[rng() % 6] + y + "\n    return " + f + "  # " + word() +
         " " + word() + "\n<|endoftext|>";
  }
  return s;
}

TEST(BpeTrain, Speed) {
  const char* env = std::getenv("UPDRAFT_BPE_BENCH");
  const double mb = env != nullptr ? std::atof(env) : 2.0;
  const std::string text = synthetic_text(static_cast<size_t>(mb * 1e6), 42);
  std::vector<std::string> texts;
  for (size_t i = 0; i < text.size(); i += 1 << 16)
    texts.push_back(text.substr(i, 1 << 16));
  BpeTrainOptions opt;
  opt.vocab_size = env != nullptr ? 8192 : 2048;
  opt.special_tokens = {"<|endoftext|>"};
  opt.split_pattern = kLlama3SplitPattern;
  double counted_at = 0;
  opt.progress = [&](const BpeTrainProgress& p) {
    if (p.stage == BpeTrainProgress::Stage::kCounting)
      counted_at = p.seconds;
  };
  const auto t0 = std::chrono::steady_clock::now();
  const Tokenizer tok = train_bpe(texts, opt);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("train_bpe: %.1f MB, vocab %lld, %.2f s (counting %.2f s): %.2f M chars/s, %u hardware threads\n",
              static_cast<double>(text.size()) / 1e6, static_cast<long long>(tok.vocab_size()), s, counted_at,
              static_cast<double>(text.size()) / s / 1e6, std::thread::hardware_concurrency());
  EXPECT_EQ(tok.decode(tok.encode(texts[0])), texts[0]);
}

}  // namespace
}  // namespace updraft
