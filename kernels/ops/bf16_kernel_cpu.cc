// The process's CPU bf16 kernel for linear() (gemm.h): chosen once from the CPU's features unless
// set explicitly.
#include <atomic>
#include <mutex>
#include <string>

#include "kernels/core/error.h"
#include "kernels/ops/gemm.h"
#include "kernels/ops/gemv_cpu.h"

namespace updraft::ops {
namespace {

std::atomic<CpuBf16Kernel> g_kernel{CpuBf16Kernel::kAuto};

// AMX tiles where the CPU has them (with weights in panels, ops::prepare_linear, one decode row
// runs as fast as vdpbf16ps and 5 to 16 rows 1.2-3.4x faster; prefill 6-7x), else vdpbf16ps
// where the CPU has AVX512-BF16, else widening + FMA on AVX-512, else the portable path
// (kernels_bench's policy-shapes table, docs/benchmarks.md), else the same in 256-bit vectors with
// AVX2 and FMA (on an AVX2-only Zen 1 host 2-3x the portable path's speed), else the portable path.
CpuBf16Kernel resolve_auto() {
  if (cpu::cpu_has_amx_bf16())
    return CpuBf16Kernel::kAmx;
  if (cpu::cpu_has_avx512_bf16())
    return CpuBf16Kernel::kDot;
  if (cpu::cpu_has_avx512())
    return CpuBf16Kernel::kFma;
  return cpu::cpu_has_avx2_fma() ? CpuBf16Kernel::kAvx2 : CpuBf16Kernel::kPortable;
}

}  // namespace

bool cpu_bf16_kernel_available(CpuBf16Kernel k) {
  switch (k) {
    case CpuBf16Kernel::kAuto:
    case CpuBf16Kernel::kPortable:
      return true;
    case CpuBf16Kernel::kFma:
      return cpu::cpu_has_avx512();
    case CpuBf16Kernel::kAvx2:
      return cpu::cpu_has_avx2_fma();
    case CpuBf16Kernel::kDot:
      return cpu::cpu_has_avx512_bf16();
    case CpuBf16Kernel::kAmx:
      return cpu::cpu_has_amx_bf16();
  }
  return false;
}

void set_cpu_bf16_kernel(CpuBf16Kernel k) {
  UPD_CHECK(cpu_bf16_kernel_available(k))
      << "cpu bf16 kernel '" << cpu_bf16_kernel_name(k) << "' is not available on this CPU";
  g_kernel.store(k == CpuBf16Kernel::kAuto ? resolve_auto() : k);
}

CpuBf16Kernel cpu_bf16_kernel() {
  CpuBf16Kernel k = g_kernel.load(std::memory_order_relaxed);
  if (k != CpuBf16Kernel::kAuto)
    return k;
  static std::once_flag once;
  std::call_once(once, [] {
    CpuBf16Kernel expected = CpuBf16Kernel::kAuto;
    g_kernel.compare_exchange_strong(expected, resolve_auto());
  });
  return g_kernel.load();
}

const char* cpu_bf16_kernel_name(CpuBf16Kernel k) {
  switch (k) {
    case CpuBf16Kernel::kAuto: return "auto";
    case CpuBf16Kernel::kPortable: return "portable";
    case CpuBf16Kernel::kFma: return "fma";
    case CpuBf16Kernel::kAvx2:
      return "avx2";
    case CpuBf16Kernel::kDot: return "dot";
    case CpuBf16Kernel::kAmx: return "amx";
  }
  return "?";
}

CpuBf16Kernel parse_cpu_bf16_kernel(std::string_view name) {
  for (CpuBf16Kernel k : {CpuBf16Kernel::kAuto, CpuBf16Kernel::kPortable, CpuBf16Kernel::kAvx2, CpuBf16Kernel::kFma,
                          CpuBf16Kernel::kDot, CpuBf16Kernel::kAmx})
    if (name == cpu_bf16_kernel_name(k))
      return k;
  UPD_CHECK(false) << "unknown cpu bf16 kernel '" << std::string(name) << "' (auto, portable, avx2, fma, dot or amx)";
  return CpuBf16Kernel::kAuto;
}

}  // namespace updraft::ops
