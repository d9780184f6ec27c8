// Internals of the built-in corpus shared by corpus*.cc: the counter-based generator and the
// per-domain sample builders. Not part of the public API (see corpus.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "trainer/corpus.h"

namespace updraft::corpus::detail {

// splitmix64's output function: a bijection of 64-bit words with good avalanche.
inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Key of one draw: distinct indices give distinct keys for a fixed (seed, stream).
inline uint64_t draw_key(uint64_t seed, uint64_t stream, uint64_t index) {
  return mix64(mix64(seed * 0xd1342543de82ef95ULL + stream) ^ index);
}

// FNV-1a, finished with mix64 so that low bits are usable for bucketing.
inline uint64_t hash_text(std::string_view text, uint64_t h = 0xcbf29ce484222325ULL) {
  for (unsigned char c : text)
    h = (h ^ c) * 0x100000001b3ULL;
  return mix64(h);
}

// splitmix64 stream. Draws use integer arithmetic only, so sequences are identical everywhere.
class Rng {
 public:
  explicit Rng(uint64_t key) : state_(key) {}
  uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) by multiply-shift of the high 32 bits (bias below n / 2^32). REQUIRES n > 0.
  uint32_t below(uint32_t n) { return static_cast<uint32_t>(((next() >> 32) * n) >> 32); }
  // Uniform in [lo, hi]. REQUIRES lo <= hi.
  int range(int lo, int hi) { return lo + static_cast<int>(below(static_cast<uint32_t>(hi - lo + 1))); }
  bool chance(uint32_t num, uint32_t den) { return below(den) < num; }
  template <typename T, size_t N>
  const T& pick(const T (&items)[N]) {
    return items[below(static_cast<uint32_t>(N))];
  }

 private:
  uint64_t state_;
};

// Builders of one sample from a generator; they set every field of Sample.
Sample make_arith(Rng& rng);
Sample make_code(Rng& rng);

int arith_family_count();
std::string_view arith_family_name(int family);
int code_family_count();
std::string_view code_family_name(int family);

}  // namespace updraft::corpus::detail
