#include "kernels/ops/gemv_cpu.h"

namespace updraft::ops::cpu {

bool cpu_has_avx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }();
  return has;
}

bool cpu_has_avx512_bf16() {
  static const bool has = [] {
    __builtin_cpu_init();
    return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
  }();
  return has;
}

bool cpu_has_avx2_fma() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
}

bool cpu_has_avx512_vnni() {  // here, not in the AVX-512 unit: it runs on every CPU
  static const bool has = [] {
    __builtin_cpu_init();
    return cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
  }();
  return has;
}

namespace {

template <typename Load>
[[gnu::always_inline]] inline void gemv_generic_impl(const float* x, int64_t T, int64_t K, Load load, int64_t n_begin, int64_t n_end, float* y,
                       int64_t ldy) {
  for (int64_t n = n_begin; n < n_end; ++n) {
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = x + t * K;
      float acc = 0.f;
      // Vectorised (in lanes, then the lanes summed): the same order for every T.
#pragma omp simd reduction(+ : acc)
      for (int64_t k = 0; k < K; ++k)
        acc += xt[k] * load(n * K + k);
      y[t * ldy + n] = acc;
    }
  }
}

}  // namespace

// Built for AVX2 and baseline x86-64, chosen at load time by the CPU's features.
__attribute__((target_clones("avx2", "default"))) void gemv_rows_generic(const float* x, int64_t T, int64_t K,
                                                                       const void* w, DType wt, int64_t n_begin,
                                                                       int64_t n_end, float* y, int64_t ldy) {
  switch (wt) {
    case DType::F32: {
      const float* p = static_cast<const float*>(w);
      gemv_generic_impl(
          x, T, K, [p](int64_t i) { return p[i]; }, n_begin, n_end, y, ldy);
      break;
    }
    case DType::BF16: {
      const uint16_t* p = static_cast<const uint16_t*>(w);
      gemv_generic_impl(
          x, T, K, [p](int64_t i) { return bf16_to_f32(p[i]); }, n_begin, n_end, y, ldy);
      break;
    }
    case DType::F16: {
      const uint16_t* p = static_cast<const uint16_t*>(w);
      gemv_generic_impl(
          x, T, K, [p](int64_t i) { return f16_to_f32(p[i]); }, n_begin, n_end, y, ldy);
      break;
    }
    default:
      break;
  }
}

// Baseline code: both FMA kernels (AVX-512 and AVX2) read its layout. With AVX2 the whole steps
// are split 8 floats at a time (split_steps_bf16fma_avx2: the same bits), the rest here.
void split_rows_bf16fma(const float* x, int64_t T, int64_t K, int64_t Kp, float* xs) {
  const int64_t done = cpu_has_avx2_fma() ? K / 32 * 32 : 0;
  if (done > 0)
    split_steps_bf16fma_avx2(x, T, K, done, xs);
  for (int64_t t = 0; t < T; ++t) {
    const float* src = x + t * K;
    for (int64_t k = done; k < Kp; k += 32) {
      float* dst = xs + k * T + t * 32;
      for (int i = 0; i < 16; ++i) {
        const int64_t ke = k + 2 * i, ko = ke + 1;
        dst[i] = ke < K ? bf16_to_f32(f32_to_bf16(src[ke])) : 0.f;
        dst[16 + i] = ko < K ? bf16_to_f32(f32_to_bf16(src[ko])) : 0.f;
      }
    }
  }
}

void gemv_rows(const float* x, int64_t T, int64_t K, const void* w, DType wt, int64_t n_begin, int64_t n_end, float* y,
               int64_t ldy) {
  if (cpu_has_avx512())
    gemv_rows_avx512(x, T, K, w, wt, n_begin, n_end, y, ldy);
  else
    gemv_rows_generic(x, T, K, w, wt, n_begin, n_end, y, ldy);
}

}  // namespace updraft::ops::cpu
