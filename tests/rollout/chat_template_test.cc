// Chat templates (rollout/serve/chat_template.h) against PyPI jinja2: every case of
// tests/fixtures/chat_templates/cases.json (tools/make_chat_template_fixtures.py) renders to the
// same bytes, or fails where jinja2 fails; plus errors naming lines, refused constructs,
// transformers' extensions and concurrent rendering.
#include "rollout/serve/chat_template.h"

#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/core/error.h"

#ifndef UPDRAFT_SOURCE_DIR
#define UPDRAFT_SOURCE_DIR "."
#endif

namespace updraft::chat {
namespace {

using Json = nlohmann::json;

const std::string kDir = std::string(UPDRAFT_SOURCE_DIR) + "/tests/fixtures/chat_templates/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const Json& cases() {
  static const Json j = Json::parse(read_file(kDir + "cases.json"));
  return j;
}

std::string source_of(const std::string& t) {
  const bool file = t.size() > 6 && t.compare(t.size() - 6, 6, ".jinja") == 0 && t.find('{') == std::string::npos;
  return file ? read_file(kDir + t) : t;
}

// The message of the Error that rendering `source` throws ("" when it does not throw).
std::string error_of(const std::string& source, const Json& vars = Json::object()) {
  try {
    Template(source).render(vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplate, FixturesMatchJinja2) {
  ASSERT_GE(cases().size(), 40u);
  int rendered = 0, failed = 0;
  for (const Json& c : cases()) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const std::string source = source_of(c.at("template").get<std::string>());
    if (c.contains("expected")) {
      std::string got;
      try {
        got = Template(source).render(c.at("vars"));
      } catch (const std::exception& e) {
        ADD_FAILURE() << name << ": threw " << e.what();
        continue;
      }
      EXPECT_EQ(got, c.at("expected").get<std::string>())
          << name << "\n  got:  " << Json(got).dump() << "\n  want: " << c.at("expected").dump();
      ++rendered;
      continue;
    }
    const std::string what = error_of(source, c.at("vars"));
    EXPECT_FALSE(what.empty()) << name << ": rendered without an error";
    if (c.at("error").is_string()) {
      EXPECT_NE(what.find(c.at("error").get<std::string>()), std::string::npos)
          << name << ": error " << what << "\n  should contain: " << c.at("error").get<std::string>();
    }
    ++failed;
  }
  EXPECT_GT(rendered, 40);
  EXPECT_GT(failed, 20);
}

TEST(ChatTemplate, ParseErrorsNameTheLine) {
  const std::string unknown = error_of("line one\n{{ 'two' }}\n{% if x %}\n  {{ x | nope }}\n{% endif %}");
  EXPECT_NE(unknown.find("chat template line 4: unknown filter 'nope'"), std::string::npos) << unknown;

  const std::string unclosed = error_of("a\n{% for m in messages %}\n{% if m %}x{% endif %}\n");
  EXPECT_NE(unclosed.find("'{% for %}' on line 2 is not closed"), std::string::npos) << unclosed;

  const std::string mismatched = error_of("{% if a %}\n\n{% endfor %}");
  EXPECT_NE(mismatched.find("line 3: unexpected '{% endfor %}' inside '{% if %}' opened on line 1"), std::string::npos)
      << mismatched;

  const std::string syntax = error_of("\n\n{{ messages[0] + }}");
  EXPECT_NE(syntax.find("line 3: unexpected '}}'"), std::string::npos) << syntax;

  const std::string test = error_of("{% if x is frob %}{% endif %}");
  EXPECT_NE(test.find("line 1: unknown test 'frob'"), std::string::npos) << test;

  const std::string comment = error_of("a\n{# never closed");
  EXPECT_NE(comment.find("line 2: missing end of comment tag"), std::string::npos) << comment;
}

TEST(ChatTemplate, RefusedConstructsAreNamed) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"{% macro m() %}x{% endmacro %}", "'{% macro %}' is not supported"},
      {"{% call m() %}x{% endcall %}", "'{% call %}' is not supported"},
      {"{% include 'x.jinja' %}", "'{% include %}' is not supported"},
      {"{% import 'x.jinja' as x %}", "'{% import %}' is not supported"},
      {"{% extends 'base' %}", "'{% extends %}' is not supported"},
      {"{% block body %}{% endblock %}", "'{% block %}' is not supported"},
      {"{% raw %}{{ x }}{% endraw %}", "'{% raw %}' blocks are not supported"},
      {"{% for x in xs recursive %}{% endfor %}", "recursive for loops are not supported"},
      {"{% set a, b = 1, 2 %}", "assignment to several names"},
      {"{{ f(*args) }}", "*args and **kwargs"},
      {"{{ lipsum() }}", "'lipsum()' is not supported"},
      {"{{ x | wordwrap }}", "unknown filter 'wordwrap'"},
  };
  for (const auto& [source, want] : refused) {
    const std::string what = error_of(source, {{"xs", {1}}});
    EXPECT_NE(what.find(want), std::string::npos) << source << " -> " << what;
  }
}

TEST(ChatTemplate, RaiseExceptionCarriesTheMessage) {
  const std::string what = error_of("{{ raise_exception('bad role: ' ~ role) }}", {{"role", "tool"}});
  EXPECT_NE(what.find("bad role: tool"), std::string::npos) << what;
  EXPECT_EQ(what.find("chat template line"), std::string::npos) << what;  // the message, as transformers gives it
}

TEST(ChatTemplate, TransformersExtensions) {
  // {% generation %} marks assistant text for transformers' assistant masks; it renders its body.
  const Template t(
      "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
      "{% endgeneration %}{% else %}{{ m.content }}{% endif %}|{% endfor %}");
  EXPECT_EQ(t.render({{"messages", {{{"role", "user"}, {"content", "q"}}, {{"role", "assistant"}, {"content", "a"}}}}}),
            "q|a|");
  // strftime_now(fmt) formats the local time.
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  const std::string year = Template("{{ strftime_now('%Y') }}").render(Json::object());
  EXPECT_TRUE(year == std::to_string(tm.tm_year + 1900) || year == std::to_string(tm.tm_year + 1901)) << year;
  EXPECT_EQ(Template("{{ strftime_now('%d %b %Y') | length }}").render(Json::object()), "11");
}

TEST(ChatTemplate, VariablesMustBeAnObject) {
  const Template t("x");
  EXPECT_EQ(t.render(Json()), "x");  // null: no variables
  EXPECT_THROW(t.render(Json::array({1})), Error);
}

TEST(ChatTemplate, HostileInputFailsCleanly) {
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nested too deeply"),
            std::string::npos);
  std::string deep_blocks, long_chain = "{{ 1";
  for (int i = 0; i < 5000; ++i)
    deep_blocks += "{% if true %}", long_chain += " + 1";
  EXPECT_NE(error_of(deep_blocks).find("nested too deeply"), std::string::npos);
  EXPECT_NE(error_of(long_chain + " }}").find("nested too deeply"), std::string::npos);
  std::string filters = "{{ x";
  for (int i = 0; i < 5000; ++i)
    filters += " | trim";
  EXPECT_NE(error_of(filters + " }}").find("nested too deeply"), std::string::npos);
  std::string ok_chain = "{{ 0";
  for (int i = 0; i < 200; ++i)
    ok_chain += " + 1";
  EXPECT_EQ(Template(ok_chain + " }}").render(Json::object()), "200");
  EXPECT_NE(error_of("{{ range(1000000) | length }}").find("limited to 100000"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000000 }}").find("too large"), std::string::npos);
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ abc").find("unclosed expression"), std::string::npos);
  EXPECT_NE(error_of("{{ 'abc }}").find("unterminated string"), std::string::npos);
}

TEST(ChatTemplate, ConcurrentRendersAgree) {
  const Template t(read_file(kDir + "chatml_qwen.jinja"));
  Json vars = {{"add_generation_prompt", true}, {"messages", Json::array()}};
  for (int i = 0; i < 20; ++i)
    vars["messages"].push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "turn " + std::to_string(i)}});
  const std::string want = t.render(vars);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(8, 0);
  for (int k = 0; k < 8; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 50; ++i)
        mismatches[k] += t.render(vars) != want;
    });
  for (std::thread& th : threads)
    th.join();
  for (int k = 0; k < 8; ++k)
    EXPECT_EQ(mismatches[k], 0);
  EXPECT_NE(want.find("<|im_start|>assistant\nturn 19<|im_end|>\n<|im_start|>assistant\n"), std::string::npos);
}

}  // namespace
}  // namespace updraft::chat
