#include "kernels/io/hf_config.h"

#include <fstream>
#include <sstream>

namespace updraft::hf {

Json parse_object(const std::string& text, const std::string& where) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  UPD_REQUIRE(j.is_object()) << where << ": not a JSON object";
  return j;
}

Json read_object_file(const std::string& path) {
  std::ifstream in(path);
  UPD_REQUIRE(in.good()) << path << ": cannot read";
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_object(ss.str(), path);
}

std::vector<int32_t> token_ids(const Json& v, const std::string& where, const char* key) {
  std::vector<int32_t> out;
  if (v.is_null())
    return out;
  if (v.is_number_integer())
    return {v.get<int32_t>()};
  UPD_REQUIRE(v.is_array()) << where << ": \"" << key << "\" must be an id or a list of ids";
  for (const auto& e : v) {
    UPD_REQUIRE(e.is_number_integer()) << where << ": \"" << key << "\" must hold integers";
    out.push_back(e.get<int32_t>());
  }
  return out;
}

ops::RopeParams read_rope(const Json& j, const std::string& where, std::optional<double> default_theta) {
  ops::RopeParams rope;
  const Json* params = nullptr;
  bool have_theta = false;
  if (j.contains("rope_theta") && j["rope_theta"].is_number()) {
    rope.theta = j["rope_theta"].get<double>();
    have_theta = true;
  }
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object())
    params = &j["rope_scaling"];
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    params = &j["rope_parameters"];
    if (params->contains("rope_theta")) {
      UPD_REQUIRE((*params)["rope_theta"].is_number()) << where << ": rope_parameters.rope_theta is not a number";
      rope.theta = (*params)["rope_theta"].get<double>();
      have_theta = true;
    }
  }
  if (!have_theta && default_theta) {
    rope.theta = *default_theta;
    have_theta = true;
  }
  UPD_REQUIRE(have_theta) << where << ": no rope_theta (neither top-level nor in rope_parameters)";
  UPD_REQUIRE(rope.theta > 1.0) << where << ": rope_theta " << rope.theta << " must exceed 1";
  if (params == nullptr)
    return rope;
  std::string type = "default";
  if (params->contains("rope_type"))
    type = (*params)["rope_type"].get<std::string>();
  else if (params->contains("type"))
    type = (*params)["type"].get<std::string>();
  const JsonReader r{*params, where};
  if (type == "default") {
    rope.scaling = "none";
  } else if (type == "linear") {
    rope.scaling = "linear";
    rope.factor = r.req<double>("factor");
  } else if (type == "llama3") {
    rope.scaling = "llama3";
    rope.factor = r.req<double>("factor");
    rope.low_freq_factor = r.req<double>("low_freq_factor");
    rope.high_freq_factor = r.req<double>("high_freq_factor");
    rope.original_max_position = r.req<int64_t>("original_max_position_embeddings");
  } else {
    UPD_FAIL() << where << ": RoPE scaling \"" << type << "\" is not supported (supported: default, linear, llama3)";
  }
  UPD_REQUIRE(rope.factor > 0) << where << ": RoPE scaling factor must be positive";
  return rope;
}

void write_rope(Json& j, const ops::RopeParams& rope) {
  j["rope_theta"] = rope.theta;
  if (rope.scaling == "linear")
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rope.factor}};
  else if (rope.scaling == "llama3")
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", rope.factor},
                         {"low_freq_factor", rope.low_freq_factor},
                         {"high_freq_factor", rope.high_freq_factor},
                         {"original_max_position_embeddings", rope.original_max_position}};
}

}  // namespace updraft::hf
