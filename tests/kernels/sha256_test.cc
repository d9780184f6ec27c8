// SHA-256 against the FIPS 180-4 / NIST example vectors, the padding boundaries (messages of
// 55/56/57/63/64/65/119/120/128 bytes, digests from Python's hashlib), incremental updates in
// every chunk size, and files (including the Error for a missing one): the wrapper around
// OpenSSL's EVP digest (kernels/io/sha256.h).
#include "kernels/io/sha256.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kernels/core/error.h"

namespace updraft {
namespace {

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i)
    s[i] = static_cast<char>((i * 7 + 3) % 256);
  return s;
}

TEST(Sha256, NistVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmn"
                 "opqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PaddingBoundaries) {
  const std::pair<size_t, const char*> cases[] = {
      {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
      {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
      {57, "35df609437dcfea3279283ab79fd554e2bf78f8f7ae2de532d8ee300b09e8f73"},
      {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
      {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
      {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
      {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
      {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
      {128, "d2742f1f4ac6bb7ca2b239ee18402ba8b3f9f8e652d2a72973c2b9ba11c08cf6"},
  };
  for (const auto& [n, want] : cases)
    EXPECT_EQ(sha256_hex(pattern(n)), want) << n << " bytes";
}

TEST(Sha256, IncrementalEqualsOneShot) {
  const std::string msg = pattern(1000);
  const std::string want = "1e9bc38cbf860b9ec31918b065f9b52476c549a782e0e7990bed8ce3868d2371";
  ASSERT_EQ(sha256_hex(msg), want);
  for (size_t chunk = 1; chunk <= 130; ++chunk) {
    Sha256 h;
    for (size_t i = 0; i < msg.size(); i += chunk)
      h.update(std::string_view(msg).substr(i, chunk));
    EXPECT_EQ(to_hex(h.digest()), want) << "chunk " << chunk;
  }
}

TEST(Sha256, UseAfterDigestIsAProgrammerError) {
  Sha256 h;
  h.update("abc");
  h.digest();
  EXPECT_THROW(h.update("d"), CheckFailure);
  EXPECT_THROW(h.digest(), CheckFailure);
}

TEST(Sha256, Files) {
  const auto path = std::filesystem::temp_directory_path() / ("upd_sha256_" + std::to_string(::getpid()));
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string(3 << 20, 'a') << pattern(1000);  // spans several read chunks
  }
  EXPECT_EQ(sha256_file_hex(path.string()), sha256_hex(std::string(3 << 20, 'a') + pattern(1000)));
  std::filesystem::remove(path);
  try {
    sha256_file_hex(path.string());
    FAIL() << "no error for a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace updraft
