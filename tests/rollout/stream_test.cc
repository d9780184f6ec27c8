// Streaming (rollout/serve/stream.h) through the rollout service, each API in its own format:
//  - /generate: events carry each request's output so far (prefixes of the final ids), the last
//    event per request is the non-streamed result, then [DONE];
//  - /v1/completions and /v1/chat/completions: each choice's chunks put together are the
//    non-streamed text (with a stop string: never a byte of the match), chat's first chunk
//    carries the role, the last the finish reason, include_usage adds the usage;
//  - a client that goes away aborts its requests;
//  - TextDelta sends only whole UTF-8 characters.
#include "rollout/serve/stream.h"

#include <gtest/gtest.h>

#include <map>

#include "tests/rollout/service_fixture.h"

namespace updraft {
namespace {

using namespace testing_online;
using namespace testing_service;
using nlohmann::json;

// The events of a streamed response, in order ([DONE] as the string "[DONE]"); with `budget`,
// the writer reports the client gone after that many writes.
std::vector<json> collect(const http::Response& r, int budget = -1) {
  EXPECT_TRUE(static_cast<bool>(r.stream)) << r.body;
  EXPECT_EQ(r.content_type, "text/event-stream");
  std::string bytes;
  int writes = 0;
  r.stream([&](std::string_view piece) {
    if (budget >= 0 && writes++ >= budget)
      return false;
    bytes += piece;
    return true;
  });
  std::vector<json> events;
  for (size_t at = 0; (at = bytes.find("data: ", at)) != std::string::npos;) {
    const size_t end = bytes.find("\n\n", at);
    const std::string data = bytes.substr(at + 6, end - at - 6);
    events.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
    at = end + 2;
  }
  return events;
}

http::Response post(Bed& b, const std::string& path, const json& body) {
  return b.raw("POST", path, body.dump());
}

TEST(Stream, GenerateSendsGrowingOutputsThenTheResults) {
  Bed b(int64_t{64} << 20, 4096, fixture_tokenizer());
  json body = {{"input_ids", {prompts(2, 3)[0], prompts(2, 3)[1]}},
               {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 12}, {"ignore_eos", true}}}};
  const json whole = b.call("POST", "/generate", body).second;
  body["stream"] = true;
  const std::vector<json> ev = collect(post(b, "/generate", body));
  ASSERT_GE(ev.size(), 4u);
  EXPECT_EQ(ev.back(), "[DONE]");
  std::map<int, json> last;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    const int k = ev[i]["index"];
    const auto ids = ev[i]["output_ids"].get<std::vector<int32_t>>();
    const auto want = whole[k]["output_ids"].get<std::vector<int32_t>>();
    ASSERT_LE(ids.size(), want.size());
    EXPECT_TRUE(std::equal(ids.begin(), ids.end(), want.begin())) << "event " << i << " is not a prefix";
    last[k] = ev[i];
  }
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(last[k]["output_ids"], whole[k]["output_ids"]);
    EXPECT_EQ(last[k]["text"], whole[k]["text"]);
    EXPECT_EQ(last[k]["meta_info"]["finish_reason"], whole[k]["meta_info"]["finish_reason"]);
  }
}

// Each choice's text put together from its chunks, the finish reasons, and the usage chunk.
struct OpenAiStream {
  std::map<int, std::string> text;
  std::map<int, json> finish;
  std::map<int, int> role_chunks;
  json usage;
};

OpenAiStream assemble(const std::vector<json>& ev, bool chat) {
  OpenAiStream s;
  EXPECT_EQ(ev.back(), "[DONE]");
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    EXPECT_EQ(ev[i]["object"], chat ? "chat.completion.chunk" : "text_completion");
    if (ev[i]["choices"].empty()) {
      s.usage = ev[i]["usage"];
      continue;
    }
    const json& c = ev[i]["choices"][0];
    const int k = c["index"];
    EXPECT_FALSE(s.finish.count(k)) << "a chunk after the finish of choice " << k;
    s.text[k] += chat ? c["delta"].value("content", "") : c["text"].get<std::string>();
    if (chat && c["delta"].contains("role"))
      ++s.role_chunks[k];
    if (!c["finish_reason"].is_null())
      s.finish[k] = c["finish_reason"];
  }
  return s;
}

TEST(Stream, OpenAiChunksAddUpToTheTextAndNeverShowAStopMatch) {
  Bed b(int64_t{64} << 20, 4096, fixture_tokenizer());
  const std::vector<int32_t> prompt = prompts(1, 6)[0];
  json body = {{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0.8}, {"seed", 9}, {"n", 2}};
  const json whole = b.call("POST", "/v1/completions", body).second;
  // A stop string from the middle of choice 0's text: its bytes must never be streamed.
  const std::string t0 = whole["choices"][0]["text"];
  ASSERT_GE(t0.size(), 6u) << whole;
  const std::string stop = t0.substr(t0.size() / 2, 2);
  body["stop"] = stop;
  const json stopped = b.call("POST", "/v1/completions", body).second;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const OpenAiStream s = assemble(collect(post(b, "/v1/completions", body)), false);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(s.text.at(k), stopped["choices"][k]["text"]) << "choice " << k;
    EXPECT_EQ(s.finish.at(k), stopped["choices"][k]["finish_reason"]);
  }
  EXPECT_EQ(s.text.at(0).find(stop), std::string::npos);
  EXPECT_EQ(s.usage["completion_tokens"], stopped["usage"]["completion_tokens"]);
}

TEST(Stream, ChatChunksCarryTheRoleFirstAndAddUpToTheMessage) {
  auto tok = fixture_tokenizer();
  Bed b(int64_t{64} << 20, 4096, tok, ChatSetup{"{% for m in messages %}{{ m['content'] }}{% endfor %}", "", ""});
  json body = {{"messages", json::array({{{"role", "user"}, {"content", "!#$"}}})},
               {"max_tokens", 10},
               {"temperature", 0}};
  const json whole = b.call("POST", "/v1/chat/completions", body).second;
  ASSERT_TRUE(whole.contains("choices")) << whole;
  body["stream"] = true;
  const OpenAiStream s = assemble(collect(post(b, "/v1/chat/completions", body)), true);
  EXPECT_EQ(s.text.at(0), whole["choices"][0]["message"]["content"]);
  EXPECT_EQ(s.role_chunks.at(0), 1);
  EXPECT_EQ(s.finish.at(0), whole["choices"][0]["finish_reason"]);
}

TEST(Stream, AClientThatGoesAwayAbortsItsRequests) {
  Bed b;
  const json body = {{"input_ids", prompts(1, 4)[0]},
                     {"stream", true},
                     {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 100}, {"ignore_eos", true}}}};
  const std::vector<json> ev = collect(post(b, "/generate", body), 1);
  EXPECT_EQ(ev.size(), 1u);
  EXPECT_EQ(b.service->stats().aborted, 1);
  EXPECT_EQ(b.service->stats().inflight_prompts, 0);
  EXPECT_LT(b.service->stats().generated_tokens, 100) << "it ran to the end";
}

TEST(Stream, TextDeltaSendsWholeCharactersOnly) {
  auto tok = fixture_tokenizer();
  const std::string text = "a\xC3\xA9z";  // 'a', U+00E9 in two bytes, 'z'
  const std::vector<int32_t> ids = tok->encode(text);
  TextDelta d(tok, true);
  std::string sent;
  std::vector<int32_t> so_far;
  for (int32_t id : ids) {
    so_far.push_back(id);
    const std::string piece = d.next(so_far);
    EXPECT_EQ(utf8_lossy(piece), piece) << "a partial character was sent";
    sent += piece;
  }
  EXPECT_EQ(sent, text);
  TextDelta held(tok, true, {"zq", "\xC3\xA9z!"});
  EXPECT_EQ(held.next(ids), "a") << "an ending that may become a stop string is held back";
  EXPECT_EQ(held.rest(text), "\xC3\xA9z");
  TextDelta cut(tok, true, {"\xC3\xA9"});
  EXPECT_EQ(cut.next(ids), "a") << "nothing from a stop string on";
}

}  // namespace
}  // namespace updraft
