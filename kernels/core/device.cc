#include "kernels/core/device.h"

#include <cstdlib>
#include <cstring>

#include "kernels/core/error.h"

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

void* device_alloc(Device d, size_t bytes) {
  if (d == Device::CPU) {
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    UPD_REQUIRE(p != nullptr) << "out of host memory allocating " << bytes << " bytes";
    return p;
  }
#ifdef UPDRAFT_WITH_CUDA
  void* p = nullptr;
  UPD_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  return p;
#else
  UPD_FAIL() << "built without CUDA: cannot allocate device memory";
  return nullptr;
#endif
}

void device_free(Device d, void* p) noexcept {
  if (p == nullptr)
    return;
  if (d == Device::CPU) {
    std::free(p);
    return;
  }
#ifdef UPDRAFT_WITH_CUDA
  cudaFree(p);  // errors here cannot be reported from a destructor path; the next call sees them
#endif
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
