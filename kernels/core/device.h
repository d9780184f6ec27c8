// Devices and raw memory: allocation, freeing and copies between host and device.
//
// Device::CPU memory is 64-byte aligned host memory. Device::CUDA memory comes from
// cudaMalloc on the current CUDA device. In a build without the CUDA backend every CUDA
// request throws updraft::Error("built without CUDA"); cuda_available() says whether a
// usable GPU exists at run time (false on machines without a driver or device).
#pragma once

#include <cstddef>

namespace updraft {

enum class Device : unsigned char { CPU, CUDA };

const char* device_name(Device d);

// True when this build has the CUDA backend and a CUDA device can be used now.
bool cuda_available();
// True when this build was compiled with the CUDA backend (even if no GPU is present).
bool cuda_compiled();

void* device_alloc(Device d, size_t bytes);  // throws Error on failure; bytes may be 0
// p may be null; bytes as asked of device_alloc (host blocks under 256 KiB are kept per thread by
// their size: kernels/core/small_host_blocks.h).
void device_free(Device d, void* p, size_t bytes) noexcept;
// Copies bytes between any two devices; returns when the copy is complete, except from device to
// device: that copy is ordered on the current stream before any later work there.
void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);
// Sets bytes to zero.
void device_zero(void* p, Device d, size_t bytes);
// Waits for all queued work on the CUDA stream of this thread (no-op for CPU).
void device_sync(Device d);

}  // namespace updraft
