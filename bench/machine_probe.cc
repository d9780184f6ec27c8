#include "bench/machine_probe.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/core/error.h"
#include "kernels/core/host_arena.h"
#include "kernels/ops/gemv_cpu.h"

namespace updraft::bench {

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

double read_sum_generic(const float* p, size_t n) {
  float acc[16] = {};
  for (size_t i = 0; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      acc[j] += p[i + j];
  double s = 0;
  for (float a : acc)
    s += a;
  return s;
}

double fma_loop_generic(long iters) {
  float a[16], b = 1.0000001f, c = 1e-7f;
  for (int j = 0; j < 16; ++j)
    a[j] = static_cast<float>(j);
  for (long i = 0; i < iters; ++i)
    for (int j = 0; j < 16; ++j)
      a[j] = a[j] * b + c;
  double s = 0;
  for (float x : a)
    s += x;
  return s;
}

// 12 chains of 8 lanes: 256-bit FMAs with their latency hidden (CPUs without AVX-512).
__attribute__((target("avx2,fma"))) double fma_loop_avx2(long iters) {
  const __m256 b = _mm256_set1_ps(1.0000001f), c = _mm256_set1_ps(1e-7f);
  __m256 a[12];
  for (int j = 0; j < 12; ++j)
    a[j] = _mm256_set1_ps(static_cast<float>(j));
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j)
      a[j] = _mm256_fmadd_ps(a[j], b, c);
  }
  __m256 s = a[0];
  for (int j = 1; j < 12; ++j)
    s = _mm256_add_ps(s, a[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  double sum = 0;
  for (float x : lanes)
    sum += x;
  return sum;
}

double probe_read_gbps(size_t bytes) {
  const bool avx512 = ops::cpu::cpu_has_avx512();
  const size_t n = bytes / sizeof(float);
  // In the pages the weights are in (host_arena.h): in 4 KiB pages the probe itself pays a page
  // walk per page and reports less than the memory delivers to the kernels.
  const size_t rounded = (n * sizeof(float) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  float* buf = static_cast<float*>(std::aligned_alloc(kHugePageBytes, rounded));
  UPD_CHECK(buf != nullptr) << "probe_read_gbps: out of memory for " << rounded << " bytes";
  advise_huge_pages(buf, rounded);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i)
    buf[i] = 1.0f;  // first touch by the thread that reads it
  double best = 1e30, sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = now();
#pragma omp parallel reduction(+ : sink)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      // Each thread reads its part as 8 streams advancing together, as a GEMV over 8 weight
      // rows does; a single stream per core leaves memory-level parallelism unused and
      // under-reports what the memory system delivers.
      const size_t part = (n / nt) / 8 / 16 * 16;
      const float* p = buf + part * 8 * static_cast<size_t>(t);
      if (avx512) {
        sink += read_sum8_avx512(p, part, part);
      } else {
        for (size_t s = 0; s < 8; ++s)
          sink += read_sum_generic(p + s * part, part);
      }
    }
    best = std::min(best, now() - t0);
  }
  std::free(buf);
  if (sink == 42.0)
    std::abort();  // keep the loop alive
  return static_cast<double>(n * sizeof(float)) / best / 1e9;
}

double bf16_peak_gflops(const MachineLimits& m, ops::CpuBf16Kernel kernel) {
  switch (kernel) {
    case ops::CpuBf16Kernel::kDot:
      return ops::cpu::probe_dpbf16_rate() * 64.0 * m.threads / 1e9;  // 32 products, summed
    case ops::CpuBf16Kernel::kAmx:
      return ops::cpu::probe_amx_rate() * 16384.0 * m.threads / 1e9;  // 16 x 16 x 32 products
    default:
      return m.fma_gflops;
  }
}

MachineLimits probe_machine(size_t buffer_bytes) {
  MachineLimits m;
  m.threads = omp_get_max_threads();
  m.avx512 = ops::cpu::cpu_has_avx512();
  const bool avx2 = ops::cpu::cpu_has_avx2_fma();
  m.read_gbps = probe_read_gbps(buffer_bytes);
  double best = 1e30, sink = 0;

  const long iters = 20'000'000;
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = now();
#pragma omp parallel reduction(+ : sink)
    sink += m.avx512 ? fma_loop_avx512(iters) : avx2 ? fma_loop_avx2(iters) : fma_loop_generic(iters / 4);
    best = std::min(best, now() - t0);
  }
  // avx512 loop: 12 chains x 16 lanes per iteration; avx2: 12 x 8; generic: 16 lanes per
  // iteration, iters/4.
  const double flops = m.avx512 ? 2.0 * 12 * 16 * iters : avx2 ? 2.0 * 12 * 8 * iters : 2.0 * 16 * (iters / 4);
  m.fma_gflops = flops * m.threads / best / 1e9;
  if (sink == 42.0)
    std::abort();  // keep the loops alive
  return m;
}

}  // namespace updraft::bench
