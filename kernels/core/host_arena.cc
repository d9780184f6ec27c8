#include "kernels/core/host_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/core/error.h"

namespace updraft {
namespace {

constexpr size_t kChunkBytes = size_t{32} << 20;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

// Memory of freed chunks kept for the next ones, at most this much: a worker prepares a new copy
// of the policy's weights for each policy version (36 MiB for the built-in policy), and a fresh
// chunk costs a page fault and a zeroed huge page for each 2 MiB it holds (in the demo, packing
// each new version's panels into fresh chunks took 3% of the process's CPU time).
constexpr size_t kIdleChunkBytes = size_t{512} << 20;

class Arena;

struct Chunk {
  Chunk(Arena* a, char* p_, size_t bytes_) : arena(a), p(p_), bytes(bytes_) {}
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;
  ~Chunk();
  Arena* arena;
  char* p;
  size_t bytes;
};

class Arena {
 public:
  std::shared_ptr<void> bytes(size_t n) {
    n = round_up(std::max<size_t>(1, n), 64);
    std::shared_ptr<Chunk> full;  // let go after the lock: it may be the last holder (give_back locks)
    std::lock_guard<std::mutex> lock(mu_);
    if (chunk_ == nullptr || used_ + n > chunk_->bytes) {
      const size_t c = round_up(std::max(n, kChunkBytes), kHugePageBytes);
      full = std::move(chunk_);
      chunk_ = std::make_shared<Chunk>(this, take(c), c);
      used_ = 0;
    }
    char* at = chunk_->p + used_;
    used_ += n;
    return std::shared_ptr<void>(chunk_, at);  // shares the chunk's count
  }

  // A freed chunk's memory: kept for reuse while the idle bytes stay within kIdleChunkBytes.
  void give_back(char* p, size_t c) noexcept {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (idle_bytes_ + c <= kIdleChunkBytes) {
        idle_.push_back({p, c});
        idle_bytes_ += c;
        return;
      }
    }
    std::free(p);
  }

 private:
  struct Idle {
    char* p;
    size_t bytes;
  };

  // c bytes (a multiple of 2 MiB): an idle chunk of exactly that size, else fresh huge pages (mu_ held).
  char* take(size_t c) {
    for (size_t i = 0; i < idle_.size(); ++i)
      if (idle_[i].bytes == c) {
        char* p = idle_[i].p;
        idle_bytes_ -= c;
        idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
        return p;
      }
    auto* p = static_cast<char*>(std::aligned_alloc(kHugePageBytes, c));
    UPD_CHECK(p != nullptr) << "host weights: out of host memory for " << c << " bytes";
    advise_huge_pages(p, c);
    return p;
  }

  std::mutex mu_;
  std::shared_ptr<Chunk> chunk_;
  size_t used_ = 0;
  std::vector<Idle> idle_;
  size_t idle_bytes_ = 0;
};

Chunk::~Chunk() {
  arena->give_back(p, bytes);
}

}  // namespace

namespace {
std::atomic<bool>& huge_pages_on() {
  static std::atomic<bool> on = [] {
    const char* v = std::getenv("UPDRAFT_HUGE_PAGES");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}
}  // namespace

bool host_huge_pages() {
  return huge_pages_on().load();
}

void set_host_huge_pages(bool on) {
  huge_pages_on().store(on);
}

void advise_huge_pages(void* p, size_t bytes) noexcept {
  // Refused (EINVAL) where the kernel has no transparent huge pages: ordinary pages then, which
  // are correct, only slower to stream; there is nothing to report or undo.
  if (host_huge_pages())
    (void)madvise(p, bytes, MADV_HUGEPAGE);
}

std::shared_ptr<void> host_weight_bytes(size_t bytes) {
  // Never destroyed (blocks may outlive static destruction). Chunks made while the advice is off
  // stay ordinary pages, so each setting has its own arena.
  static Arena* arenas[2] = {new Arena(), new Arena()};
  return arenas[host_huge_pages() ? 1 : 0]->bytes(bytes);
}

Tensor host_weight_empty(const Shape& shape, DType dtype) {
  std::shared_ptr<void> at = host_weight_bytes(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
  void* p = at.get();
  return Tensor::wrap(p, shape, dtype, Device::CPU, std::move(at));
}

}  // namespace updraft
