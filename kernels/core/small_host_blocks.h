// Host blocks under the block cache's smallest kept size (device.cc, 256 KiB): the activations,
// index lists and logits a forward allocates and frees by the dozen (a draft step about 25).
// Each thread keeps up to kPerClass freed blocks of each size class (four classes per power of
// two, so a block is at most 25% larger than asked) and kMaxBytes in all, and hands them to its
// next requests of that class: no allocator call and no lock. A block freed on another thread
// joins that thread's blocks. Memory is 64-byte aligned. Blocks freed after the thread's blocks
// are gone (at the thread's or the process's exit) go back to the allocator.
#pragma once

#include <cstddef>

namespace updraft::small_host {

constexpr size_t kPerClass = 8, kMaxBytes = size_t{2} << 20;

void* alloc(size_t bytes);                     // nullptr when the allocator fails
void release(void* p, size_t bytes) noexcept;  // bytes as asked of alloc; p not null
size_t class_bytes(size_t bytes);              // what a request of `bytes` takes

}  // namespace updraft::small_host

namespace updraft {

// bytes (at least min_bytes) rounded up to one of `steps` sizes from each power of two to the next
// (steps a power of two): the size classes of the small blocks here and of device.cc's block cache.
size_t round_to_size_class(size_t bytes, size_t min_bytes, size_t steps);

}  // namespace updraft
