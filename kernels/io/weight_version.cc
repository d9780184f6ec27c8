#include "kernels/io/weight_version.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "kernels/core/error.h"
#include "kernels/io/atomic_file.h"
#include "kernels/io/sha256.h"

namespace updraft {
namespace {

namespace fs = std::filesystem;
constexpr const char* kManifest = "manifest.json";

void fsync_file(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  UPD_REQUIRE(fd >= 0) << p.string() << ": cannot open: " << std::strerror(errno);
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  UPD_REQUIRE(rc == 0) << p.string() << ": fsync failed: " << std::strerror(e);
}


}  // namespace

std::string version_dir_name(const std::string& kind, uint64_t version) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "-v%08llu", static_cast<unsigned long long>(version));
  return kind + buf;
}

WeightVersion publish_version(const std::string& root, const std::string& kind, uint64_t version,
                              const std::function<void(const std::string& dir)>& write_files,
                              const nlohmann::json& meta) {
  UPD_REQUIRE(!kind.empty() && kind.find('/') == std::string::npos) << "publish_version: bad kind '" << kind << "'";
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec)
    throw Error("publish_version: cannot create " + root + ": " + ec.message());
  const fs::path final_dir = fs::path(root) / version_dir_name(kind, version);
  const fs::path tmp = final_dir.string() + ".tmp";
  if (fs::exists(final_dir))
    throw Error("publish_version: " + final_dir.string() + " already exists (versions are immutable)");
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec)
    throw Error("publish_version: cannot create " + tmp.string() + ": " + ec.message());
  write_files(tmp.string());

  nlohmann::json files = nlohmann::json::object();
  WeightVersion v;
  for (const auto& e : fs::directory_iterator(tmp)) {
    if (!e.is_regular_file())
      throw Error("publish_version: " + e.path().string() + " is not a regular file");
    const std::string name = e.path().filename().string();
    if (name == kManifest)
      throw Error("publish_version: the writer must not create " + std::string(kManifest));
    fsync_file(e.path());
    const std::string hex = sha256_file_hex(e.path().string());
    files[name] = {{"bytes", e.file_size()}, {"sha256", hex}};
    v.sha256[name] = hex;
  }
  const nlohmann::json manifest = {
      {"format", "updraft.weights"}, {"kind", kind}, {"version", version}, {"files", files}, {"meta", meta}};
  write_file_atomic((tmp / kManifest).string(), manifest.dump(2) + "\n");
  fsync_dir(tmp.string());
  UPD_REQUIRE(::rename(tmp.c_str(), final_dir.c_str()) == 0)
      << "publish_version: cannot rename " << tmp.string() << " to " << final_dir.string() << ": "
      << std::strerror(errno);
  fsync_dir(root);
  v.dir = final_dir.string();
  v.kind = kind;
  v.version = version;
  v.meta = meta;
  return v;
}

WeightVersion verify_version(const std::string& dir, const std::string& kind, VerifyLevel level) {
  const fs::path d(dir);
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(read_file((d / kManifest).string()));
  } catch (const nlohmann::json::exception& e) {
    throw Error(dir + "/" + kManifest + ": not valid JSON: " + e.what());
  }
  auto field = [&](const char* name) -> const nlohmann::json& {
    if (!m.is_object() || !m.contains(name))
      throw Error(dir + "/" + kManifest + ": missing \"" + name + "\"");
    return m.at(name);
  };
  if (field("format") != "updraft.weights")
    throw Error(dir + "/" + kManifest + ": format is not updraft.weights");
  if (!field("kind").is_string() || field("kind").get<std::string>() != kind)
    throw Error(dir + "/" + kManifest + ": kind is not " + kind);
  if (!field("version").is_number_unsigned())
    throw Error(dir + "/" + kManifest + ": version is not an unsigned integer");
  WeightVersion v;
  v.dir = dir;
  v.kind = kind;
  v.version = field("version").get<uint64_t>();
  if (d.filename().string() != version_dir_name(kind, v.version))
    throw Error(dir + ": directory name does not match manifest version " + std::to_string(v.version));
  const nlohmann::json& files = field("files");
  if (!files.is_object() || files.empty())
    throw Error(dir + "/" + kManifest + ": files must be a non-empty object");
  for (const auto& [name, info] : files.items()) {
    if (name.empty() || name.find('/') != std::string::npos || name == kManifest)
      throw Error(dir + "/" + kManifest + ": bad file name '" + name + "'");
    if (!info.is_object() || !info.contains("bytes") || !info.contains("sha256") ||
        !info["bytes"].is_number_unsigned() || !info["sha256"].is_string())
      throw Error(dir + "/" + kManifest + ": bad entry for " + name);
    const fs::path p = d / name;
    std::error_code ec;
    const uintmax_t size = fs::file_size(p, ec);
    if (ec)
      throw Error(p.string() + ": missing (" + ec.message() + ")");
    if (size != info["bytes"].get<uint64_t>())
      throw Error(p.string() + ": size " + std::to_string(size) + " differs from the manifest's " +
                  std::to_string(info["bytes"].get<uint64_t>()));
    const std::string claimed = info["sha256"].get<std::string>();
    if (level == VerifyLevel::kHashes && sha256_file_hex(p.string()) != claimed)
      throw Error(p.string() + ": sha256 mismatch (corrupt or altered)");
    v.sha256[name] = claimed;
  }
  for (const auto& e : fs::directory_iterator(d)) {
    const std::string name = e.path().filename().string();
    if (name != kManifest && !files.contains(name))
      throw Error(dir + ": unlisted file " + name);
  }
  v.meta = m.contains("meta") ? m["meta"] : nlohmann::json::object();
  return v;
}

std::vector<WeightVersion> list_versions(const std::string& root, const std::string& kind) {
  std::vector<WeightVersion> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    return out;
  const std::string prefix = kind + "-v";
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.size() != prefix.size() + 8 || name.compare(0, prefix.size(), prefix) != 0)
      continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    WeightVersion v;
    v.dir = e.path().string();
    v.kind = kind;
    v.version = std::stoull(digits);
    out.push_back(std::move(v));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.version < b.version; });
  return out;
}

WeightVersion latest_version(const std::string& root, const std::string& kind) {
  std::vector<WeightVersion> all = list_versions(root, kind);
  return all.empty() ? WeightVersion{} : std::move(all.back());
}

}  // namespace updraft
