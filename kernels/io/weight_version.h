// Published weight versions: how a trainer (drafter) or an RL loop (policy) hands new weights
// to the rollout workers, and how a worker checks them before serving.
//
// A version is a directory <root>/<kind>-v<version, 8 digits>/ holding the model's files (a
// Hugging Face or EAGLE directory: config.json, model.safetensors) and manifest.json:
//   {"format": "updraft.weights", "kind": <kind>, "version": <n>,
//    "files": {<name>: {"bytes": <n>, "sha256": <hex>}, ...}, "meta": <the publisher's JSON>}
//
// publish_version() writes the files through the caller's function into "<final>.tmp", hashes
// them, writes the manifest, fsyncs every file and the directory, renames the directory to its
// final name and fsyncs <root>: a reader sees a complete version or none, and a crash leaves at
// most a ".tmp" directory, which the next publish of that version replaces. Publishing a
// version that already exists is an Error (versions are immutable).
//
// verify_version() checks the manifest (format, kind, version matching the directory name),
// and every listed file's size and sha256, and that the directory holds no unlisted file;
// Error naming the file and the problem otherwise. With VerifyLevel::kSizes it skips reading the
// files for their sha256 (the returned digests are the manifest's claims): for a publisher that
// just wrote the version and whose consumers verify in full. Loading (shapes, dtypes, header) is
// the model loader's job and comes after.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace updraft {

struct WeightVersion {
  std::string dir;
  std::string kind;
  uint64_t version = 0;
  std::map<std::string, std::string> sha256;  // file name -> hex digest
  nlohmann::json meta;
};

std::string version_dir_name(const std::string& kind, uint64_t version);

WeightVersion publish_version(const std::string& root, const std::string& kind, uint64_t version,
                              const std::function<void(const std::string& dir)>& write_files,
                              const nlohmann::json& meta = nlohmann::json::object());

enum class VerifyLevel { kSizes, kHashes };

WeightVersion verify_version(const std::string& dir, const std::string& kind,
                             VerifyLevel level = VerifyLevel::kHashes);

// The versions of `kind` under root by directory name (".tmp" ignored), lowest first, with dir,
// kind and version set; empty when root is missing. Not verified.
std::vector<WeightVersion> list_versions(const std::string& root, const std::string& kind);

// The highest of list_versions(), or version 0 with an empty dir when none exists. Not verified.
WeightVersion latest_version(const std::string& root, const std::string& kind);

}  // namespace updraft
