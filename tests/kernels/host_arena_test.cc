// kernels/core/host_arena.h: weight tensors carved from shared huge-page chunks.
#include "kernels/core/host_arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace updraft {
namespace {

// The kernel's transparent huge page mode ("always", "madvise" or "never"), "" where it has none.
std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  const size_t a = line.find('['), b = line.find(']');
  return a == std::string::npos || b == std::string::npos ? "" : line.substr(a + 1, b - a - 1);
}

// AnonHugePages (kB) of the mapping that holds p, from /proc/self/smaps; -1 if none holds it.
long huge_kb_at(const void* p) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool in = false;
  const auto at = reinterpret_cast<uintptr_t>(p);
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      in = at >= lo && at < hi;
      continue;
    }
    long kb = 0;
    if (in && std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kb) == 1)
      return kb;
  }
  return -1;
}

TEST(HostArena, TensorsAreAlignedDisjointAndKeepTheirValues) {
  std::vector<Tensor> ts;
  for (int64_t i = 0; i < 40; ++i) {  // up to 3 MiB each, 62 MiB in all: more than one 32 MiB chunk
    ts.push_back(host_weight_empty({1 + i * 100, 400}, DType::BF16));
    ASSERT_EQ(reinterpret_cast<uintptr_t>(ts.back().raw()) % 64, 0u) << i;
    auto* p = static_cast<uint16_t*>(ts.back().raw());
    for (int64_t k = 0; k < ts.back().numel(); ++k)
      p[k] = static_cast<uint16_t>(i * 7 + k);
  }
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto* p = static_cast<const uint16_t*>(ts[i].raw());
    for (int64_t k = 0; k < ts[i].numel(); k += 997)
      ASSERT_EQ(p[k], static_cast<uint16_t>(static_cast<int64_t>(i) * 7 + k)) << i << " " << k;
  }
}

TEST(HostArena, ATensorOutlivesTheOthersOfItsChunk) {
  Tensor kept;
  {
    std::vector<Tensor> ts;
    for (int i = 0; i < 8; ++i)
      ts.push_back(host_weight_empty({1024, 1024}, DType::F32));
    kept = ts[3];
    std::memset(kept.raw(), 0x5a, kept.nbytes());
  }
  for (int i = 0; i < 4; ++i)  // more chunks come and go; kept's stays
    host_weight_empty({int64_t{40} << 20}, DType::Bool);
  const auto* p = static_cast<const uint8_t*>(kept.raw());
  for (size_t k = 0; k < kept.nbytes(); k += 4093)
    ASSERT_EQ(p[k], 0x5a) << k;
}

TEST(HostArena, StreamedWeightsHoldTheirElementsAndShareOnCopy) {
  StreamedWeights<int32_t> a;
  EXPECT_TRUE(a.empty());
  a.resize(100000);
  ASSERT_EQ(a.size(), 100000u);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  for (int32_t i = 0; i < 100000; ++i)
    a.data()[i] = i * 3;
  const StreamedWeights<int32_t> b = a;  // the same block
  a.resize(0);
  EXPECT_TRUE(a.empty());
  ASSERT_EQ(b.size(), 100000u);
  for (int32_t i = 0; i < 100000; i += 7)
    ASSERT_EQ(b.data()[i], i * 3) << i;
}

TEST(HostArena, WeightsAreInHugePagesWhereTheSystemHasThem) {
  const std::string mode = thp_mode();
  if (mode != "always" && mode != "madvise")
    GTEST_SKIP() << "transparent huge pages are " << (mode.empty() ? "absent" : mode) << " here";
  ASSERT_TRUE(host_huge_pages()) << "UPDRAFT_HUGE_PAGES=0 in the test's environment";
  Tensor t = host_weight_empty({int64_t{8} << 20}, DType::F32);  // 32 MiB: whole huge pages
  std::memset(t.raw(), 1, t.nbytes());
  EXPECT_GT(huge_kb_at(t.raw()), 0) << "the arena's chunk is in 4 KiB pages";
  if (mode == "madvise") {  // without the advice, ordinary pages
    set_host_huge_pages(false);
    Tensor s = host_weight_empty({int64_t{8} << 20}, DType::F32);
    set_host_huge_pages(true);
    std::memset(s.raw(), 1, s.nbytes());
    EXPECT_EQ(huge_kb_at(s.raw()), 0);
  }
}

TEST(HostArena, LargeHostBlocksAreInHugePagesToo) {
  const std::string mode = thp_mode();
  if (mode != "always" && mode != "madvise")
    GTEST_SKIP() << "transparent huge pages are " << (mode.empty() ? "absent" : mode) << " here";
  Tensor t = Tensor::empty({int64_t{3} << 20}, DType::F32);  // 12 MiB, from device_alloc (a KV cache's way)
  std::memset(t.raw(), 1, t.nbytes());
  EXPECT_GT(huge_kb_at(t.raw()), 0);
}

// A chunk whose tensors are all gone is kept for a later chunk of its size (a worker packs each
// policy version's weights anew), not returned: the third block below is the first one's memory,
// still holding what was written there (fresh pages would read zero).
TEST(HostArena, AFreedChunkIsReusedByTheNextChunkOfItsSize) {
  const size_t bytes = size_t{46} << 20;  // a chunk of its own, of a size no other test here asks for
  std::shared_ptr<void> first = host_weight_bytes(bytes);
  std::memset(first.get(), 0x5a, bytes);
  const void* at = first.get();
  first.reset();                                            // the arena still fills its chunk
  std::shared_ptr<void> second = host_weight_bytes(bytes);  // a new chunk: the first one goes idle
  std::shared_ptr<void> third = host_weight_bytes(bytes);   // a new chunk again: the idle one
  EXPECT_NE(second.get(), at);
  ASSERT_EQ(third.get(), at);
  EXPECT_EQ(static_cast<const unsigned char*>(third.get())[bytes / 2], 0x5a) << "fresh pages, not the freed chunk";
}

}  // namespace
}  // namespace updraft
