// YAML files as the source of command-line option values: `updraft --config FILE <command> ...`.
//
// The file is a mapping with one section per subcommand (nested subcommands nest), each a
// mapping of option names to values; names are the long option names with or without the
// leading dashes, and '_' may stand for '-'. Scalars give one value, sequences several; flags
// take true/false. Options given on the command line win over the file; keys that name no
// option of their section are an error, as is anything that is not a mapping, scalar or
// sequence of scalars. Example (configs/buffer.yaml):
//
//   buffer:
//     path: /var/lib/updraft/buffer
//     max_bytes: 16G
//     sync: fsync
#pragma once

#include <CLI/CLI.hpp>
#include <istream>
#include <string>
#include <vector>

namespace updraft {

class YamlCliConfig : public CLI::Config {
 public:
  // Writing a config back is not offered (the shipped files in configs/ are the templates).
  std::string to_config(const CLI::App*, bool, bool, std::string) const override;
  // Throws CLI::ConfigError (bad YAML, or a value of the wrong shape) naming the key.
  std::vector<CLI::ConfigItem> from_config(std::istream& in) const override;
};

}  // namespace updraft
