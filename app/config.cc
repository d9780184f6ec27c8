#include "app/config.h"

#include <fstream>
#include <sstream>

#include "kernels/core/error.h"

namespace updraft {

Config::Config(YAML::Node node, std::string source, std::string path)
    : node_(std::move(node)), source_(std::move(source)), path_(std::move(path)) {}

Config Config::load_file(const std::string& path) {
  std::ifstream in(path);
  UPD_REQUIRE(in.good()) << "cannot open config file '" << path << "'";
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

Config Config::parse(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    UPD_FAIL() << source << ": invalid YAML at line " << e.mark.line + 1 << ", column " << e.mark.column + 1 << ": "
               << e.msg;
  }
  if (root.IsNull())
    root = YAML::Node(YAML::NodeType::Map);
  UPD_REQUIRE(root.IsMap()) << source << ": the top level must be a mapping of keys to values";
  return Config(root, source, "");
}

std::string Config::where(const std::string& key) const {
  return source_ + ": " + (path_.empty() ? key : path_ + "." + key);
}

YAML::Node Config::node(const std::string& key) const {
  return node_[key];
}

bool Config::has(const std::string& key) const {
  return node_[key].IsDefined() && !node_[key].IsNull();
}

Config Config::section(const std::string& key) const {
  YAML::Node n = node_[key];
  if (!n.IsDefined() || n.IsNull())
    return Config(YAML::Node(YAML::NodeType::Map), source_, path_.empty() ? key : path_ + "." + key);
  UPD_REQUIRE(n.IsMap()) << where(key) << ": expected a mapping (a section of keys)";
  return Config(n, source_, path_.empty() ? key : path_ + "." + key);
}

namespace {

template <typename T>
T convert(const YAML::Node& n, const std::string& where, const char* expected) {
  if (!n.IsScalar())
    UPD_FAIL() << where << ": expected " << expected << ", got a " << (n.IsSequence() ? "list" : "mapping");
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    UPD_FAIL() << where << ": expected " << expected << ", got \"" << n.Scalar() << "\"";
  }
  return T{};
}

}  // namespace

std::string Config::get_string(const std::string& key, const std::string& def) const {
  return has(key) ? convert<std::string>(node(key), where(key), "a string") : def;
}

int64_t Config::get_int(const std::string& key, int64_t def) const {
  return has(key) ? convert<int64_t>(node(key), where(key), "an integer") : def;
}

double Config::get_double(const std::string& key, double def) const {
  return has(key) ? convert<double>(node(key), where(key), "a number") : def;
}

bool Config::get_bool(const std::string& key, bool def) const {
  return has(key) ? convert<bool>(node(key), where(key), "true or false") : def;
}

std::vector<int64_t> Config::get_int_list(const std::string& key, const std::vector<int64_t>& def) const {
  if (!has(key))
    return def;
  YAML::Node n = node(key);
  UPD_REQUIRE(n.IsSequence()) << where(key) << ": expected a list of integers";
  std::vector<int64_t> out;
  for (size_t i = 0; i < n.size(); ++i)
    out.push_back(convert<int64_t>(n[i], where(key) + "[" + std::to_string(i) + "]", "an integer"));
  return out;
}

std::string Config::require_string(const std::string& key) const {
  UPD_REQUIRE(has(key)) << where(key) << ": required key is missing";
  return get_string(key, "");
}

int64_t Config::require_int(const std::string& key) const {
  UPD_REQUIRE(has(key)) << where(key) << ": required key is missing";
  return get_int(key, 0);
}

void Config::check_keys(const std::vector<std::string>& allowed) const {
  for (const auto& kv : node_) {
    const std::string k = kv.first.as<std::string>();
    bool ok = false;
    for (const auto& a : allowed)
      ok = ok || a == k;
    if (!ok) {
      std::string list;
      for (const auto& a : allowed)
        list += (list.empty() ? "" : ", ") + a;
      UPD_FAIL() << where(k) << ": unknown key (known keys here: " << list << ")";
    }
  }
}

}  // namespace updraft
