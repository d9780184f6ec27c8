// CUDA optimiser ops. adamw_update and scale_ spell every operation as a correctly rounded
// intrinsic (__fmul_rn, __fadd_rn, ...), which nvcc never contracts into an FMA, so they match
// the CPU backend bit for bit. sum_squares reduces each chunk in a fixed tree and adds the
// chunk sums on the host in chunk order: deterministic, though not bitwise equal to the CPU.
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/ops/optim_backend.h"

namespace updraft::ops::cuda {
namespace {

using namespace ::updraft::cuda;

constexpr int kSumThreads = 256;

// One block per chunk; thread t adds elements t, t + 256, ... of the chunk in double.
__global__ void sum_squares_kernel(const float* __restrict__ x, int64_t n, double* __restrict__ partial) {
  const int64_t begin = int64_t{blockIdx.x} * kSumSquaresChunk;
  const int64_t end = begin + kSumSquaresChunk < n ? begin + kSumSquaresChunk : n;
  double acc = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = x[i];
    acc += v * v;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0)
    partial[blockIdx.x] = acc;
}

__global__ void scale_kernel(float* __restrict__ x, int64_t n, float s) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = __fmul_rn(x[i], s);
}

__global__ void adamw_kernel(float* __restrict__ w, const float* __restrict__ grad, float* __restrict__ m,
                             float* __restrict__ v, int64_t n, AdamWCoefficients c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = __fmul_rn(grad[i], c.grad_scale);
    const float p = __fmul_rn(w[i], c.decay);
    const float mi = __fadd_rn(__fmul_rn(c.beta1, m[i]), __fmul_rn(c.one_minus_beta1, g));
    const float vi = __fadd_rn(__fmul_rn(c.beta2, v[i]), __fmul_rn(c.one_minus_beta2, __fmul_rn(g, g)));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), c.bc2_sqrt), c.eps);
    m[i] = mi;
    v[i] = vi;
    w[i] = __fsub_rn(p, __fmul_rn(c.step_size, __fdiv_rn(mi, denom)));
  }
}

}  // namespace

void sum_squares(const Tensor& x, double& out) {
  const int64_t n = x.numel();
  const int64_t chunks = ceil_div(n, kSumSquaresChunk);
  Scratch partial(static_cast<size_t>(chunks) * sizeof(double));
  sum_squares_kernel<<<static_cast<unsigned>(chunks), kSumThreads, 0, stream()>>>(x.data<float>(), n,
                                                                                  partial.get<double>());
  UPD_CUDA_CHECK_LAUNCH();
  std::vector<double> host(static_cast<size_t>(chunks));
  UPD_CUDA_CHECK(cudaMemcpyAsync(host.data(), partial.get<double>(), host.size() * sizeof(double),
                                 cudaMemcpyDeviceToHost, stream()));
  UPD_CUDA_CHECK(cudaStreamSynchronize(stream()));
  double total = 0;
  for (double s : host)
    total += s;
  out = total;
}

void scale_(Tensor& x, float s) {
  const int64_t n = x.numel();
  scale_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream()>>>(x.data<float>(), n, s);
  UPD_CUDA_CHECK_LAUNCH();
}

void adamw_update(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, const AdamWCoefficients& c) {
  const int64_t n = value.numel();
  adamw_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream()>>>(value.data<float>(), grad.data<float>(),
                                                                            m.data<float>(), v.data<float>(), n, c);
  UPD_CUDA_CHECK_LAUNCH();
}

}  // namespace updraft::ops::cuda
