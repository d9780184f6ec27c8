#include "kernels/io/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "kernels/core/error.h"

namespace updraft {

struct Sha256::Ctx {
  EVP_MD_CTX* md = nullptr;
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  ctx_->md = EVP_MD_CTX_new();
  UPD_REQUIRE(ctx_->md != nullptr && EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) == 1)
      << "OpenSSL: cannot start a SHA-256 digest";
}

Sha256::~Sha256() = default;

void Sha256::update(const void* data, size_t n) {
  UPD_CHECK(!done_) << "Sha256::update after digest()";
  UPD_REQUIRE(EVP_DigestUpdate(ctx_->md, data, n) == 1) << "OpenSSL: SHA-256 update failed";
}

Sha256Digest Sha256::digest() {
  UPD_CHECK(!done_) << "Sha256::digest called twice";
  done_ = true;
  Sha256Digest out;
  unsigned int len = 0;
  UPD_REQUIRE(EVP_DigestFinal_ex(ctx_->md, out.data(), &len) == 1 && len == out.size())
      << "OpenSSL: SHA-256 final failed";
  return out;
}

std::string to_hex(const Sha256Digest& d) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (uint8_t b : d) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

Sha256Digest sha256(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.digest();
}

std::string sha256_hex(std::string_view bytes) {
  return to_hex(sha256(bytes));
}

std::string sha256_file_hex(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  UPD_REQUIRE(fd >= 0) << path << ": cannot open: " << std::strerror(errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  Sha256 h;
  std::vector<uint8_t> chunk(size_t{1} << 20);
  for (;;) {
    const ssize_t r = ::read(fd, chunk.data(), chunk.size());
    if (r < 0 && errno == EINTR)
      continue;
    UPD_REQUIRE(r >= 0) << path << ": read failed: " << std::strerror(errno);
    if (r == 0)
      break;
    h.update(chunk.data(), static_cast<size_t>(r));
  }
  return to_hex(h.digest());
}

}  // namespace updraft
