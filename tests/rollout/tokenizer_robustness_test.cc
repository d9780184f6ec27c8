// Byte-level BPE tokenizer under stress: files damaged one way at a time and at random (loading
// throws Error or works, never crashes), long inputs, encode throughput and concurrent use of
// one tokenizer. The comparisons against the `tokenizers` package are in tokenizer_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/core/error.h"
#include "rollout/tokenizer.h"
#include "tests/rollout/tokenizer_fixture.h"

namespace updraft {
namespace {

using Json = nlohmann::json;
using testing_tokenizer::fixture;
using testing_tokenizer::printable;
using testing_tokenizer::random_text;
using testing_tokenizer::read_file;

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
