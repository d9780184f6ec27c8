// Whole-file reads, and crash-safe file replacement: bytes go to "<path>.tmp.<pid>", which commit() fsyncs, renames
// over `path` and makes durable by fsyncing the directory, so a reader sees the old file or the
// new one, never a torn one. Dropping an AtomicFile without commit() removes the temporary.
// Every failure is an Error naming the file and the system's reason.
#pragma once

#include <cstddef>
#include <string>

namespace updraft {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(const std::string& s) { write(s.data(), s.size()); }
  void commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

// Makes renames and creations inside `dir` durable (a filesystem that cannot sync directories,
// EINVAL, is accepted: nothing more can be done there). Error when the directory cannot be
// opened or fsync fails otherwise.
void fsync_dir(const std::string& dir);

// The whole file in one call.
void write_file_atomic(const std::string& path, const std::string& contents);

// The whole file's bytes; Error naming the file when it cannot be opened or read.
std::string read_file(const std::string& path);

}  // namespace updraft
