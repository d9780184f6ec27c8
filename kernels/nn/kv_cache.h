// Paged key/value cache of the policy: per layer, K and V tensors of NSLOT = num_blocks *
// block_size rows [NSLOT, NKV, HD]; sequences hold whole blocks through their block list, so
// sequences of any length share one pool without fragmentation. A block may be held by several
// sequences (share_prefix: a common prompt's entries); it is free once none holds it.
//
// A SeqKv records a sequence's blocks and how many positions are cached (`length`; entry j of
// the sequence lives in slot blocks[j / block_size] * block_size + j % block_size). Its blocks
// belong to the cache it was reserved from; release() gives them back. Not thread-safe: one
// engine thread owns a cache.
//
// Life of a step: reserve(seq, length + n) before a forward that appends n entries; the forward
// writes them and advances length; keep() then compacts the appended entries to the accepted
// subset (tree verification), or truncate() drops a suffix. Blocks return to the pool only
// through release(), so a sequence keeps what it reserved for its whole life.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops/paged_attention.h"

namespace updraft {

struct KvCacheShape {
  int64_t layers = 0, kv_heads = 0, head_dim = 0;
  DType dtype = DType::F32;
  Device device = Device::CPU;
};

struct SeqKv {
  std::vector<int32_t> blocks;
  int64_t length = 0;
};

class KvCache {
 public:
  KvCache(const KvCacheShape& shape, int64_t num_blocks, int64_t block_size);
  // The bytes of one block (K and V of every layer) for this shape.
  static int64_t block_bytes(const KvCacheShape& shape, int64_t block_size);
  // The number of blocks that fit in `bytes` for this shape (at least 1 block is required).
  static int64_t blocks_for_bytes(const KvCacheShape& shape, int64_t block_size, int64_t bytes);

  const KvCacheShape& shape() const { return shape_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t bytes() const;  // of the K and V tensors of every layer
  int64_t blocks_needed(int64_t length) const { return (length + block_size_ - 1) / block_size_; }
  ops::PagedKv layer(int64_t l) const { return {k_[l], v_[l], block_size_}; }

  // Grows seq's block list to hold `length` entries; false (nothing allocated) when the pool
  // has too few free blocks.
  bool reserve(SeqKv& seq, int64_t length);
  void release(SeqKv& seq);
  int64_t slot(const SeqKv& seq, int64_t pos) const;

  // Of the entries [prefix, seq.length), keeps those at offsets `keep` (ascending, relative to
  // prefix) and moves them to prefix, prefix+1, ...; seq.length becomes prefix + keep.size().
  void keep(SeqKv& seq, int64_t prefix, const std::vector<int64_t>& keep);
  void truncate(SeqKv& seq, int64_t length);
  // Entries [0, n) of `from` become `to`'s first n entries (to.length = n): the whole blocks
  // among them are shared (each block counts its holders and goes back to the pool when the last
  // one releases it), the entries of a last partial block are copied into a block of `to`'s own.
  // False (nothing changed) when the pool has no block for that copy. REQUIRES: n <= from.length
  // and `to` holds no block. Shared blocks are never written: a sequence writes only at its own
  // length and after (forwards, keep(), truncate()), which lies past them; the prefix reuse that
  // calls this (rollout/engine/prefix_reuse.h) takes entries no sequence rewrites.
  bool share_prefix(const SeqKv& from, SeqKv& to, int64_t n);
  int32_t holders(int32_t block) const { return holders_[static_cast<size_t>(block)]; }
  // Blocks share_prefix(from, to, n) would share (n / block_size).
  int64_t shared_blocks(int64_t n) const { return n / block_size_; }
  // Gives back the blocks beyond what seq.length needs.
  void shrink(SeqKv& seq);

 private:
  KvCacheShape shape_;
  int64_t num_blocks_, block_size_;
  std::vector<Tensor> k_, v_;
  std::vector<int32_t> free_;     // a stack of free block ids
  std::vector<int32_t> holders_;  // [block]: sequences holding it (0: free)
  void drop(int32_t block);       // one holder less
};

}  // namespace updraft
