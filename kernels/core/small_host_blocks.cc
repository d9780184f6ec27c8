#include "kernels/core/small_host_blocks.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace updraft::small_host {
namespace {

constexpr size_t kMin = 64;
constexpr int kClasses = 4 * 14;  // 64 bytes to 512 KiB, four classes per power of two

// Where class_bytes(bytes) sits among the classes.
int class_index(size_t cb) {
  size_t p = kMin;
  int k = 0;
  while (p * 2 <= cb) {
    p *= 2;
    ++k;
  }
  return 4 * k + static_cast<int>(cb / (p / 4)) - 4;
}

struct Blocks {
  std::vector<void*> lists[kClasses];
  size_t bytes = 0;
  ~Blocks();
};

// Set when this thread's Blocks are destroyed: a trivially destructible flag stays readable after.
thread_local bool gone = false;
thread_local Blocks blocks;

Blocks::~Blocks() {
  gone = true;
  for (std::vector<void*>& l : lists)
    for (void* p : l)
      std::free(p);
}

}  // namespace

size_t class_bytes(size_t bytes) {
  return round_to_size_class(bytes, kMin, 4);
}

void* alloc(size_t bytes) {
  const size_t cb = class_bytes(bytes);
  const int c = class_index(cb);
  if (!gone && c < kClasses) {
    std::vector<void*>& l = blocks.lists[c];
    if (!l.empty()) {
      void* p = l.back();
      l.pop_back();
      blocks.bytes -= cb;
      return p;
    }
  }
  return std::aligned_alloc(kMin, cb);
}

void release(void* p, size_t bytes) noexcept {
  const size_t cb = class_bytes(bytes);
  const int c = class_index(cb);
  if (!gone && c < kClasses) {
    std::vector<void*>& l = blocks.lists[c];
    if (l.size() < kPerClass && blocks.bytes + cb <= kMaxBytes) {
      if (l.capacity() == 0) {
        try {
          l.reserve(kPerClass);  // the list's only allocation
        } catch (...) {
          std::free(p);
          return;
        }
      }
      l.push_back(p);
      blocks.bytes += cb;
      return;
    }
  }
  std::free(p);
}

}  // namespace updraft::small_host

namespace updraft {

size_t round_to_size_class(size_t bytes, size_t min_bytes, size_t steps) {
  bytes = std::max(bytes, min_bytes);
  size_t p = 1;
  while (p * 2 <= bytes)
    p *= 2;
  const size_t step = std::max<size_t>(1, p / steps);
  return (bytes + step - 1) / step * step;
}

}  // namespace updraft
