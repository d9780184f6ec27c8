// Byte-level BPE tokenizer against the `tokenizers` package: the golden ids, decodes and
// pre-tokenizations in tests/fixtures/tokenizer/cases.json (tools/make_tokenizer_fixtures.py),
// exact round trips, saving, damaged files, long inputs and concurrent use.
#include "rollout/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
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

const Json& cases() {
  static const Json j = Json::parse(read_file(source_path("tests/fixtures/tokenizer/cases.json")));
  return j;
}

std::string fixture(const std::string& name) {
  return source_path("tests/fixtures/tokenizer/" + name);
}

// A fixture tokenizer by its name in cases.json ("<file>" or "<file>+prefix").
Tokenizer load_case(const std::string& name) {
  const size_t plus = name.find('+');
  if (plus == std::string::npos)
    return Tokenizer::load(fixture(name));
  Json j = Json::parse(read_file(fixture(name.substr(0, plus))));
  EXPECT_EQ(name.substr(plus), "+prefix");
  j["pre_tokenizer"]["add_prefix_space"] = true;
  return Tokenizer::from_json(j.dump(), name);
}

std::vector<int32_t> ids_of(const Json& j) {
  return j.get<std::vector<int32_t>>();
}

std::string printable(const std::string& s) {
  return Json(s).dump();
}

TEST(Tokenizer, FixturesCoverEveryTokenizer) {
  const Json& t = cases()["tokenizers"];
  for (const char* name : {"hf_bytelevel.json", "hf_bytelevel.json+prefix", "hf_split.json", "updraft_bpe_gpt2.json",
                           "updraft_bpe_llama3.json"})
    EXPECT_TRUE(t.contains(name)) << name;
}

TEST(Tokenizer, EncodesAsTokenizersPackage) {
  const auto strings = cases()["strings"].get<std::vector<std::string>>();
  for (const auto& [name, rec] : cases()["tokenizers"].items()) {
    const Tokenizer tok = load_case(name);
    for (size_t i = 0; i < strings.size(); ++i) {
      const std::string& s = strings[i];
      const auto ids = tok.encode(s);
      EXPECT_EQ(ids, ids_of(rec["ids"][i])) << name << " " << printable(s);
      EXPECT_EQ(tok.encode(s, /*add_special=*/true), ids_of(rec["ids_special"][i])) << name << " " << printable(s);
      EXPECT_EQ(tok.decode(ids), rec["decoded"][i].get<std::string>()) << name << " " << printable(s);
      EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), rec["decoded_skip"][i].get<std::string>())
          << name << " " << printable(s);
    }
  }
}

TEST(Tokenizer, DecodesAsTokenizersPackage) {
  // Cut UTF-8 characters, stray bytes, surrogates, unknown ids, random id sequences.
  for (const auto& [name, rec] : cases()["tokenizers"].items()) {
    const Tokenizer tok = load_case(name);
    for (const Json& c : rec["decode_cases"]) {
      EXPECT_EQ(tok.decode(ids_of(c["ids"])), c["text"].get<std::string>()) << name << " " << c["ids"].dump();
      EXPECT_EQ(tok.decode(ids_of(c["ids"]), true), c["text_skip"].get<std::string>())
          << name << " " << c["ids"].dump();
    }
  }
}

TEST(Tokenizer, SplitPatternsMatchOniguruma) {
  const auto strings = cases()["strings"].get<std::vector<std::string>>();
  const Json& patterns = cases()["patterns"];
  EXPECT_EQ(patterns["gpt2"], kGpt2SplitPattern);
  EXPECT_EQ(patterns["llama3"], kLlama3SplitPattern);
  EXPECT_EQ(patterns["qwen2"], kQwen2SplitPattern);
  for (const auto& [name, rec] : cases()["pretokenize"].items()) {
    const SplitRegex re(patterns[name].get<std::string>());
    for (size_t i = 0; i < strings.size(); ++i) {
      std::vector<std::string_view> got;
      re.split(strings[i], got);
      const auto want = rec["pieces"][i].get<std::vector<std::string>>();
      EXPECT_EQ(std::vector<std::string>(got.begin(), got.end()), want) << name << " " << printable(strings[i]);
    }
  }
}

// Random valid UTF-8: ASCII-heavy, with whitespace runs, 2/3/4-byte characters and specials.
std::string random_text(std::mt19937_64& rng, size_t chars) {
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

TEST(Tokenizer, DecodeOfEncodeIsIdentity) {
  const auto strings = cases()["strings"].get<std::vector<std::string>>();
  std::mt19937_64 rng(11);
  std::vector<std::string> texts = strings;
  for (int i = 0; i < 200; ++i)
    texts.push_back(random_text(rng, 1 + rng() % 80));
  // hf_bytelevel.json is left out: its lstrip/rstrip added tokens swallow spaces by design.
  for (const char* name : {"hf_split.json", "updraft_bpe_gpt2.json", "updraft_bpe_llama3.json"}) {
    const Tokenizer tok = Tokenizer::load(fixture(name));
    for (const std::string& s : texts)
      EXPECT_EQ(tok.decode(tok.encode(s)), s) << name << " " << printable(s);
  }
}

TEST(Tokenizer, InvalidUtf8IsEncodedByteByByte) {
  const Tokenizer tok = Tokenizer::load(fixture("hf_split.json"));
  const std::string bad = "ok \xff\xfe broken \xe2\x82 tail \xc3";
  const auto ids = tok.encode(bad);
  std::string bytes, b;
  for (int32_t id : ids) {
    ASSERT_TRUE(byte_level_decode(tok.token(id), b)) << tok.token(id);
    bytes += b;
  }
  EXPECT_EQ(bytes, bad);
  EXPECT_EQ(tok.decode(ids), "ok \xEF\xBF\xBD\xEF\xBF\xBD broken \xEF\xBF\xBD tail \xEF\xBF\xBD");
}

TEST(Tokenizer, Vocabulary) {
  const Tokenizer tok = Tokenizer::load(fixture("hf_bytelevel.json"));
  EXPECT_EQ(tok.vocab_size(), 503);
  EXPECT_EQ(tok.token_id("<|endoftext|>"), 0);
  EXPECT_EQ(tok.token(0), "<|endoftext|>");
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_EQ(tok.token_id("dragon"), 502);
  EXPECT_FALSE(tok.is_special(502));
  EXPECT_EQ(tok.token_id("Ġ"), tok.encode(" ")[0]);
  EXPECT_EQ(tok.token(tok.token_id("Ġ")), "Ġ");
  EXPECT_EQ(tok.token_id("no such token"), -1);
  EXPECT_EQ(tok.token(-1), "");
  EXPECT_EQ(tok.token(503), "");
  EXPECT_EQ(byte_level_encode(" \n!\xff"), "ĠĊ!ÿ");
}

TEST(Tokenizer, PreTokenizeLeavesOutAddedTokens) {
  const Tokenizer tok = Tokenizer::load(fixture("hf_split.json"));
  EXPECT_EQ(tok.pre_tokenize("Hi there<|eot_id|>x=12345"),
            (std::vector<std::string>{"Hi", " there", "x", "=", "123", "45"}));
}

TEST(Tokenizer, SaveLoadRoundTrip) {
  const auto strings = cases()["strings"].get<std::vector<std::string>>();
  const std::string dir = testing::TempDir() + "/tokenizer_roundtrip";
  std::filesystem::create_directories(dir);
  for (const char* name : {"hf_bytelevel.json", "hf_split.json", "updraft_bpe_llama3.json"}) {
    const Tokenizer a = Tokenizer::load(fixture(name));
    a.save(dir + "/tokenizer.json");
    const Tokenizer b = Tokenizer::load(dir);  // a directory holding tokenizer.json
    EXPECT_EQ(b.to_json(), a.to_json()) << name;
    EXPECT_EQ(b.vocab_size(), a.vocab_size()) << name;
    for (const std::string& s : strings) {
      EXPECT_EQ(b.encode(s), a.encode(s)) << name << " " << printable(s);
      EXPECT_EQ(b.encode(s, true), a.encode(s, true)) << name << " " << printable(s);
    }
  }
}

TEST(Tokenizer, MergesAsStringsOrPairsAreEqual) {
  Json j = Json::parse(read_file(fixture("hf_split.json")));
  ASSERT_TRUE(j["model"]["merges"][0].is_array());
  const Tokenizer pairs = Tokenizer::from_json(j.dump(), "pairs");
  for (Json& m : j["model"]["merges"])
    m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  const Tokenizer strings = Tokenizer::from_json(j.dump(), "strings");
  EXPECT_EQ(pairs.to_json(), strings.to_json());
}

// Each case damages hf_split.json in one way; loading must throw Error naming the file and the
// problem.
TEST(Tokenizer, RejectsBadFiles) {
  const Json good = Json::parse(read_file(fixture("hf_split.json")));
  struct Case {
    const char* what;
    std::function<void(Json&)> damage;
    const char* message;
  };
  const std::vector<Case> damaged = {
      {"unigram", [](Json& j) { j["model"]["type"] = "Unigram"; }, "model type"},
      {"wordpiece",
       [](Json& j) {
         j["model"] = {{"type", "WordPiece"}, {"vocab", Json::object()}};
       },
       "model type"},
      {"no model", [](Json& j) { j.erase("model"); }, "model"},
      {"unknown merge token",
       [](Json& j) {
         j["model"]["merges"].push_back({"Ġ", "nosuch"});
       },
       "not in the vocab"},
      {"merge of unknown result",
       [](Json& j) {
         j["model"]["merges"].push_back({"é", "é"});
       },
       "not in the vocab"},
      {"merge without space", [](Json& j) { j["model"]["merges"].push_back("Ġa"); }, "merge #"},
      {"merge of numbers",
       [](Json& j) {
         j["model"]["merges"].push_back({1, 2});
       },
       "merge #"},
      {"vocab id negative", [](Json& j) { j["model"]["vocab"]["zzz"] = -4; }, "id"},
      {"vocab id string", [](Json& j) { j["model"]["vocab"]["zzz"] = "7"; }, "id"},
      {"vocab id huge", [](Json& j) { j["model"]["vocab"]["zzz"] = int64_t{1} << 40; }, "id"},
      {"vocab not object", [](Json& j) { j["model"]["vocab"] = Json::array(); }, "vocab"},
      {"dropout", [](Json& j) { j["model"]["dropout"] = 0.1; }, "dropout"},
      {"byte fallback", [](Json& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback"},
      {"subword prefix", [](Json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, "continuing_subword_prefix"},
      {"metaspace",
       [](Json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       "Metaspace"},
      {"no pre_tokenizer", [](Json& j) { j["pre_tokenizer"] = nullptr; }, "pre_tokenizer"},
      {"split removed", [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }, "behavior"},
      {"split inverted", [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; }, "invert"},
      {"bad regex", [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(ab"; }, "(ab"},
      {"byte level first",
       [](Json& j) {
         auto& p = j["pre_tokenizer"]["pretokenizers"];
         std::swap(p[0], p[1]);
       },
       "ByteLevel"},
      {"lowercase",
       [](Json& j) {
         j["normalizer"] = {{"type", "Lowercase"}};
       },
       "normalizer"},
      {"wordpiece decoder",
       [](Json& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       "decoder"},
      {"unknown post_processor",
       [](Json& j) {
         j["post_processor"] = {{"type", "Magic"}};
       },
       "post_processor"},
      {"template without A", [](Json& j) { j["post_processor"]["single"].erase(1); }, "sequence A"},
      {"added token without content",
       [](Json& j) {
         j["added_tokens"].push_back({{"id", 9}});
       },
       "content"},
      {"added token bad flag", [](Json& j) { j["added_tokens"][0]["special"] = "yes"; }, "special"},
      {"not an object", [](Json& j) { j = Json::array(); }, "not a JSON object"},
  };
  for (const Case& c : damaged) {
    Json j = good;
    c.damage(j);
    try {
      Tokenizer::from_json(j.dump(), "damaged.json");
      ADD_FAILURE() << c.what << ": loaded";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("damaged.json"), std::string::npos) << c.what << ": " << msg;
      EXPECT_NE(msg.find(c.message), std::string::npos) << c.what << ": " << msg;
    }
  }
  for (const char* text : {"", "{", "{\"model\": ", "\xff\xfe", "[1, 2", "null"})
    EXPECT_THROW(Tokenizer::from_json(text, "broken.json"), Error) << printable(text);
  EXPECT_THROW(Tokenizer::load(testing::TempDir() + "/no/such/tokenizer.json"), Error);
  EXPECT_THROW(Tokenizer::load(testing::TempDir() + "/no_such_dir_for_tokenizer"), Error);
}

// Random damage anywhere in the document: loading either works or throws Error, and whatever
// loads can encode and decode.
TEST(Tokenizer, DamagedDocumentsNeverCrash) {
  const Json good = Json::parse(read_file(fixture("hf_bytelevel.json")));
  std::vector<Json::json_pointer> paths;
  const std::function<void(const Json&, const Json::json_pointer&)> walk = [&](const Json& j,
                                                                               const Json::json_pointer& at) {
    paths.push_back(at);
    int n = 0;
    if (j.is_object())
      for (const auto& [k, v] : j.items())
        if (n++ < 6)
          walk(v, at / k);
    if (j.is_array())
      for (size_t i = 0; i < j.size() && i < 6; ++i)
        walk(j[i], at / i);
  };
  walk(good, Json::json_pointer());
  const std::vector<Json> values = {nullptr,
                                    -1,
                                    0,
                                    3,
                                    1e30,
                                    "x",
                                    "",
                                    "Ġ",
                                    true,
                                    Json::array(),
                                    Json::object(),
                                    Json::array({"a", "b"}),
                                    Json::object({{"type", "ByteLevel"}})};
  std::mt19937_64 rng(3);
  int loaded = 0;
  for (int iter = 0; iter < 600; ++iter) {
    Json j = good;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) {
      const auto& path = paths[rng() % paths.size()];
      if (path.empty())
        continue;
      if (!j.contains(path))
        continue;
      Json& parent = j.at(path.parent_pointer());
      if (rng() % 4 != 0)
        j.at(path) = values[rng() % values.size()];
      else if (parent.is_object())
        parent.erase(path.back());
      else
        parent.erase(std::stoul(path.back()));
    }
    try {
      const Tokenizer tok = Tokenizer::from_json(j.dump(), "fuzzed.json");
      ++loaded;
      const auto ids = tok.encode("Hello [MASK] <tool> world 123 é😀", true);
      (void)tok.decode(ids, true);
      (void)tok.to_json();
    } catch (const Error&) {
    }
  }
  EXPECT_GT(loaded, 0);
}

TEST(Tokenizer, LongInputs) {
  const Tokenizer tok = Tokenizer::load(fixture("updraft_bpe_gpt2.json"));
  for (const std::string& s : {std::string(200000, 'a'), std::string(200000, ' '), std::string(100000, '9'),
                               std::string(50000, '\n') + "x", std::string(30000, '<')}) {
    EXPECT_EQ(tok.decode(tok.encode(s)), s);
  }
  // (Words over 96 bytes take the heap merge path; "a" * 300 in cases.json checks it against HF.)
}

TEST(Tokenizer, EncodeThroughput) {
  const Tokenizer tok = Tokenizer::load(fixture("updraft_bpe_llama3.json"));
  const std::string corpus = read_file(fixture("corpus.txt"));
  std::string text;
  while (text.size() < (4u << 20))
    text += corpus;
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("encode: %zu bytes -> %zu tokens in %.3f s (%.1f MB/s)\n", text.size(), ids.size(), s,
              static_cast<double>(text.size()) / s / 1e6);
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(Tokenizer, ConcurrentEncodeGivesTheSameIds) {
  const Tokenizer tok = Tokenizer::load(fixture("hf_split.json"));
  std::mt19937_64 rng(5);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i)
    texts.push_back(random_text(rng, 400));
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : texts)
    want.push_back(tok.encode(t));
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round)
        for (size_t i = 0; i < texts.size(); ++i)
          bad[t] += tok.encode(texts[(i + t) % texts.size()]) != want[(i + t) % texts.size()];
    });
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace updraft
