#include "kernels/io/hf_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace updraft {
namespace fs = std::filesystem;

CheckpointDir CheckpointDir::open(const std::string& dir) {
  CheckpointDir c;
  c.dir_ = dir;
  UPD_REQUIRE(fs::is_directory(dir)) << dir << ": not a model directory";
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (!fs::exists(index)) {
    UPD_REQUIRE(fs::exists(single)) << dir << ": neither model.safetensors nor model.safetensors.index.json found";
    c.shards_.push_back(std::make_shared<SafetensorsFile>(SafetensorsFile::open(single.string())));
    for (const auto& n : c.shards_[0]->names())
      c.where_[n] = 0;
    return c;
  }

  std::ifstream in(index);
  UPD_REQUIRE(in.good()) << index.string() << ": cannot read";
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  UPD_REQUIRE(j.is_object()) << index.string() << ": not a JSON object";
  UPD_REQUIRE(j.contains("weight_map") && j["weight_map"].is_object())
      << index.string() << ": missing object \"weight_map\"";
  std::map<std::string, size_t> shard_ids;
  std::map<std::string, std::string> wanted;  // tensor -> shard file
  for (const auto& [name, file] : j["weight_map"].items()) {
    UPD_REQUIRE(file.is_string()) << index.string() << ": weight_map[\"" << name << "\"] is not a string";
    const std::string f = file.get<std::string>();
    UPD_REQUIRE(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..")
        << index.string() << ": shard name \"" << f << "\" for " << name << " is not a file in the directory";
    wanted[name] = f;
    if (!shard_ids.count(f)) {
      shard_ids[f] = c.shards_.size();
      c.shards_.push_back(std::make_shared<SafetensorsFile>(SafetensorsFile::open((fs::path(dir) / f).string())));
    }
  }
  UPD_REQUIRE(!wanted.empty()) << index.string() << ": empty weight_map";
  for (const auto& [name, f] : wanted) {
    const size_t s = shard_ids[f];
    UPD_REQUIRE(c.shards_[s]->has(name)) << index.string() << ": tensor " << name << " is mapped to " << f
                                         << " but that shard does not contain it";
    c.where_[name] = s;
  }
  for (const auto& [f, s] : shard_ids)
    for (const auto& n : c.shards_[s]->names()) {
      auto it = wanted.find(n);
      UPD_REQUIRE(it != wanted.end() && it->second == f)
          << dir << "/" << f << ": holds tensor " << n
          << (it == wanted.end() ? " that the index does not list" : " that the index maps to " + it->second);
    }
  return c;
}

std::vector<std::string> CheckpointDir::names() const {
  std::vector<std::string> out;
  for (const auto& [n, s] : where_)
    out.push_back(n);
  return out;
}

const TensorInfo& CheckpointDir::info(const std::string& name) const {
  auto it = where_.find(name);
  UPD_REQUIRE(it != where_.end()) << dir_ << ": checkpoint has no tensor " << name;
  return shards_[it->second]->info(name);
}

Tensor CheckpointDir::get(const std::string& name) const {
  auto it = where_.find(name);
  UPD_REQUIRE(it != where_.end()) << dir_ << ": checkpoint has no tensor " << name;
  return shards_[it->second]->get(name);
}

std::string CheckpointDir::file_of(const std::string& name) const {
  auto it = where_.find(name);
  UPD_REQUIRE(it != where_.end()) << dir_ << ": checkpoint has no tensor " << name;
  return shards_[it->second]->path();
}

}  // namespace updraft
