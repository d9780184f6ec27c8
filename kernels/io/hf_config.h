// Reading Hugging Face config.json files: typed getters whose errors name the file and the key,
// token-id lists, and the RoPE settings in both spellings (top-level rope_theta/rope_scaling of
// transformers 4.x, rope_parameters of transformers 5). Shared by the policy and drafter configs.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kernels/core/error.h"
#include "kernels/ops/rope.h"

namespace updraft::hf {

using Json = nlohmann::json;

// Parses a JSON object; Error naming `where` if it is not one.
Json parse_object(const std::string& text, const std::string& where);
// Reads and parses a file; Error if it is missing or not a JSON object.
Json read_object_file(const std::string& path);

struct JsonReader {
  const Json& j;
  const std::string& where;

  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
  template <typename T>
  T req(const char* key) const {
    UPD_REQUIRE(has(key)) << where << ": missing \"" << key << "\"";
    return get<T>(key);
  }
  template <typename T>
  T opt(const char* key, T dflt) const {
    return has(key) ? get<T>(key) : dflt;
  }
  template <typename T>
  T get(const char* key) const {
    try {
      return j[key].get<T>();
    } catch (const Json::exception&) {
      UPD_FAIL() << where << ": \"" << key << "\" has the wrong type: " << j[key].dump();
    }
    return T{};
  }
};

// An id or a list of ids (eos_token_id style); null gives an empty list.
std::vector<int32_t> token_ids(const Json& v, const std::string& where, const char* key);

// RoPE base and scaling (default, linear, llama3; anything else is an Error). A missing theta
// is an Error unless `default_theta` is given (drafter configs: 10000, eagle3.md A.6).
ops::RopeParams read_rope(const Json& j, const std::string& where, std::optional<double> default_theta = {});
// Writes rope_theta and, when scaled, rope_scaling (transformers 4.x spelling).
void write_rope(Json& j, const ops::RopeParams& rope);

}  // namespace updraft::hf
