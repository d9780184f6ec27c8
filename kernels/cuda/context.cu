// The per-thread CUDA stream and cuBLAS handle behind kernels/cuda/cuda_check.h.
#include "kernels/cuda/cuda_check.h"

namespace updraft::cuda {
namespace {

// Each thread queues on its own stream; the per-thread default stream does not serialise
// with other threads' work the way the legacy default stream would.
thread_local cudaStream_t t_stream = cudaStreamPerThread;

// Owns a thread's cuBLAS handle and destroys it at thread exit. Math mode stays the default
// (no TF32) so f32 GEMMs keep full f32 precision and match the CPU backend.
struct CublasHolder {
  cublasHandle_t handle = nullptr;
  CublasHolder() = default;
  CublasHolder(const CublasHolder&) = delete;
  CublasHolder& operator=(const CublasHolder&) = delete;
  ~CublasHolder() {
    if (handle != nullptr)
      cublasDestroy(handle);  // errors at thread exit cannot be reported
  }
};
thread_local CublasHolder t_cublas;

}  // namespace

cudaStream_t current_stream() {
  return t_stream;
}

void set_current_stream(cudaStream_t s) {
  t_stream = s;
}

cublasHandle_t cublas_handle() {
  if (t_cublas.handle == nullptr)
    UPD_CUBLAS_CHECK(cublasCreate(&t_cublas.handle));
  // Rebind on every use: the thread may have switched streams since the last call.
  UPD_CUBLAS_CHECK(cublasSetStream(t_cublas.handle, t_stream));
  return t_cublas.handle;
}

}  // namespace updraft::cuda
