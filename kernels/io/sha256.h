// SHA-256 (FIPS 180-4) of bytes and files: integrity checks of checkpoints and published
// versions (a digest recorded at save time, compared on load). Computed by OpenSSL's EVP
// interface (libcrypto), which uses the CPU's SHA instructions where it has them.
//
// Sha256 is incremental: update() any number of times, then digest() once; using the object
// after digest() is a CheckFailure. sha256_file() reads the file in chunks and throws
// updraft::Error naming the file when it cannot be opened or read; an OpenSSL failure is an
// Error too.
//
// Thread safety: a Sha256 object is not shared between threads; the free functions are
// thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace updraft {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Sha256Digest digest();  // finishes the hash

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
  bool done_ = false;
};

// Lower-case hex, 64 characters.
std::string to_hex(const Sha256Digest& d);

Sha256Digest sha256(std::string_view bytes);
std::string sha256_hex(std::string_view bytes);
std::string sha256_file_hex(const std::string& path);

}  // namespace updraft
