// The request reader of rollout/serve/http.h (Boost.Beast's parser plus our checks) on
// well-formed, split, pipelined and hostile input, its limits, and a seeded mutation fuzz.
#include <gtest/gtest.h>

#include <random>

#include "rollout/serve/http.h"

namespace updraft::http {
namespace {

ParseResult parse(const std::string& s, Request* r, Limits l = {}) { return parse_request(s, l, r); }

TEST(HttpParse, ACompleteRequestWithABody) {
  const std::string s = "POST /generate?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nX-Two: a\r\nx-two: b\r\n\r\nbody";
  Request r;
  const ParseResult p = parse(s, &r);
  ASSERT_EQ(p.kind, ParseResult::kComplete) << p.reason;
  EXPECT_EQ(p.consumed, s.size());
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/generate");
  EXPECT_EQ(r.query, "x=1");
  EXPECT_EQ(r.body, "body");
  EXPECT_EQ(r.header("host"), "a");
  EXPECT_EQ(r.header("x-two"), "a, b");
  EXPECT_TRUE(r.keep_alive);
}

TEST(HttpParse, EveryPrefixIsIncompleteAndPipelinedRequestsSplit) {
  const std::string one = "POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
  const std::string two = "GET /b HTTP/1.0\r\n\r\n";
  for (size_t n = 0; n < one.size(); ++n) {
    Request r;
    EXPECT_EQ(parse(one.substr(0, n), &r).kind, ParseResult::kIncomplete) << n;
  }
  Request r;
  ParseResult p = parse(one + two, &r);
  ASSERT_EQ(p.kind, ParseResult::kComplete);
  EXPECT_EQ(p.consumed, one.size());
  EXPECT_EQ(r.body, "abc");
  p = parse(two, &r);
  ASSERT_EQ(p.kind, ParseResult::kComplete);
  EXPECT_EQ(r.path, "/b");
  EXPECT_FALSE(r.keep_alive);  // HTTP/1.0 without keep-alive
}

TEST(HttpParse, ConnectionAndExpectFields) {
  Request r;
  ASSERT_EQ(parse("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n", &r).kind, ParseResult::kComplete);
  EXPECT_FALSE(r.keep_alive);
  ASSERT_EQ(parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &r).kind, ParseResult::kComplete);
  EXPECT_TRUE(r.keep_alive);
  const ParseResult p = parse("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nab", &r);
  EXPECT_EQ(p.kind, ParseResult::kIncomplete);
  EXPECT_TRUE(p.headers_done);
  EXPECT_TRUE(r.expect_continue);
}

TEST(HttpParse, HostileInputIsRefusedWithTheRightStatus) {
  const std::pair<std::string, int> cases[] = {
      {"GET /a HTTP/2.0\r\n\r\n", 505},
      {"GET a HTTP/1.1\r\n\r\n", 400},
      {"GET  /a HTTP/1.1\r\n\r\n", 400},
      {"G(T /a HTTP/1.1\r\n\r\n", 400},
      {"GET /a\x01 HTTP/1.1\r\n\r\n", 400},
      {"GET /a HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 400},             // obsolete folding
      {"GET /a HTTP/1.1\r\nA b: c\r\n\r\n", 400},                 // name not a token
      {"GET /a HTTP/1.1\r\n: c\r\n\r\n", 400},
      {"GET /a HTTP/1.1\r\nA: b\nC: d\r\n\r\n", 400},             // bare LF
      {"POST /a HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy", 400},  // conflicting
      {"POST /a HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
      {"POST /a HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400},
      {"POST /a HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
      {"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
  };
  for (const auto& [text, status] : cases) {
    Request r;
    const ParseResult p = parse(text, &r);
    EXPECT_EQ(p.kind, ParseResult::kBad) << text;
    EXPECT_EQ(p.status, status) << text << ": " << p.reason;
  }
  // Identical repeated Content-Lengths are one value (RFC 9110 §8.6 lets a recipient take it).
  Request r;
  const ParseResult same = parse("POST /a HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", &r);
  EXPECT_EQ(same.kind, ParseResult::kComplete);
  EXPECT_EQ(r.body, "x");
}

TEST(HttpParse, LimitsAreCheckedBeforeBuffering) {
  Limits l;
  l.max_header_bytes = 64;
  l.max_body_bytes = 10;
  Request r;
  // An endless header section is refused once it passes the limit, without its end.
  ParseResult p = parse("GET /a HTTP/1.1\r\nX: " + std::string(100, 'a'), &r, l);
  EXPECT_EQ(p.kind, ParseResult::kBad);
  EXPECT_EQ(p.status, 431);
  // A body over the limit is refused from its Content-Length, before it arrives.
  p = parse("POST /a HTTP/1.1\r\nContent-Length: 11\r\n\r\n", &r, l);
  EXPECT_EQ(p.kind, ParseResult::kBad);
  EXPECT_EQ(p.status, 413);
  EXPECT_EQ(parse("POST /a HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789", &r, l).kind, ParseResult::kComplete);
}

// Mutations of valid requests: the parser never reads out of bounds (ASan/UBSan builds), never
// consumes more than it was given, and a complete parse has a body of the stated length.
TEST(HttpParse, SeededMutationFuzz) {
  const std::string seeds[] = {"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\n{\"a\":1}",
                               "GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                               "\r\n\r\nPOST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}"};
  std::mt19937 rng(1234);
  int complete = 0, bad_count = 0;
  for (int it = 0; it < 20000; ++it) {
    std::string s = seeds[static_cast<size_t>(it) % 3];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const size_t at = rng() % s.size();
      switch (rng() % 4) {
        case 0: s[at] = static_cast<char>(rng() % 256); break;
        case 1: s.erase(at, 1 + rng() % 3); break;
        case 2: s.insert(at, 1, "\r\n: 0a"[rng() % 6]); break;
        default: s = s.substr(0, at); break;
      }
    }
    Request r;
    Limits l;
    l.max_header_bytes = 96;
    const ParseResult p = parse_request(s, l, &r);
    if (p.kind == ParseResult::kComplete) {
      ++complete;
      ASSERT_LE(p.consumed, s.size());
      ASSERT_EQ(r.body.size(), r.header("content-length").empty() ? 0u : std::stoul(r.header("content-length")));
    } else if (p.kind == ParseResult::kBad) {
      ++bad_count;
      ASSERT_GE(p.status, 400);
      ASSERT_FALSE(p.reason.empty());
    }
  }
  EXPECT_GT(complete, 100);  // the fuzz reaches both outcomes
  EXPECT_GT(bad_count, 100);
}

}  // namespace
}  // namespace updraft::http
