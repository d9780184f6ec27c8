// Host memory in transparent huge pages, for the bytes the CPU kernels stream at every step.
//
// A decode step of the built-in policy reads 36 MiB of weights: 9216 pages of 4 KiB, more than
// the second-level TLB of current cores maps (3072 entries on Zen 4), so each page of each step
// cost a page walk, and the hardware prefetchers stop at every page boundary. In 2 MiB pages the
// same bytes are 18 pages. On Zen 4 (2 threads, the policy's products, scratch harness taking
// turns) one row's products ran 1.15-1.2x faster from huge pages, 8-16 rows 1.25-1.35x.
//
// host_weight_empty: a CPU tensor carved from 2 MiB-aligned chunks of at least 32 MiB that are
//   advised to the kernel as huge pages (madvise MADV_HUGEPAGE), for long-lived tensors that
//   are read far more than written (ops::prepare_linear's panels). Tensors share their chunk,
//   whose memory goes back to the arena with its last tensor (the arena keeps the chunk it is
//   filling, and up to 512 MiB of freed chunks for the next ones: a worker packs each policy
//   version's weights anew). 64-byte aligned. Thread-safe.
// host_weight_bytes: the same, as `bytes` raw bytes (64-byte aligned) held by the pointer.
// StreamedWeights<T>: a buffer of T there, for weight copies that are not tensors.
// advise_huge_pages: the same advice for [p, p + bytes) where p and bytes are multiples of 2 MiB
//   (device_alloc's large host blocks use it).
// Where transparent huge pages are off ("never", or a kernel without them) the advice is
// refused and the memory is ordinary pages; nothing else changes. UPDRAFT_HUGE_PAGES=0 in the
// environment turns the advice off (read once); host_huge_pages() says whether it is given, and
// set_host_huge_pages() changes that for later allocations (benchmarks compare the two).
#pragma once

#include <cstddef>
#include <memory>

#include "kernels/core/tensor.h"

namespace updraft {

constexpr size_t kHugePageBytes = size_t{2} << 20;

Tensor host_weight_empty(const Shape& shape, DType dtype);
std::shared_ptr<void> host_weight_bytes(size_t bytes);
void advise_huge_pages(void* p, size_t bytes) noexcept;
bool host_huge_pages();
void set_host_huge_pages(bool on);

template <typename T>
class StreamedWeights {
 public:
  // n elements, uninitialised; the former ones are dropped.
  void resize(size_t n) {
    block_ = n == 0 ? nullptr : host_weight_bytes(n * sizeof(T));
    n_ = n;
  }
  T* data() { return static_cast<T*>(block_.get()); }
  const T* data() const { return static_cast<const T*>(block_.get()); }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

 private:
  std::shared_ptr<void> block_;
  size_t n_ = 0;
};

}  // namespace updraft
