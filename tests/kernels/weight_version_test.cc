// Published weight versions: a complete version verifies; any damage, a stray file, a wrong
// name or a republish is refused with a reason.
#include "kernels/io/weight_version.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kernels/core/error.h"
#include "kernels/io/atomic_file.h"

namespace updraft {
namespace {

namespace fs = std::filesystem;

struct TempRoot {
  fs::path path;
  TempRoot() {
    path = fs::temp_directory_path() / ("updraft_wv_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
  }
  ~TempRoot() { fs::remove_all(path); }
};

void write(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

WeightVersion publish_two_files(const std::string& root, uint64_t v) {
  return publish_version(
      root, "drafter", v,
      [](const std::string& d) {
        write(fs::path(d) / "config.json", "{\"a\": 1}");
        write(fs::path(d) / "model.safetensors", std::string(1000, 'x'));
      },
      {{"note", "test"}});
}

TEST(ReadFile, ReturnsEveryByteAndNamesAMissingFile) {
  TempRoot t;
  fs::create_directories(t.path);
  std::string bytes(70000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>(i * 131);
  write_file_atomic((t.path / "f.bin").string(), bytes);
  EXPECT_EQ(read_file((t.path / "f.bin").string()), bytes);
  write(t.path / "empty", "");
  EXPECT_EQ(read_file((t.path / "empty").string()), "");
  try {
    read_file((t.path / "absent").string());
    FAIL() << "no error for a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent: cannot open"), std::string::npos) << e.what();
  }
}

TEST(WeightVersion, PublishedVersionVerifies) {
  TempRoot t;
  const WeightVersion v = publish_two_files(t.path.string(), 3);
  EXPECT_EQ(fs::path(v.dir).filename(), "drafter-v00000003");
  EXPECT_FALSE(fs::exists(v.dir + ".tmp"));
  const WeightVersion w = verify_version(v.dir, "drafter");
  EXPECT_EQ(w.version, 3u);
  EXPECT_EQ(w.sha256, v.sha256);
  EXPECT_EQ(w.sha256.size(), 2u);
  EXPECT_EQ(w.meta["note"], "test");
  EXPECT_THROW(verify_version(v.dir, "policy"), Error);  // wrong kind
}

TEST(WeightVersion, DamageIsRefused) {
  TempRoot t;
  const WeightVersion v = publish_two_files(t.path.string(), 1);
  {  // one flipped byte, same size
    std::fstream f(fs::path(v.dir) / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500);
    f.put('y');
  }
  try {
    verify_version(v.dir, "drafter");
    FAIL() << "damaged file accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sha256"), std::string::npos) << e.what();
  }
  // The sizes-only level does not read the files: the damage passes it, the claims come back.
  EXPECT_EQ(verify_version(v.dir, "drafter", VerifyLevel::kSizes).sha256, v.sha256);
}

TEST(WeightVersion, TruncatedStrayAndMissingFilesAreRefused) {
  TempRoot t;
  const WeightVersion v = publish_two_files(t.path.string(), 1);
  fs::resize_file(fs::path(v.dir) / "model.safetensors", 999);
  const WeightVersion v2 = publish_two_files(t.path.string(), 2);
  write(fs::path(v2.dir) / "extra.bin", "z");
  const WeightVersion v3 = publish_two_files(t.path.string(), 3);
  fs::remove(fs::path(v3.dir) / "config.json");
  const WeightVersion v4 = publish_two_files(t.path.string(), 4);
  fs::remove(fs::path(v4.dir) / "manifest.json");
  for (const VerifyLevel level : {VerifyLevel::kHashes, VerifyLevel::kSizes})  // both levels
    for (const WeightVersion* bad : {&v, &v2, &v3, &v4})
      EXPECT_THROW(verify_version(bad->dir, "drafter", level), Error) << bad->dir;
}

TEST(WeightVersion, RenamedDirectoryIsRefused) {
  TempRoot t;
  const WeightVersion v = publish_two_files(t.path.string(), 5);
  const fs::path moved = t.path / "drafter-v00000009";
  fs::rename(v.dir, moved);
  EXPECT_THROW(verify_version(moved.string(), "drafter"), Error);
}

TEST(WeightVersion, VersionsAreImmutableAndLatestIsFound) {
  TempRoot t;
  EXPECT_TRUE(latest_version(t.path.string(), "drafter").dir.empty());
  publish_two_files(t.path.string(), 2);
  publish_two_files(t.path.string(), 10);
  EXPECT_THROW(publish_two_files(t.path.string(), 10), Error);
  fs::create_directories(t.path / "drafter-v00000011.tmp");  // a crashed publish: ignored
  const WeightVersion l = latest_version(t.path.string(), "drafter");
  EXPECT_EQ(l.version, 10u);
  EXPECT_NO_THROW(verify_version(l.dir, "drafter"));
  EXPECT_TRUE(latest_version(t.path.string(), "policy").dir.empty());
}

TEST(WeightVersion, WriterFailureLeavesNoVersion) {
  TempRoot t;
  EXPECT_THROW(publish_version(t.path.string(), "drafter", 1, [](const std::string&) { throw Error("disk full"); }),
               Error);
  EXPECT_TRUE(latest_version(t.path.string(), "drafter").dir.empty());
}

}  // namespace
}  // namespace updraft
