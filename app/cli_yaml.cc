#include "app/cli_yaml.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>

namespace updraft {
namespace {

std::string option_name(std::string key) {
  key.erase(0, key.find_first_not_of('-'));
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

void collect(const YAML::Node& map, std::vector<std::string>& parents, std::vector<CLI::ConfigItem>& out) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    const YAML::Node& v = it->second;
    std::string path;
    for (const auto& p : parents)
      path += p + ".";
    path += key;
    if (v.IsMap()) {  // a subcommand's section
      parents.push_back(key);
      collect(v, parents, out);
      parents.pop_back();
      continue;
    }
    CLI::ConfigItem item;
    item.parents = parents;
    item.name = option_name(key);
    if (v.IsSequence()) {
      for (const auto& e : v) {
        if (!e.IsScalar())
          throw CLI::ConversionError(path + ": expected a list of plain values");
        item.inputs.push_back(e.as<std::string>());
      }
    } else if (v.IsScalar()) {
      item.inputs.push_back(v.as<std::string>());
    } else {
      throw CLI::ConversionError(path + ": expected a value, a list of values or a section");
    }
    out.push_back(std::move(item));
  }
}

}  // namespace

std::string YamlCliConfig::to_config(const CLI::App*, bool, bool, std::string) const {
  return "# writing the options back as YAML is not supported; start from a file in configs/\n";
}

std::vector<CLI::ConfigItem> YamlCliConfig::from_config(std::istream& in) const {
  YAML::Node root;
  try {
    root = YAML::Load(in);
  } catch (const YAML::Exception& e) {
    throw CLI::ConversionError("invalid YAML at line " + std::to_string(e.mark.line + 1) + ", column " +
                               std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  std::vector<CLI::ConfigItem> items;
  if (root.IsNull())
    return items;
  if (!root.IsMap())
    throw CLI::ConversionError("the top level must be a mapping of subcommands to their options");
  std::vector<std::string> parents;
  collect(root, parents, items);
  return items;
}

}  // namespace updraft
