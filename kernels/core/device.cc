#include "kernels/core/device.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kernels/core/error.h"
#include "kernels/core/host_arena.h"
#include "kernels/core/small_host_blocks.h"

#ifdef UPDRAFT_WITH_CUDA
#include "kernels/cuda/cuda_check.h"
#endif

namespace updraft {

const char* device_name(Device d) {
  return d == Device::CPU ? "cpu" : "cuda";
}

bool cuda_compiled() {
#ifdef UPDRAFT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_available() {
#ifdef UPDRAFT_WITH_CUDA
  static const bool available = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no driver" error
      return false;
    }
    return n > 0;
  }();
  return available;
#else
  return false;
#endif
}

namespace {

// Host blocks from 4 MiB up (KV caches, large activations, weights loaded whole) are whole huge
// pages, advised as such (host_arena.h): their rounding costs address space, not memory, as
// pages never touched are never backed.
constexpr size_t kHugeFrom = size_t{4} << 20;

void* raw_alloc(Device d, size_t bytes) {
  if (d == Device::CPU) {
    if (bytes >= kHugeFrom) {
      const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
      void* p = std::aligned_alloc(kHugePageBytes, rounded);
      if (p != nullptr)
        advise_huge_pages(p, rounded);
      return p;
    }
    size_t rounded = (bytes + 63) / 64 * 64;
    return std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  }
#ifdef UPDRAFT_WITH_CUDA
  void* p = nullptr;
  if (cudaMalloc(&p, bytes == 0 ? 1 : bytes) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
#else
  UPD_FAIL() << "built without CUDA: cannot allocate device memory";
  return nullptr;
#endif
}

void raw_free(Device d, void* p) noexcept {
  if (d == Device::CPU) {
    std::free(p);
    return;
  }
#ifdef UPDRAFT_WITH_CUDA
  cudaFree(p);  // errors here cannot be reported from a destructor path; the next call sees them
#endif
}

// Blocks are recycled instead of returned: a decode step allocates the same activation and
// logit buffers every time. On the host, fresh pages cost a page fault each, so blocks from
// 256 KiB up are kept (smaller ones are kept per thread, small_host_blocks.h). On a GPU every block is kept, however
// small: cudaMalloc is a driver call and cudaFree synchronises the whole device, and a decode step
// of a small model allocates hundreds of temporaries of a few KiB (freeing each made a batch-1
// step of the built-in policy take 3.2 ms on an H200). Sizes are rounded to 8 classes per power
// of two (<= 12.5% waste; 512 bytes at least on a GPU), and a request takes the smallest idle
// block of its class or up to twice it (kReuseSlack). At most kMaxIdle bytes per device wait
// for reuse. A host free past the budget returns the blocks idle the longest until it fits (the
// demo's engines, one per policy version, left their KV caches' blocks filling the budget, and
// every later free was returned: 4.4 GiB over a run); a device free that would go past it first
// returns every idle device block (of all threads), so that blocks nobody will reuse (a dropped
// model's weights, another thread's) cannot keep the budget full and send every later free to
// cudaFree and its device-wide wait.
//
// A device block is reused only by the thread that freed it. Each thread queues its work on its
// own stream (kernels/cuda/context.cu), and work queued before the free on that stream runs
// before anything queued after the reuse; another thread's stream is not ordered with it, and a
// kernel still queued there could read the block after its new owner wrote it. A thread's idle
// device blocks are returned when it exits (cudaFree waits for the device). This rests on a
// contract for device_free's callers: a thread frees a device tensor only once no other thread's
// queued work still uses it (a worker's step ends by copying its logits to the host, which waits
// for its stream). Host blocks have no queued work: any thread reuses them.
class BlockCache {
 public:
  static constexpr size_t kMinHost = size_t{256} << 10, kMinDevice = 512, kMaxIdle = size_t{1} << 30;
  // An idle block serves a request up to this many times smaller than it (the smallest such
  // block): a buffer's size often moves a class or two from one step to the next (a training
  // step's activations follow its token count), and a fresh host block costs a page fault and a
  // zeroed page for every page it touches.
  static constexpr size_t kReuseSlack = 2;
  struct Idle {
    void* p;
    uint64_t freed;  // when it was freed (a count of frees): the oldest host block goes first
  };
  using Pool = std::multimap<size_t, Idle>;  // size class -> idle block

  static size_t size_class(Device d, size_t bytes) {
    if (d == Device::CPU && bytes < kMinHost)
      return 0;
    return round_to_size_class(bytes, kMinDevice, 8);
  }

  void* alloc(Device d, size_t bytes) {
    const size_t cls = size_class(d, bytes);
    if (cls == 0)  // a small host block
      return small_host::alloc(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto pool = idle_.find(owner(d));
      if (pool != idle_.end()) {
        auto it = pool->second.lower_bound(cls);
        if (it != pool->second.end() && it->first <= kReuseSlack * cls) {
          void* p = it->second.p;
          live_[p] = it->first;  // freed back to its own class
          idle_bytes_ -= it->first;
          pool->second.erase(it);
          return p;
        }
      }
    }
    void* p = raw_alloc(d, cls);
    if (p == nullptr) {  // give the idle blocks back and try once more
      release_idle(d);
      p = raw_alloc(d, cls);
    }
    if (p != nullptr) {
      std::lock_guard<std::mutex> lock(mu_);
      live_[p] = cls;
    }
    return p;
  }

  void free(Device d, void* p) noexcept;

  // Returns every idle block (all threads'), or those `thread` freed.
  void release_idle(Device d) noexcept {
    release(d, [](const std::thread::id&) { return true; });
  }
  void release_thread(Device d, std::thread::id thread) noexcept {
    release(d, [&](const std::thread::id& t) { return t == thread; });
  }

 private:
  static std::thread::id owner(Device d) { return d == Device::CPU ? std::thread::id{} : std::this_thread::get_id(); }

  template <typename Which>
  void release(Device d, Which which) noexcept {
    std::vector<void*> gone;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto pool = idle_.begin(); pool != idle_.end();) {
        if (!which(pool->first)) {
          ++pool;
          continue;
        }
        for (auto& [cls, idle] : pool->second) {
          idle_bytes_ -= cls;
          gone.push_back(idle.p);
        }
        pool = idle_.erase(pool);
      }
    }
    for (void* p : gone)
      raw_free(d, p);
  }

  std::mutex mu_;
  std::unordered_map<void*, size_t> live_;
  // Host: releases the longest idle blocks (into `gone`) until `cls` more bytes fit the budget;
  // none for a block over the whole budget, which is returned itself (mu_ held).
  void make_room(size_t cls, std::vector<void*>& gone) {
    if (cls > kMaxIdle)
      return;
    Pool& pool = idle_[owner(Device::CPU)];
    while (idle_bytes_ + cls > kMaxIdle && !pool.empty()) {
      auto oldest = pool.begin();
      for (auto it = pool.begin(); it != pool.end(); ++it)
        if (it->second.freed < oldest->second.freed)
          oldest = it;
      idle_bytes_ -= oldest->first;
      gone.push_back(oldest->second.p);
      pool.erase(oldest);
    }
  }

  std::map<std::thread::id, Pool> idle_;  // by the thread that freed the blocks (host: one pool)
  uint64_t frees_ = 0;
  size_t idle_bytes_ = 0;
};

// Never destroyed: tensors in static storage may be freed after main returns.
BlockCache& block_cache(Device d) {
  static BlockCache* caches = new BlockCache[2];
  return caches[d == Device::CPU ? 0 : 1];
}

// Returns the thread's idle device blocks when it exits (registered by its first device free).
struct ReleaseAtThreadExit {
  ~ReleaseAtThreadExit() { block_cache(Device::CUDA).release_thread(Device::CUDA, std::this_thread::get_id()); }
};

void BlockCache::free(Device d, void* p) noexcept {
  size_t cls = 0;
  std::vector<void*> gone;  // host blocks idle the longest, let go to make room (after the lock)
  // Files p as idle if the budget allows (mu_ held).
  auto keep = [&] {
    if (idle_bytes_ + cls > kMaxIdle)
      return false;
    idle_[owner(d)].emplace(cls, Idle{p, ++frees_});
    idle_bytes_ += cls;
    p = nullptr;
    return true;
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it != live_.end()) {
      cls = it->second;
      live_.erase(it);
      if (d == Device::CPU)
        make_room(cls, gone);
      keep();
    }
  }
  for (void* q : gone)
    raw_free(d, q);
  if (p != nullptr && d != Device::CPU && cls != 0 && cls <= kMaxIdle) {  // over: return every idle block first
    release_idle(d);
    std::lock_guard<std::mutex> lock(mu_);
    keep();
  }
  if (p == nullptr) {
    if (d != Device::CPU) {
      thread_local ReleaseAtThreadExit hook;  // constructed once per thread, destroyed at its exit
      (void)hook;
    }
    return;
  }
  raw_free(d, p);
}

}  // namespace

void* device_alloc(Device d, size_t bytes) {
  void* p = block_cache(d).alloc(d, bytes);
  UPD_REQUIRE(p != nullptr) << "out of " << device_name(d) << " memory allocating " << bytes << " bytes";
  return p;
}

void device_free(Device d, void* p, size_t bytes) noexcept {
  if (p == nullptr)
    return;
  if (BlockCache::size_class(d, bytes) == 0)  // a small host block: never in the block cache
    small_host::release(p, bytes);
  else
    block_cache(d).free(d, p);
}

void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  if (bytes == 0)
    return;
  if (dst_dev == Device::CPU && src_dev == Device::CPU) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef UPDRAFT_WITH_CUDA
  cudaMemcpyKind kind = dst_dev == Device::CPU   ? cudaMemcpyDeviceToHost
                        : src_dev == Device::CPU ? cudaMemcpyHostToDevice
                                                 : cudaMemcpyDeviceToDevice;
  cudaStream_t s = cuda::current_stream();
  UPD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
  // A device-to-device copy is ordered before every later use of its destination by the stream,
  // so it does not wait. Copies from or to the host do: the host may free or read its buffer on
  // return (for pageable memory the runtime documents that it "might" have taken the source).
  if (kind != cudaMemcpyDeviceToDevice)
    UPD_CUDA_CHECK(cudaStreamSynchronize(s));
#else
  UPD_FAIL() << "built without CUDA: cannot copy to or from device memory";
#endif
}

void device_zero(void* p, Device d, size_t bytes) {
  if (bytes == 0)
    return;
  if (d == Device::CPU) {
    std::memset(p, 0, bytes);
    return;
  }
#ifdef UPDRAFT_WITH_CUDA
  UPD_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda::current_stream()));
#else
  UPD_FAIL() << "built without CUDA";
#endif
}

void device_sync(Device d) {
  if (d == Device::CPU)
    return;
#ifdef UPDRAFT_WITH_CUDA
  UPD_CUDA_CHECK(cudaStreamSynchronize(cuda::current_stream()));
#endif
}

}  // namespace updraft
