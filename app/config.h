// YAML configuration with errors that name the offending key.
//
// A Config is a view of one YAML mapping plus the dotted path that leads to it
// ("worker.speculation"). Getters convert values and throw updraft::Error naming the file,
// the full key and what was expected: `configs/serve.yaml: worker.batch_size: expected an
// integer, got "sixteen"`. check_keys() rejects keys a section does not know (typos are the
// most common config error), listing the accepted ones.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

namespace updraft {

class Config {
 public:
  static Config load_file(const std::string& path);  // throws Error (missing file, bad YAML)
  static Config parse(const std::string& text, const std::string& source = "<string>");

  bool has(const std::string& key) const;
  Config section(const std::string& key) const;  // missing section -> empty mapping

  std::string get_string(const std::string& key, const std::string& def) const;
  int64_t get_int(const std::string& key, int64_t def) const;
  double get_double(const std::string& key, double def) const;
  bool get_bool(const std::string& key, bool def) const;
  std::vector<int64_t> get_int_list(const std::string& key, const std::vector<int64_t>& def) const;

  std::string require_string(const std::string& key) const;
  int64_t require_int(const std::string& key) const;

  // Throws Error if this section has a key not in `allowed`.
  void check_keys(const std::vector<std::string>& allowed) const;

  const std::string& path() const { return path_; }
  const std::string& source() const { return source_; }

 private:
  Config(YAML::Node node, std::string source, std::string path);
  std::string where(const std::string& key) const;
  YAML::Node node(const std::string& key) const;

  YAML::Node node_;
  std::string source_;
  std::string path_;
};

}  // namespace updraft
