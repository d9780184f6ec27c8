// Checked CUDA / cuBLAS calls and the per-thread stream and cuBLAS handle.
// Only included by CUDA-enabled translation units (UPDRAFT_WITH_CUDA).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/core/error.h"

#define UPD_CUDA_CHECK(call)                                                                                         \
  do {                                                                                                               \
    cudaError_t upd_err_ = (call);                                                                                   \
    if (upd_err_ != cudaSuccess)                                                                                     \
      ::updraft::detail::Thrower(false, __FILE__, __LINE__, nullptr)                                                 \
          << "CUDA error " << cudaGetErrorName(upd_err_) << ": " << cudaGetErrorString(upd_err_) << " in " << #call; \
  } while (0)

#define UPD_CUBLAS_CHECK(call)                                                   \
  do {                                                                           \
    cublasStatus_t upd_st_ = (call);                                             \
    if (upd_st_ != CUBLAS_STATUS_SUCCESS)                                        \
      ::updraft::detail::Thrower(false, __FILE__, __LINE__, nullptr)             \
          << "cuBLAS error " << cublasGetStatusName(upd_st_) << " in " << #call; \
  } while (0)

// Checks the launch of the last kernel (configuration errors surface here).
#define UPD_CUDA_CHECK_LAUNCH() UPD_CUDA_CHECK(cudaGetLastError())

namespace updraft::cuda {

// The stream all updraft CUDA work of the calling thread is queued on (default: the
// per-thread default stream). set_current_stream lets a worker use its own stream.
cudaStream_t current_stream();
void set_current_stream(cudaStream_t s);

// A cuBLAS handle owned by the calling thread, bound to current_stream().
cublasHandle_t cublas_handle();

}  // namespace updraft::cuda
