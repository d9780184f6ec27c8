// Measures what this machine can do, so benchmarks report fractions of it:
// the streaming read bandwidth (all threads, a buffer far larger than the caches) and the
// f32 FMA peak (all threads, register-resident independent FMA chains).
#pragma once

#include <cstddef>

#include "kernels/ops/gemm.h"

namespace updraft::bench {

struct MachineLimits {
  double read_gbps = 0;   // GB/s (1e9 bytes)
  double fma_gflops = 0;  // GFLOP/s, an FMA counted as 2
  int threads = 0;
  bool avx512 = false;
};

MachineLimits probe_machine(size_t buffer_bytes = size_t{1} << 30);

// Read bandwidth (GB/s, all threads, best of 5 passes) over a buffer of `bytes`: memory's when it
// exceeds the caches, the last-level cache's when it fits (as a model's weights read every step).
double probe_read_gbps(size_t bytes);

// The process's bf16 kernel's compute peak (GFLOP/s, all threads): kFma, kAvx2 and kPortable the f32
// FMA peak, kDot and kAmx their instructions' measured issue rates.
double bf16_peak_gflops(const MachineLimits& m, ops::CpuBf16Kernel kernel);

// Kernels used by the probe; the AVX-512 ones live in machine_probe_avx512.cc.
double read_sum_avx512(const float* p, size_t n);
double read_sum8_avx512(const float* p, size_t stride, size_t n);  // 8 streams, stride apart
double fma_loop_avx512(long iters);
double read_sum_generic(const float* p, size_t n);
double fma_loop_generic(long iters);
double fma_loop_avx2(long iters);  // only where ops::cpu::cpu_has_avx2_fma()

}  // namespace updraft::bench
