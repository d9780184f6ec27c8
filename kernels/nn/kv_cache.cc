#include "kernels/nn/kv_cache.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace updraft {
namespace {

// Every element of a host tensor of floats NaN (f32; bf16 and f16 share the pattern 0x7fc0).
void fill_nan(Tensor& t) {
  if (t.dtype() == DType::F32) {
    std::fill_n(t.data<float>(), t.numel(), std::numeric_limits<float>::quiet_NaN());
    return;
  }
  UPD_CHECK(dtype_size(t.dtype()) == 2) << "KV cache: no NaN for a cache of " << dtype_size(t.dtype())
                                        << "-byte values";
  std::fill_n(static_cast<uint16_t*>(t.raw()), t.numel(), uint16_t{0x7fc0});
}

}  // namespace

KvCache::KvCache(const KvCacheShape& shape, int64_t num_blocks, int64_t block_size)
    : shape_(shape), num_blocks_(num_blocks), block_size_(block_size) {
  UPD_REQUIRE(num_blocks > 0 && block_size > 0)
      << "KV cache: need at least one block (got " << num_blocks << " blocks of " << block_size << ")";
  UPD_REQUIRE(num_blocks <= INT32_MAX) << "KV cache: too many blocks";
  const Shape s{num_blocks * block_size, shape.kv_heads, shape.head_dim};
  // Host caches are not cleared: no kernel reads an entry before a forward, keep() or
  // share_prefix() wrote it, and clearing cost a fresh page fault and a write for every page of a
  // cache that is mostly never used (a worker builds one per engine, and an engine per policy
  // version: in the demo, page clearing took 8% of the process's CPU time). Device caches are
  // cleared (one memset on the device), so that no kernel there ever meets stale bit patterns.
  // UPDRAFT_KV_POISON=1 fills new host caches with NaN instead: a read of an unwritten entry then
  // shows in the logits (the engine tests' check of the contract above; a debugging aid).
  const bool host = shape.device == Device::CPU;
  for (int64_t l = 0; l < shape.layers; ++l) {
    k_.push_back(host ? Tensor::empty(s, shape.dtype, shape.device) : Tensor::zeros(s, shape.dtype, shape.device));
    v_.push_back(host ? Tensor::empty(s, shape.dtype, shape.device) : Tensor::zeros(s, shape.dtype, shape.device));
  }
  const char* poison = std::getenv("UPDRAFT_KV_POISON");
  if (host && poison != nullptr && std::strcmp(poison, "0") != 0)
    for (std::vector<Tensor>* c : {&k_, &v_})
      for (Tensor& t : *c)
        fill_nan(t);
  for (int64_t b = num_blocks - 1; b >= 0; --b)
    free_.push_back(static_cast<int32_t>(b));
  holders_.assign(static_cast<size_t>(num_blocks), 0);
}

void KvCache::drop(int32_t block) {
  UPD_CHECK(holders_[static_cast<size_t>(block)] > 0) << "KV cache: block " << block << " released twice";
  if (--holders_[static_cast<size_t>(block)] == 0)
    free_.push_back(block);
}

int64_t KvCache::block_bytes(const KvCacheShape& s, int64_t block_size) {
  return 2 * s.layers * block_size * s.kv_heads * s.head_dim * dtype_size(s.dtype);
}

int64_t KvCache::blocks_for_bytes(const KvCacheShape& s, int64_t block_size, int64_t bytes) {
  const int64_t per_block = block_bytes(s, block_size);
  return per_block > 0 ? bytes / per_block : 0;
}

int64_t KvCache::bytes() const {
  return num_blocks_ * block_bytes(shape_, block_size_);
}

bool KvCache::reserve(SeqKv& seq, int64_t length) {
  const int64_t need = blocks_needed(length) - static_cast<int64_t>(seq.blocks.size());
  if (need <= 0)
    return true;
  if (need > free_blocks())
    return false;
  for (int64_t i = 0; i < need; ++i) {
    seq.blocks.push_back(free_.back());
    holders_[static_cast<size_t>(free_.back())] = 1;
    free_.pop_back();
  }
  return true;
}

void KvCache::release(SeqKv& seq) {
  for (auto it = seq.blocks.rbegin(); it != seq.blocks.rend(); ++it)
    drop(*it);
  seq.blocks.clear();
  seq.length = 0;
}

int64_t KvCache::slot(const SeqKv& seq, int64_t pos) const {
  UPD_CHECK(pos >= 0 && pos / block_size_ < static_cast<int64_t>(seq.blocks.size()))
      << "KV cache: position " << pos << " beyond the sequence's " << seq.blocks.size() << " blocks";
  return static_cast<int64_t>(seq.blocks[pos / block_size_]) * block_size_ + pos % block_size_;
}

void KvCache::keep(SeqKv& seq, int64_t prefix, const std::vector<int64_t>& keep) {
  UPD_CHECK(prefix >= 0 && prefix <= seq.length) << "KV keep: prefix " << prefix << " > length " << seq.length;
  std::vector<int32_t> src, dst;
  for (size_t m = 0; m < keep.size(); ++m) {
    UPD_CHECK(keep[m] >= 0 && prefix + keep[m] < seq.length && (m == 0 || keep[m] > keep[m - 1]))
        << "KV keep: offsets must be ascending and inside the appended entries";
    if (keep[m] != static_cast<int64_t>(m)) {
      src.push_back(static_cast<int32_t>(slot(seq, prefix + keep[m])));
      dst.push_back(static_cast<int32_t>(slot(seq, prefix + static_cast<int64_t>(m))));
    }
  }
  if (!src.empty()) {
    // Gather the kept rows first: a kept row may sit where another one must go.
    const int64_t M = static_cast<int64_t>(src.size());
    Tensor si = Tensor::from_i32(src, {M}), di = Tensor::from_i32(dst, {M});
    std::vector<int32_t> seqi(src.size());
    for (int64_t m = 0; m < M; ++m)
      seqi[m] = static_cast<int32_t>(m);
    Tensor ti = Tensor::from_i32(seqi, {M});
    Tensor tmp = Tensor::empty({M, shape_.kv_heads, shape_.head_dim}, shape_.dtype, shape_.device);
    for (int64_t l = 0; l < shape_.layers; ++l)
      for (Tensor* c : {&k_[l], &v_[l]}) {
        ops::copy_rows(*c, si, tmp, ti);
        ops::copy_rows(tmp, ti, *c, di);
      }
  }
  truncate(seq, prefix + static_cast<int64_t>(keep.size()));
}

void KvCache::truncate(SeqKv& seq, int64_t length) {
  UPD_CHECK(length >= 0 && length <= seq.length) << "KV truncate to " << length << " > length " << seq.length;
  seq.length = length;  // blocks stay reserved until release()
}

bool KvCache::share_prefix(const SeqKv& from, SeqKv& to, int64_t n) {
  UPD_CHECK(n >= 0 && n <= from.length && to.blocks.empty())
      << "KV share_prefix: " << n << " entries from a sequence of " << from.length << " into one holding "
      << to.blocks.size() << " blocks";
  const int64_t whole = shared_blocks(n), rest = n - whole * block_size_;
  if (rest > 0 && free_.empty())
    return false;
  for (int64_t b = 0; b < whole; ++b) {
    to.blocks.push_back(from.blocks[static_cast<size_t>(b)]);
    ++holders_[static_cast<size_t>(to.blocks.back())];
  }
  to.length = whole * block_size_;
  if (rest > 0) {
    UPD_CHECK(reserve(to, n)) << "KV share_prefix: no block after the free-block check";
    std::vector<int32_t> src(static_cast<size_t>(rest)), dst(static_cast<size_t>(rest));
    for (int64_t p = 0; p < rest; ++p) {
      src[static_cast<size_t>(p)] = static_cast<int32_t>(slot(from, whole * block_size_ + p));
      dst[static_cast<size_t>(p)] = static_cast<int32_t>(slot(to, whole * block_size_ + p));
    }
    const Tensor si = Tensor::from_i32(src, {rest}), di = Tensor::from_i32(dst, {rest});
    for (int64_t l = 0; l < shape_.layers; ++l) {
      ops::copy_rows(k_[l], si, k_[l], di);
      ops::copy_rows(v_[l], si, v_[l], di);
    }
  }
  to.length = n;
  return true;
}

void KvCache::shrink(SeqKv& seq) {
  while (static_cast<int64_t>(seq.blocks.size()) > blocks_needed(seq.length)) {
    drop(seq.blocks.back());
    seq.blocks.pop_back();
  }
}

}  // namespace updraft
