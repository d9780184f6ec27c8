#include "kernels/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kernels/core/error.h"

namespace updraft {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  UPD_REQUIRE(fd_ >= 0) << tmp_ << ": cannot create: " << std::strerror(errno);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t n) {
  UPD_CHECK(fd_ >= 0) << path_ << ": write after commit";
  const char* c = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, c, n);
    if (w < 0 && errno == EINTR)
      continue;
    UPD_REQUIRE(w > 0) << tmp_ << ": write failed: " << std::strerror(errno);
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFile::commit() {
  UPD_CHECK(fd_ >= 0) << path_ << ": committed twice";
  UPD_REQUIRE(::fsync(fd_) == 0) << tmp_ << ": fsync failed: " << std::strerror(errno);
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    UPD_FAIL() << path_ << ": cannot rename the written file into place: " << std::strerror(e);
  }
  const size_t slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: makes the rename durable on filesystems that need it
    ::close(dfd);
  }
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  UPD_REQUIRE(fd >= 0) << dir << ": cannot open directory: " << std::strerror(errno);
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  UPD_REQUIRE(rc == 0 || e == EINVAL) << dir << ": fsync failed: " << std::strerror(e);
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  AtomicFile f(path);
  f.write(contents);
  f.commit();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  UPD_REQUIRE(in.good()) << path << ": cannot open";
  std::ostringstream ss;
  ss << in.rdbuf();
  UPD_REQUIRE(!in.bad()) << path << ": read error";
  return ss.str();
}

}  // namespace updraft
