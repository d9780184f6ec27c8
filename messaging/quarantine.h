// Keys of stored records that a consumer (the online trainer) could not use, with the reason:
// it skips them from then on, and operators see them (`updraft inspect buffer --quarantine`).
//
// The log is a text file, one line per key: "policy_version/worker/seq<TAB>round<TAB>unix
// seconds<TAB>reason" (tabs and newlines in the reason become spaces). add() appends a line and
// fsyncs it; a torn last line (a crash mid-write) is ignored on load, so the log never stops
// its owner from starting.
//
// Thread safety: every method is safe from any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "messaging/key.h"

namespace updraft::messaging {

struct QuarantineEntry {
  RecordKey key;
  int64_t round = 0;
  int64_t unix_seconds = 0;
  std::string reason;
};

class QuarantineLog {
 public:
  // Loads the entries already in `path` (none when it does not exist); the file is created on
  // the first add().
  explicit QuarantineLog(std::string path);

  bool contains(const RecordKey& k) const;
  // Appends (durably) unless k is already quarantined; Error when the file cannot be written.
  void add(const RecordKey& k, int64_t round, const std::string& reason);
  size_t size() const;
  const std::string& path() const { return path_; }

  // The entries of a log file in the order written (empty when it does not exist).
  static std::vector<QuarantineEntry> load(const std::string& path);

 private:
  std::string path_;
  mutable std::mutex mu_;
  std::set<RecordKey> keys_;
};

}  // namespace updraft::messaging
