#include "messaging/quarantine.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kernels/core/error.h"

namespace updraft::messaging {

namespace {

// One line, or nullopt when it is not a whole entry (a torn last line).
std::optional<QuarantineEntry> parse_line(const std::string& line) {
  std::istringstream in(line);
  std::string key, round, when, reason;
  if (!std::getline(in, key, '\t') || !std::getline(in, round, '\t') || !std::getline(in, when, '\t') ||
      !std::getline(in, reason))
    return std::nullopt;
  const std::optional<RecordKey> k = parse_key_text(key);
  if (!k)
    return std::nullopt;
  QuarantineEntry e;
  e.key = *k;
  try {
    e.round = std::stoll(round);
    e.unix_seconds = std::stoll(when);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  e.reason = reason;
  return e;
}

}  // namespace

std::vector<QuarantineEntry> QuarantineLog::load(const std::string& path) {
  std::vector<QuarantineEntry> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (auto e = parse_line(line))
      out.push_back(std::move(*e));
  return out;
}

QuarantineLog::QuarantineLog(std::string path) : path_(std::move(path)) {
  for (const QuarantineEntry& e : load(path_))
    keys_.insert(e.key);
}

bool QuarantineLog::contains(const RecordKey& k) const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_.count(k) != 0;
}

size_t QuarantineLog::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_.size();
}

void QuarantineLog::add(const RecordKey& k, int64_t round, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (keys_.count(k))
    return;
  std::string why = reason;
  for (char& c : why)
    if (c == '\t' || c == '\n' || c == '\r')
      c = ' ';
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  // A line a crash cut short is dropped on load (with the next one, which it runs into: that
  // record is then quarantined again when next met).
  const std::string line = key_text(k) + "\t" + std::to_string(round) + "\t" + std::to_string(now) + "\t" + why + "\n";
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  UPD_REQUIRE(fd >= 0) << "quarantine log " << path_ << ": " << std::strerror(errno);
  const ssize_t n = ::write(fd, line.data(), line.size());
  const int saved = errno;
  const bool synced = n == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
  ::close(fd);
  UPD_REQUIRE(synced) << "quarantine log " << path_ << ": write failed: " << std::strerror(n < 0 ? saved : errno);
  keys_.insert(k);
}

}  // namespace updraft::messaging
