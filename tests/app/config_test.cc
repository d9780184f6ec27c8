#include "app/config.h"

#include <gtest/gtest.h>

#include "kernels/core/error.h"

namespace updraft {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ReadsTypedValuesWithDefaults) {
  Config c =
      Config::parse("worker:\n  batch_size: 16\n  temperature: 0.7\n  spec: true\n  layers: [2, 8, 13]\n", "t.yaml");
  Config w = c.section("worker");
  EXPECT_EQ(w.get_int("batch_size", 1), 16);
  EXPECT_DOUBLE_EQ(w.get_double("temperature", 1.0), 0.7);
  EXPECT_TRUE(w.get_bool("spec", false));
  EXPECT_EQ(w.get_int_list("layers", {}), (std::vector<int64_t>{2, 8, 13}));
  EXPECT_EQ(w.get_int("missing", 5), 5);
  EXPECT_EQ(c.section("absent").get_string("x", "d"), "d");
}

TEST(Config, ErrorsNameFileKeyAndExpectation) {
  Config c = Config::parse("worker:\n  batch_size: sixteen\n  layers: [1, x]\n", "serve.yaml");
  Config w = c.section("worker");
  EXPECT_NE(error_of([&] {
              w.get_int("batch_size", 1);
            }).find("serve.yaml: worker.batch_size: expected an integer, got \"sixteen\""),
            std::string::npos);
  EXPECT_NE(error_of([&] { w.get_int_list("layers", {}); }).find("worker.layers[1]"), std::string::npos);
  EXPECT_NE(error_of([&] { w.require_string("model"); }).find("worker.model: required key is missing"),
            std::string::npos);
}

TEST(Config, UnknownKeysAreRejected) {
  Config c = Config::parse("worker:\n  batch_sise: 4\n", "serve.yaml");
  std::string e = error_of([&] { c.section("worker").check_keys({"batch_size", "model"}); });
  EXPECT_NE(e.find("worker.batch_sise: unknown key"), std::string::npos) << e;
  EXPECT_NE(e.find("batch_size"), std::string::npos);
}

TEST(Config, MalformedYamlGivesLineNumber) {
  std::string e = error_of([] { Config::parse("a: [1, 2\nb: 3\n", "bad.yaml"); });
  EXPECT_NE(e.find("bad.yaml: invalid YAML at line"), std::string::npos) << e;
  EXPECT_NE(error_of([] { Config::parse("- 1\n- 2\n", "list.yaml"); }).find("top level must be a mapping"),
            std::string::npos);
  EXPECT_NE(error_of([] { Config::load_file("/nonexistent/x.yaml"); }).find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace updraft
