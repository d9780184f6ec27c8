#include "kernels/nn/kv_cache.h"

#include <gtest/gtest.h>

#include <set>

namespace updraft {
namespace {

KvCacheShape shape() {
  return {2, 1, 2, DType::F32, Device::CPU};
}

TEST(KvCache, ReserveIsAllOrNothingAndReleaseReturnsBlocks) {
  KvCache c(shape(), 5, 4);
  SeqKv a, b;
  EXPECT_TRUE(c.reserve(a, 9));  // 3 blocks
  EXPECT_EQ(a.blocks.size(), 3u);
  EXPECT_EQ(c.free_blocks(), 2);
  EXPECT_FALSE(c.reserve(b, 12));  // needs 3, only 2 free: nothing taken
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_EQ(c.free_blocks(), 2);
  EXPECT_TRUE(c.reserve(b, 8));
  std::set<int32_t> all(a.blocks.begin(), a.blocks.end());
  all.insert(b.blocks.begin(), b.blocks.end());
  EXPECT_EQ(all.size(), 5u) << "blocks handed out twice";
  c.release(a);
  EXPECT_EQ(c.free_blocks(), 3);
  EXPECT_TRUE(a.blocks.empty());
  EXPECT_EQ(a.length, 0);
}

TEST(KvCache, SlotsFollowTheBlockList) {
  KvCache c(shape(), 4, 4);
  SeqKv a;
  ASSERT_TRUE(c.reserve(a, 6));
  EXPECT_EQ(c.slot(a, 0), a.blocks[0] * 4);
  EXPECT_EQ(c.slot(a, 5), a.blocks[1] * 4 + 1);
  EXPECT_THROW(c.slot(a, 8), CheckFailure);
}

TEST(KvCache, KeepCompactsTheChosenEntriesInEveryLayer) {
  KvCache c(shape(), 4, 4);
  SeqKv a;
  ASSERT_TRUE(c.reserve(a, 12));
  a.length = 11;  // prefix 3 + 8 appended entries
  // Tag every slot with its position in both layers, K and V.
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t p = 0; p < 11; ++p)
      for (const Tensor& t : {c.layer(l).k_cache, c.layer(l).v_cache}) {
        float* row = t.data<float>() + c.slot(a, p) * 2;
        row[0] = static_cast<float>(100 * l + p);
        row[1] = -static_cast<float>(p);
      }
  c.keep(a, 3, {1, 2, 5, 7});
  EXPECT_EQ(a.length, 7);
  const std::vector<float> want = {0, 1, 2, 4, 5, 8, 10};
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t p = 0; p < 7; ++p)
      for (const Tensor& t : {c.layer(l).k_cache, c.layer(l).v_cache}) {
        const float* row = t.data<float>() + c.slot(a, p) * 2;
        EXPECT_EQ(row[0], 100 * l + want[p]) << "layer " << l << " position " << p;
        EXPECT_EQ(row[1], -want[p]);
      }
  EXPECT_THROW(c.keep(a, 3, {2, 1}), CheckFailure);
  EXPECT_THROW(c.keep(a, 3, {4}), CheckFailure);  // beyond the appended entries
}

// Prefix reuse's sharing: whole blocks are held by both sequences (and go back to the pool with
// the last holder), a partial last block's entries are copied into a block of the taker's own.
TEST(KvCache, SharedPrefixBlocksAreHeldOnceAndFreedByTheLastHolder) {
  KvCache c(shape(), 6, 4);
  SeqKv a, b, d;
  ASSERT_TRUE(c.reserve(a, 12));
  a.length = 10;
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t p = 0; p < 10; ++p)
      for (const Tensor& t : {c.layer(l).k_cache, c.layer(l).v_cache})
        t.data<float>()[c.slot(a, p) * 2] = static_cast<float>(100 * l + p);
  ASSERT_TRUE(c.share_prefix(a, b, 9));  // blocks 0 and 1 shared, entry 8 copied
  EXPECT_EQ(b.length, 9);
  ASSERT_EQ(b.blocks.size(), 3u);
  EXPECT_EQ(b.blocks[0], a.blocks[0]);
  EXPECT_EQ(b.blocks[1], a.blocks[1]);
  EXPECT_NE(b.blocks[2], a.blocks[2]);
  EXPECT_EQ(c.free_blocks(), 2);
  for (int64_t l = 0; l < 2; ++l)
    for (const Tensor& t : {c.layer(l).k_cache, c.layer(l).v_cache})
      EXPECT_EQ(t.data<float>()[c.slot(b, 8) * 2], 100 * l + 8) << "layer " << l;
  ASSERT_TRUE(c.share_prefix(a, d, 8));  // whole blocks only: nothing copied, no block taken
  EXPECT_EQ(c.free_blocks(), 2);
  c.release(a);
  EXPECT_EQ(c.free_blocks(), 3) << "only a's own third block is free: b and d hold the first two";
  c.release(d);
  EXPECT_EQ(c.free_blocks(), 3);
  SeqKv stale = b;
  c.release(b);
  EXPECT_EQ(c.free_blocks(), 6);
  EXPECT_THROW(c.release(stale), CheckFailure) << "a block released more often than it was held";
}

TEST(KvCache, SharingAPartialBlockNeedsAFreeBlock) {
  KvCache c(shape(), 2, 4);
  SeqKv a, b;
  ASSERT_TRUE(c.reserve(a, 8));
  a.length = 6;
  EXPECT_FALSE(c.share_prefix(a, b, 6));  // 1 whole block, 2 entries to copy, no free block
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_EQ(b.length, 0);
  EXPECT_TRUE(c.share_prefix(a, b, 4));
  c.release(a);
  EXPECT_EQ(c.free_blocks(), 1);
  c.release(b);
  EXPECT_EQ(c.free_blocks(), 2);
}

TEST(KvCache, BlocksForBytes) {
  // 2 layers * K,V * 4 slots * 1 head * 2 dims * 4 bytes = 128 bytes per block
  EXPECT_EQ(KvCache::blocks_for_bytes(shape(), 4, 1000), 7);
  EXPECT_THROW(KvCache(shape(), 0, 4), Error);
}

}  // namespace
}  // namespace updraft
