// SHA-256 (FIPS 180-4) of bytes and files: integrity checks of checkpoints and published
// drafters (a digest recorded at save time, compared on load). Integrity only, not secrecy:
// nothing here is constant-time.
//
// Sha256 is incremental: update() any number of times, then digest() once; using the object
// after digest() is a CheckFailure. sha256_file() reads the file in chunks and throws
// updraft::Error naming the file when it cannot be opened or read.
//
// Blocks are compressed with the CPU's SHA instructions when it has them (x86 SHA-NI, checked
// once at run time), else by the portable code, which is the reference the parity test holds
// the accelerated path to (sha256_detail below).
//
// Thread safety: a Sha256 object is not shared between threads; the free functions are
// thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace updraft {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Sha256Digest digest();  // finishes the hash

 private:
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_bytes_ = 0;
  bool done_ = false;
};

// Lower-case hex, 64 characters.
std::string to_hex(const Sha256Digest& d);

Sha256Digest sha256(std::string_view bytes);
std::string sha256_hex(std::string_view bytes);
std::string sha256_file_hex(const std::string& path);

namespace sha256_detail {
// Compresses `count` 64-byte blocks into state (h0..h7).
void compress_portable(uint32_t* state, const uint8_t* blocks, size_t count);
bool accelerated_available();  // this CPU has the SHA instructions
void compress_accelerated(uint32_t* state, const uint8_t* blocks, size_t count);  // when available
}  // namespace sha256_detail

}  // namespace updraft
