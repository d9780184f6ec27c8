// Stop strings (rollout/serve/stop_strings.h) and the sampling fields implemented through the
// logit processors, end to end through the rollout service:
//  - StopMatcher: a string spanning token boundaries stops at the token that completes it, the
//    earliest completed occurrence wins, occurrences within min_new_tokens do not stop, the text
//    is cut before the match (or kept whole with no_stop_trim);
//  - /generate and /v1/completions on a speculating worker: greedy output equals plain decoding's
//    cut at the stop, finish_reason names the matched string; penalties and min_new_tokens give
//    plain decoding's tokens for the same parameters; bad values are refused by name.
#include "rollout/serve/stop_strings.h"

#include <gtest/gtest.h>

#include <cmath>

#include "rollout/tokenizer.h"
#include "tests/fixture_util.h"
#include "tests/rollout/service_fixture.h"

namespace updraft {
namespace {

using namespace testing_online;
using namespace testing_service;
using nlohmann::json;

// Feeds `ids` one token at a time; the number of tokens at which it matched (0: never).
size_t feed(StopMatcher& m, const std::vector<int32_t>& ids) {
  std::vector<int32_t> out;
  for (int32_t id : ids) {
    out.push_back(id);
    if (m(out) >= 0)
      return out.size();
  }
  return 0;
}

TEST(StopStrings, MatchAcrossTokenBoundariesAtTheCompletingToken) {
  auto tok = fixture_tokenizer();
  const std::vector<int32_t> ids = tok->encode("def f(x):\n    return x + 1\n\nprint(f(2))");
  ASSERT_GT(ids.size(), 8u);
  // A stop string made of the last byte of one token and the first of the next.
  size_t k = 3;
  while (tok->decode_bytes({ids[k]}).empty() || tok->decode_bytes({ids[k + 1]}).empty())
    ++k;
  const std::string a = tok->decode_bytes({ids[k]}), b = tok->decode_bytes({ids[k + 1]});
  const std::string stop = a.substr(a.size() - 1) + b.substr(0, 1);
  const std::string prefix = tok->decode_bytes({ids.begin(), ids.begin() + static_cast<long>(k) + 1});
  ASSERT_EQ(prefix.find(stop), std::string::npos) << "pick a boundary string that does not occur earlier";
  StopMatcher m(tok, {"never", stop}, true, 0);
  EXPECT_EQ(feed(m, ids), k + 2);
  EXPECT_EQ(m.matched(), 1);
  EXPECT_EQ(m.text(false), prefix.substr(0, prefix.size() - 1));
  EXPECT_EQ(m.text(true), tok->decode({ids.begin(), ids.begin() + static_cast<long>(k) + 2}));
}

TEST(StopStrings, EarliestOccurrenceWinsAndMinNewTokensHoldsStopsBack) {
  auto tok = fixture_tokenizer();
  const std::vector<int32_t> ids = tok->encode("ab ab cd ab");
  StopMatcher first(tok, {"cd", "ab"}, true, 0);
  EXPECT_GT(feed(first, ids), 0u);
  EXPECT_EQ(first.matched(), 1) << "\"ab\" completes first";
  EXPECT_EQ(first.text(false), "");
  // With min_new_tokens covering the first "ab", the next occurrence stops it.
  const size_t first_len = tok->encode("ab").size();
  StopMatcher held(tok, {"ab"}, true, static_cast<int64_t>(first_len));
  const size_t at = feed(held, ids);
  EXPECT_GT(at, first_len);
  EXPECT_EQ(held.text(false), "ab ");
  StopMatcher none(tok, {"zz"}, true, 0);
  EXPECT_EQ(feed(none, ids), 0u);
  EXPECT_EQ(none.text(false), "ab ab cd ab") << "no match: the whole text";
  EXPECT_THROW(StopMatcher(tok, {""}, true, 0), Error);
  EXPECT_THROW(StopMatcher(nullptr, {"x"}, true, 0), Error);
}

std::vector<int32_t> plain(const PolicyModel& policy, const std::vector<int32_t>& prompt, const SamplingParams& p) {
  Engine e(policy);
  GenRequest r;
  r.prompt = prompt;
  r.params = p;
  e.submit(r);
  return e.run().at(0).tokens;
}

TEST(StopStrings, GenerateAndCompletionsStopOnStringsAndApplyPenaltiesLosslessly) {
  auto tok = fixture_tokenizer();
  Bed b(int64_t{64} << 20, 4096, tok);
  const std::vector<int32_t> prompt = prompts(1, 6)[0];
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_new_tokens = 24;
  greedy.ignore_eos = true;
  const std::vector<int32_t> want = plain(*b.policy, prompt, greedy);
  // A stop string from the middle of the plain output: its last two bytes.
  size_t n = 6;
  while (tok->decode_bytes({want.begin(), want.begin() + static_cast<long>(n)}, true).size() < 2)
    ++n;
  const std::string upto = tok->decode_bytes({want.begin(), want.begin() + static_cast<long>(n)}, true);
  const std::string stop = upto.substr(upto.size() - 2);
  json sp = {{"temperature", 0}, {"max_new_tokens", 24}, {"ignore_eos", true}, {"stop", stop}};
  auto [s, out] = b.call("POST", "/generate", {{"input_ids", prompt}, {"sampling_params", sp}});
  ASSERT_EQ(s, 200) << out;
  const std::vector<int32_t> got = out["output_ids"].get<std::vector<int32_t>>();
  ASSERT_LE(got.size(), n) << "want " << json(want).dump() << ", stop \"" << stop << "\"";
  EXPECT_EQ(got, std::vector<int32_t>(want.begin(), want.begin() + static_cast<long>(got.size())));
  EXPECT_NE(tok->decode_bytes(got, true).find(stop), std::string::npos);
  EXPECT_EQ(tok->decode_bytes({got.begin(), got.end() - 1}, true).find(stop), std::string::npos) << "stopped late";
  EXPECT_EQ(out["meta_info"]["finish_reason"], json({{"type", "stop"}, {"matched", stop}}));
  const std::string text = out["text"];
  EXPECT_EQ(text + stop, tok->decode(got, true).substr(0, text.size() + stop.size()));

  std::tie(s, out) = b.call("POST", "/v1/completions", {{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0},
                                                        {"stop", {"\x01unused", stop}}});
  ASSERT_EQ(s, 200) << out;
  EXPECT_EQ(out["choices"][0]["token_ids"].get<std::vector<int32_t>>(), got);
  EXPECT_EQ(out["choices"][0]["text"], text);
  EXPECT_EQ(out["choices"][0]["finish_reason"], "stop");

  // Penalties and min_new_tokens through the API equal plain decoding with the same values.
  SamplingParams pen = greedy;
  pen.repetition_penalty = 1.3f;
  pen.frequency_penalty = 0.4f;
  pen.presence_penalty = 0.2f;
  pen.min_new_tokens = 5;
  pen.stop_token_ids = {want[0]};
  sp = {{"temperature", 0},        {"max_new_tokens", 24},      {"ignore_eos", true},
        {"repetition_penalty", 1.3}, {"frequency_penalty", 0.4}, {"presence_penalty", 0.2},
        {"min_new_tokens", 5},     {"stop_token_ids", {want[0]}}};
  std::tie(s, out) = b.call("POST", "/generate", {{"input_ids", prompt}, {"sampling_params", sp}});
  ASSERT_EQ(s, 200) << out;
  EXPECT_EQ(out["output_ids"].get<std::vector<int32_t>>(), plain(*b.policy, prompt, pen));
  EXPECT_NE(out["output_ids"].get<std::vector<int32_t>>(), want) << "the penalties changed nothing";

  // Out-of-range values are refused by name, nothing generated.
  const int64_t steps = b.worker->metrics().steps;
  for (const auto& [field, value, says] :
       std::vector<std::tuple<std::string, json, std::string>>{{"repetition_penalty", 0, "repetition_penalty must be"},
                                                               {"frequency_penalty", 3, "frequency_penalty must be"},
                                                               {"min_p", 1.5, "min_p must be"},
                                                               {"min_new_tokens", -1, "min_new_tokens"},
                                                               {"stop", {""}, "non-empty strings"}}) {
    std::tie(s, out) = b.call("POST", "/generate",
                              {{"input_ids", prompt}, {"sampling_params", {{field, value}, {"max_new_tokens", 4}}}});
    EXPECT_EQ(s, 400) << field;
    EXPECT_NE(out["error"]["message"].get<std::string>().find(says), std::string::npos) << field << ": " << out;
  }
  EXPECT_EQ(b.worker->metrics().steps, steps);
}

TEST(StopStrings, AServerWithoutATokenizerRefusesStopStrings) {
  Bed b;
  const auto [s, out] =
      b.call("POST", "/generate", {{"input_ids", {1, 2, 3}}, {"sampling_params", {{"stop", {"\n"}}}}});
  EXPECT_EQ(s, 400);
  EXPECT_NE(out["error"]["message"].get<std::string>().find("stop strings need the model's tokenizer.json"),
            std::string::npos)
      << out;
}

// Top logprobs through both APIs: the k most likely tokens of each output token's distribution
// (for a sampled request, the filtered sampling distribution), most likely first, the sampled
// token's own logprob among them when it is in the top k.
TEST(StopStrings, TopLogprobsThroughBothApis) {
  auto tok = fixture_tokenizer();
  Bed b(int64_t{64} << 20, 4096, tok);
  const std::vector<int32_t> prompt = prompts(1, 6)[0];
  auto [s, out] = b.call("POST", "/generate",
                         {{"input_ids", prompt},
                          {"return_logprob", true},
                          {"top_logprobs_num", 3},
                          {"return_text_in_logprobs", true},
                          {"sampling_params", {{"temperature", 0.7}, {"top_k", 5}, {"max_new_tokens", 8},
                                               {"ignore_eos", true}, {"sampling_seed", 3}}}});
  ASSERT_EQ(s, 200) << out;
  const json& tokens = out["meta_info"]["output_token_logprobs"];
  const json& top = out["meta_info"]["output_top_logprobs"];
  ASSERT_EQ(top.size(), tokens.size());
  for (size_t t = 0; t < top.size(); ++t) {
    ASSERT_EQ(top[t].size(), 3u) << top[t];
    double total = 0;
    bool has_sampled = false;
    for (size_t m = 0; m < 3; ++m) {
      total += std::exp(top[t][m][0].get<double>());
      EXPECT_EQ(top[t][m][2], tok->decode({top[t][m][1].get<int32_t>()}, false));
      if (m > 0) {
        EXPECT_LE(top[t][m][0].get<double>(), top[t][m - 1][0].get<double>());
      }
      if (top[t][m][1] == tokens[t][1]) {
        has_sampled = true;
        EXPECT_NEAR(top[t][m][0].get<double>(), tokens[t][0].get<double>(), 1e-6);
      }
    }
    EXPECT_LE(total, 1.0 + 1e-5);
    if (tokens[t][0].get<double>() > top[t][2][0].get<double>() + 1e-6) {
      EXPECT_TRUE(has_sampled) << "a token more likely than the third is listed";
    }
  }
  // Input logprobs from logprob_start_len: the prompt's tokens from there, the first one null.
  std::tie(s, out) = b.call("POST", "/generate",
                            {{"input_ids", prompt},
                             {"return_logprob", true},
                             {"logprob_start_len", 0},
                             {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 2}}}});
  ASSERT_EQ(s, 200) << out;
  const json& in = out["meta_info"]["input_token_logprobs"];
  ASSERT_EQ(in.size(), prompt.size());
  EXPECT_TRUE(in[0][0].is_null());
  for (size_t t = 0; t < prompt.size(); ++t) {
    EXPECT_EQ(in[t][1], prompt[t]);
    if (t > 0) {
      EXPECT_LE(in[t][0].get<double>(), 0.0);
    }
  }
  std::tie(s, out) =
      b.call("POST", "/v1/completions", {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 2}});
  ASSERT_EQ(s, 200) << out;
  const json& lp = out["choices"][0]["logprobs"];
  ASSERT_EQ(lp["top_logprobs"].size(), lp["tokens"].size());
  for (size_t t = 0; t < lp["tokens"].size(); ++t) {
    EXPECT_LE(lp["top_logprobs"][t].size(), 2u);
    EXPECT_NEAR(lp["top_logprobs"][t][lp["tokens"][t].get<std::string>()].get<double>(),
                lp["token_logprobs"][t].get<double>(), 1e-6)
        << "greedy: the chosen token is the most likely";
  }
}

}  // namespace
}  // namespace updraft
