// The linear kernels behind decode and verification: every CPU path against the portable one,
// and the property greedy speculation rests on: a row of y is bitwise the same whatever the
// number of rows computed with it.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>

#include "kernels/core/device.h"
#include "kernels/ops.h"
#include "kernels/ops/gemv_cpu.h"
#include "tests/kernels/rand_vec.h"

namespace updraft {
namespace {

using testing_kernels::rand_vec;

std::vector<uint16_t> rand_bf16(int64_t n, uint64_t seed) {
  const auto f = rand_vec(n, seed);
  std::vector<uint16_t> w(f.size());
  for (size_t i = 0; i < f.size(); ++i)
    w[i] = f32_to_bf16(f[i]);
  return w;
}

// y = x w^T through the AMX kernel over weight rows [0, N) split at `split` (a multiple of 16).
std::vector<float> amx_linear(const std::vector<float>& x, int64_t T, int64_t K, const std::vector<uint16_t>& w,
                              int64_t N, int64_t split) {
  std::vector<uint16_t> xp(static_cast<size_t>(ops::cpu::amx_packed_elems(T, K)), 0xffff);
  ops::cpu::pack_rows_amx(x.data(), T, K, xp.data());
  std::vector<float> y(static_cast<size_t>(T * N), NAN);
  split = std::min(split, N);
  if (split > 0)
    ops::cpu::gemv_rows_amx(xp.data(), T, K, w.data(), 0, split, y.data(), N);
  if (split < N)
    ops::cpu::gemv_rows_amx(xp.data(), T, K, w.data(), split, N, y.data(), N);
  return y;
}

TEST(Gemv, DecodePathMatchesPortablePathForEveryBatchSize) {
  // The AVX-512 and portable GEMV must agree for T = 1..8 and ragged K / N.
  const int64_t K = 77, N = 29;
  for (int64_t T = 1; T <= 8; ++T) {
    Tensor x = Tensor::from_f32(rand_vec(T * K, 10 + T), {T, K});
    Tensor w = Tensor::from_f32(rand_vec(N * K, 20), {N, K}).to_dtype(DType::BF16);
    Tensor y1 = Tensor::empty({T, N}, DType::F32), y2 = Tensor::empty({T, N}, DType::F32);
    ops::linear(x, w, nullptr, y1);  // T <= 8: GEMV path (x rounded to bf16, as with bf16 weights)
    Tensor wf = w.to_dtype(DType::F32), xr = x.to_dtype(DType::BF16).to_dtype(DType::F32);
    ops::gemm(xr, false, wf, true, y2);  // BLAS
    auto a = y1.to_f32_vector(), b = y2.to_f32_vector();
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-4) << "T=" << T << " i=" << i;
  }
}

TEST(Gemv, Bf16DotKernelMatchesThePortableKernelOnRoundedInputs) {
  // The vdpbf16ps kernel (from its panels, which must pad with zeros whatever was in the buffer)
  // against the portable one fed the same bf16-rounded x, over ragged K (masked tails of 1..31)
  // and N (a short last panel), T = 1..8.
  if (!ops::cpu::cpu_has_avx512_bf16())
    GTEST_SKIP() << "this CPU has no AVX512-BF16";
  for (int64_t K : {5, 32, 77, 100}) {
    const int64_t Kp = (K + 31) / 32 * 32;
    for (int64_t N : {1, 13, 29}) {
      for (int64_t T = 1; T <= ops::cpu::kGemvMaxT; ++T) {
        std::vector<float> x = rand_vec(T * K, 30 + T + K);
        for (float& v : x)
          v = bf16_to_f32(f32_to_bf16(v));
        std::vector<uint16_t> w(static_cast<size_t>(N * K)), xb(static_cast<size_t>(T * Kp), 0xffff);
        for (size_t i = 0; i < w.size(); ++i)
          w[i] = f32_to_bf16(rand_vec(1, 1000 + i)[0]);
        ops::cpu::round_rows_bf16(x.data(), T, K, Kp, xb.data());
        for (int64_t t = 0; t < T; ++t)
          for (int64_t k = K; k < Kp; ++k)
            ASSERT_EQ(xb[static_cast<size_t>(t * Kp + k)], 0) << "padding must be zero";
        std::vector<float> y1(static_cast<size_t>(T * N)), y2(y1.size());
        std::vector<uint16_t> panels(static_cast<size_t>(ops::cpu::dot_panel_elems(N, K)), 0xffff);
        ops::cpu::pack_panels_bf16dot(w.data(), N, K, panels.data());
        ops::cpu::gemv_panels_bf16dot(xb.data(), T, Kp, panels.data(), 0, N, y1.data(), N);
        ops::cpu::gemv_rows_generic(x.data(), T, K, w.data(), DType::BF16, 0, N, y2.data(), N);
        for (size_t i = 0; i < y1.size(); ++i)
          ASSERT_NEAR(y1[i], y2[i], 1e-5 * (1 + std::fabs(y2[i])) * std::sqrt(K))
              << "K=" << K << " N=" << N << " T=" << T << " i=" << i;
      }
    }
  }
}

TEST(Gemv, AmxKernelMatchesThePortableKernelOnRoundedInputs) {
  // Ragged N (short last blocks read through the padded copy), 1..4 blocks per panel, token
  // chunks of 16 with a short last one, K from one tile step to the built-in policy's 1216.
  if (!ops::cpu::cpu_has_amx_bf16())
    GTEST_SKIP() << "this CPU (or kernel) offers no AMX-BF16";
  for (int64_t K : {32, 96, 448, 1216}) {
    for (int64_t N : {1, 13, 16, 29, 64, 80, 100}) {
      for (int64_t T : {1, 2, 5, 16, 17, 40}) {
        std::vector<float> x = rand_vec(T * K, 40 + T + K);
        for (float& v : x)
          v = bf16_to_f32(f32_to_bf16(v));
        const auto w = rand_bf16(N * K, 50 + N);
        const auto y1 = amx_linear(x, T, K, w, N, N);
        std::vector<float> y2(y1.size());
        ops::cpu::gemv_rows_generic(x.data(), T, K, w.data(), DType::BF16, 0, N, y2.data(), N);
        for (size_t i = 0; i < y1.size(); ++i)
          ASSERT_NEAR(y1[i], y2[i], 1e-5 * (1 + std::fabs(y2[i])) * std::sqrt(K))
              << "K=" << K << " N=" << N << " T=" << T << " i=" << i;
      }
    }
  }
}

TEST(Gemv, AmxRowsAreBitwiseTheSameWhateverTheRowCountAndTheThreadSplit) {
  if (!ops::cpu::cpu_has_amx_bf16())
    GTEST_SKIP() << "this CPU (or kernel) offers no AMX-BF16";
  const int64_t K = 448, N = 200, Tmax = 64;
  const auto x = rand_vec(Tmax * K, 7);
  const auto w = rand_bf16(N * K, 8);
  std::vector<std::vector<float>> solo;  // each row alone (decode)
  for (int64_t t = 0; t < Tmax; ++t)
    solo.push_back(amx_linear(std::vector<float>(x.begin() + t * K, x.begin() + (t + 1) * K), 1, K, w, N, N));
  // Past 16 rows, full 16-row chunks go two at a time against pairs of weight blocks: splits at
  // 32 and 112 give the panels of 2 and 3 blocks beside the whole ones.
  for (int64_t T : {2, 5, 10, 16, 23, 32, 40, 50, 64}) {
    for (int64_t split : {int64_t{16}, int64_t{32}, int64_t{112}, N}) {
      const auto y = amx_linear(std::vector<float>(x.begin(), x.begin() + T * K), T, K, w, N, split);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n)
          ASSERT_EQ(y[static_cast<size_t>(t * N + n)], solo[static_cast<size_t>(t)][static_cast<size_t>(n)])
              << "T=" << T << " split=" << split << " t=" << t << " n=" << n;
    }
  }
}

// The widening + FMA kernels (AVX-512 and AVX2) over ragged K (partial last steps) and N, T = 1..8,
// with the activations split as split_rows_bf16fma lays them out (64-byte aligned).
using FmaKernel = void (*)(const float*, int64_t, int64_t, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t,
                           const uint16_t*);
void expect_fma_kernel_matches_portable(FmaKernel kernel, int64_t max_t) {
  for (int64_t K : {5, 32, 77, 100, 448}) {
    const int64_t Kp = (K + 31) / 32 * 32;
    for (int64_t N : {1, 13, 29}) {
      for (int64_t T = 1; T <= max_t; ++T) {
        std::vector<float> x = rand_vec(T * K, 60 + T + K);
        for (float& v : x)
          v = bf16_to_f32(f32_to_bf16(v));
        const auto w = rand_bf16(N * K, 70 + N);
        Tensor xs = Tensor::empty({T * Kp}, DType::F32);  // Tensor storage is 64-byte aligned
        ops::cpu::split_rows_bf16fma(x.data(), T, K, Kp, xs.data<float>());
        std::vector<float> y1(static_cast<size_t>(T * N)), y2(y1.size());
        kernel(xs.data<float>(), T, K, Kp, w.data(), 0, N, y1.data(), N, nullptr);
        ops::cpu::gemv_rows_generic(x.data(), T, K, w.data(), DType::BF16, 0, N, y2.data(), N);
        for (size_t i = 0; i < y1.size(); ++i)
          ASSERT_NEAR(y1[i], y2[i], 1e-5 * (1 + std::fabs(y2[i])) * std::sqrt(K))
              << "K=" << K << " N=" << N << " T=" << T << " i=" << i;
      }
    }
  }
}

TEST(Gemv, Bf16FmaKernelMatchesThePortableKernelOnRoundedInputs) {
  if (!ops::cpu::cpu_has_avx512())
    GTEST_SKIP() << "this CPU has no AVX-512";
  expect_fma_kernel_matches_portable(ops::cpu::gemv_rows_bf16fma, ops::cpu::kGemvMaxT);
}

TEST(Gemv, Avx2FmaKernelMatchesThePortableKernelOnRoundedInputs) {
  if (!ops::cpu::cpu_has_avx2_fma())
    GTEST_SKIP() << "this CPU has no AVX2 and FMA";
  expect_fma_kernel_matches_portable(ops::cpu::gemv_rows_bf16fma_avx2, ops::cpu::kAvx2MaxT);
}

// Restores the process's bf16 kernel when a test that switches it ends.
struct KernelGuard {
  ops::CpuBf16Kernel saved = ops::cpu_bf16_kernel();
  ~KernelGuard() { ops::set_cpu_bf16_kernel(saved); }
};

// The bf16 kernels this CPU offers, portable first.
std::vector<ops::CpuBf16Kernel> available_kernels() {
  std::vector<ops::CpuBf16Kernel> out;
  for (ops::CpuBf16Kernel k : {ops::CpuBf16Kernel::kPortable, ops::CpuBf16Kernel::kAvx2, ops::CpuBf16Kernel::kFma,
                               ops::CpuBf16Kernel::kDot, ops::CpuBf16Kernel::kAmx})
    if (ops::cpu_bf16_kernel_available(k))
      out.push_back(k);
  return out;
}

TEST(Gemv, LinearRowsAreBitwiseTheSameWhateverTheRowCountOnEveryKernel) {
  // Through linear(), on every kernel this CPU has, with the built-in policy's K and a ragged K,
  // row counts that cross the kernels' tiles (8 for the f32-FMA GEMV; one pass of the dot panels
  // up to 14, two up to 16, tiles beyond; 16 for AMX).
  KernelGuard guard;
  for (ops::CpuBf16Kernel kernel : available_kernels()) {
    ops::set_cpu_bf16_kernel(kernel);
    for (int64_t K : {448, 77}) {
      const int64_t N = 150, Tmax = 40;
      const auto x = rand_vec(Tmax * K, 9 + K);
      Tensor w = Tensor::from_f32(rand_vec(N * K, 10), {N, K}).to_dtype(DType::BF16);
      std::vector<std::vector<float>> solo;
      for (int64_t t = 0; t < Tmax; ++t) {
        Tensor xt = Tensor::from_f32(std::vector<float>(x.begin() + t * K, x.begin() + (t + 1) * K), {1, K});
        Tensor y = Tensor::empty({1, N}, DType::F32);
        ops::linear(xt, w, nullptr, y);
        solo.push_back(y.to_f32_vector());
      }
      for (int64_t T : {3, 5, 7, 8, 9, 12, 13, 14, 15, 16, 17, 24, 29, 40}) {
        Tensor xt = Tensor::from_f32(std::vector<float>(x.begin(), x.begin() + T * K), {T, K});
        Tensor y = Tensor::empty({T, N}, DType::F32);
        ops::linear(xt, w, nullptr, y);
        const auto got = y.to_f32_vector();
        for (int64_t t = 0; t < T; ++t)
          for (int64_t n = 0; n < N; ++n)
            ASSERT_EQ(got[static_cast<size_t>(t * N + n)], solo[static_cast<size_t>(t)][static_cast<size_t>(n)])
                << ops::cpu_bf16_kernel_name(kernel) << " K=" << K << " T=" << T << " t=" << t << " n=" << n;
      }
    }
  }
}

// On the CPU, products of one input (q, k and v; gate and up) share one pass of the thread team
// on every bf16 kernel, from the dot kernel's panels on that kernel: each output, bias included,
// is bitwise what linear() gives it alone from the row-major weight, for
// weights of different heights (one shorter than a thread's chunk, one empty), row counts inside
// one tile and across several, both K paths, and 1-3 threads.
TEST(Gemv, CpuSharedInputProductsGiveEachLinearsBitsOnEveryKernel) {
  KernelGuard guard;
  const int threads_before = omp_get_max_threads();
  const std::vector<int64_t> heights = {150, 77, 8, 0};
  for (ops::CpuBf16Kernel kernel : available_kernels()) {
    ops::set_cpu_bf16_kernel(kernel);
    for (int64_t K : {448, 77}) {
      std::vector<ops::LinearWeight> ws;
      for (size_t i = 0; i < heights.size(); ++i)
        ws.push_back(ops::prepare_linear(
            Tensor::from_f32(rand_vec(heights[i] * K, 20 + static_cast<uint64_t>(i)), {heights[i], K})
                .to_dtype(DType::BF16)));
      // The dot kernel reads its own panels, so the comparison below pins them to the row-major bits.
      ASSERT_EQ(ws[0].dot_panels.defined(), kernel == ops::CpuBf16Kernel::kDot) << ops::cpu_bf16_kernel_name(kernel);
      const Tensor bias = Tensor::from_f32(rand_vec(heights[1], 7), {heights[1]});
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        for (int64_t T : {1, 3, 5, 7, 8, 9, 10, 14, 15, 16, 17}) {
          const Tensor x = Tensor::from_f32(rand_vec(T * K, 30 + T), {T, K});
          std::vector<ops::LinearProduct> products;
          for (size_t i = 0; i < ws.size(); ++i)
            products.push_back({&ws[i], i == 1 ? &bias : nullptr, Tensor::empty({T, heights[i]}, DType::F32)});
          ops::linear_shared_input(x, products);
          for (size_t i = 0; i < ws.size(); ++i) {
            Tensor alone = Tensor::empty({T, heights[i]}, DType::F32);
            ops::linear(x, ws[i].w, products[i].bias, alone);
            const auto want = alone.to_f32_vector(), got = products[i].y.to_f32_vector();
            for (size_t j = 0; j < want.size(); ++j)
              ASSERT_EQ(got[j], want[j]) << ops::cpu_bf16_kernel_name(kernel) << " K=" << K << " threads=" << threads
                                         << " T=" << T << " product " << i << " element " << j;
          }
        }
      }
    }
  }
  omp_set_num_threads(threads_before);
}

// On CUDA, linear over bf16 rows (decode and verification steps) runs one kernel whose rows do
// not depend on each other, in chunks of 16 rows past 16 (up to 256 for weights this small): a
// row's bits are the same whatever the row count and whichever chunk holds it, with the built-in
// policy's K (16-byte loads) and a ragged K (one element at a time). Skipped without a GPU.
TEST(Gemv, CudaLinearRowsAreBitwiseTheSameWhateverTheRowCount) {
  if (!cuda_available())
    GTEST_SKIP() << "no usable CUDA device on this machine";
  for (int64_t K : {448, 77}) {
    const int64_t N = 150, Tmax = 200;
    const Tensor x = Tensor::from_f32(rand_vec(Tmax * K, 9 + K), {Tmax, K}).to_dtype(DType::BF16).to(Device::CUDA);
    const Tensor w = Tensor::from_f32(rand_vec(N * K, 10), {N, K}).to_dtype(DType::BF16).to(Device::CUDA);
    for (DType out : {DType::BF16, DType::F32}) {
      Tensor all = Tensor::empty({Tmax, N}, out, Device::CUDA);
      ops::linear(x, w, nullptr, all);
      const auto want = all.to_f32_vector();
      for (int64_t T : {1, 3, 5, 8, 9, 16, 17, 40, 99}) {
        for (int64_t t0 = 0; t0 + T <= Tmax; t0 += T) {
          Tensor y = Tensor::empty({T, N}, out, Device::CUDA);
          ops::linear(x.rows(t0, t0 + T), w, nullptr, y);
          const auto got = y.to_f32_vector();
          for (int64_t i = 0; i < T * N; ++i)
            ASSERT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(t0 * N + i)])
                << "K=" << K << " T=" << T << " row " << t0 + i / N;
        }
      }
    }
  }
}

// On CUDA, products of one input (q, k and v; gate and up) run in one launch: each output is
// bitwise what linear() gives it alone, for weights of different heights (one not a multiple of
// the block's 8 columns), row counts inside one chunk and across several, and both K paths.
// Skipped without a GPU.
TEST(Gemv, CudaSharedInputProductsGiveEachLinearsBits) {
  if (!cuda_available())
    GTEST_SKIP() << "no usable CUDA device on this machine";
  for (int64_t K : {448, 77}) {
    const std::vector<int64_t> heights = {150, 77, 8};
    std::vector<ops::LinearWeight> ws;
    for (size_t i = 0; i < heights.size(); ++i)
      ws.push_back(
          ops::prepare_linear(Tensor::from_f32(rand_vec(heights[i] * K, 20 + static_cast<uint64_t>(i)), {heights[i], K})
                                  .to_dtype(DType::BF16)
                                  .to(Device::CUDA)));
    for (int64_t T : {1, 5, 16, 17, 40}) {
      const Tensor x = Tensor::from_f32(rand_vec(T * K, 30 + T), {T, K}).to_dtype(DType::BF16).to(Device::CUDA);
      std::vector<ops::LinearProduct> products;
      for (size_t i = 0; i < ws.size(); ++i)
        products.push_back({&ws[i], nullptr, Tensor::empty({T, heights[i]}, DType::BF16, Device::CUDA)});
      ops::linear_shared_input(x, products);
      for (size_t i = 0; i < ws.size(); ++i) {
        Tensor alone = Tensor::empty({T, heights[i]}, DType::BF16, Device::CUDA);
        ops::linear(x, ws[i].w, nullptr, alone);
        const auto want = alone.to_f32_vector(), got = products[i].y.to_f32_vector();
        for (size_t j = 0; j < want.size(); ++j)
          ASSERT_EQ(got[j], want[j]) << "K=" << K << " T=" << T << " product " << i << " element " << j;
      }
    }
  }
}

TEST(Gemv, KernelsAgreeWithEachOtherToRounding) {
  // Every kernel multiplies the same bf16-rounded activations by the same weights; only the
  // order of the f32 sums differs.
  KernelGuard guard;
  const int64_t K = 448, N = 100, T = 6;
  Tensor x = Tensor::from_f32(rand_vec(T * K, 11), {T, K});
  Tensor w = Tensor::from_f32(rand_vec(N * K, 12), {N, K}).to_dtype(DType::BF16);
  ops::set_cpu_bf16_kernel(ops::CpuBf16Kernel::kPortable);
  Tensor ref = Tensor::empty({T, N}, DType::F32);
  ops::linear(x, w, nullptr, ref);
  const auto want = ref.to_f32_vector();
  for (ops::CpuBf16Kernel kernel :
       {ops::CpuBf16Kernel::kAvx2, ops::CpuBf16Kernel::kFma, ops::CpuBf16Kernel::kDot, ops::CpuBf16Kernel::kAmx}) {
    if (!ops::cpu_bf16_kernel_available(kernel))
      continue;
    ops::set_cpu_bf16_kernel(kernel);
    Tensor y = Tensor::empty({T, N}, DType::F32);
    ops::linear(x, w, nullptr, y);
    const auto got = y.to_f32_vector();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << ops::cpu_bf16_kernel_name(kernel) << " i=" << i;
  }
}

TEST(Gemv, KernelChoiceIsByNameAndRefusesWhatTheCpuLacks) {
  KernelGuard guard;
  EXPECT_EQ(ops::parse_cpu_bf16_kernel("fma"), ops::CpuBf16Kernel::kFma);
  EXPECT_EQ(ops::parse_cpu_bf16_kernel("avx2"), ops::CpuBf16Kernel::kAvx2);
  EXPECT_EQ(ops::parse_cpu_bf16_kernel("amx"), ops::CpuBf16Kernel::kAmx);
  EXPECT_THROW(ops::parse_cpu_bf16_kernel("avx9"), CheckFailure);
  EXPECT_NE(ops::cpu_bf16_kernel(), ops::CpuBf16Kernel::kAuto) << "auto resolves on first use";
  ops::set_cpu_bf16_kernel(ops::CpuBf16Kernel::kAuto);
  EXPECT_NE(ops::cpu_bf16_kernel(), ops::CpuBf16Kernel::kAuto);
  if (ops::cpu_bf16_kernel_available(ops::CpuBf16Kernel::kAmx)) {
    EXPECT_EQ(ops::cpu_bf16_kernel(), ops::CpuBf16Kernel::kAmx) << "auto picks AMX where the CPU has it";
  } else if (ops::cpu_bf16_kernel_available(ops::CpuBf16Kernel::kDot)) {
    EXPECT_EQ(ops::cpu_bf16_kernel(), ops::CpuBf16Kernel::kDot);
  } else if (ops::cpu_bf16_kernel_available(ops::CpuBf16Kernel::kFma)) {
    EXPECT_EQ(ops::cpu_bf16_kernel(), ops::CpuBf16Kernel::kFma);
  } else if (ops::cpu_bf16_kernel_available(ops::CpuBf16Kernel::kAvx2)) {
    EXPECT_EQ(ops::cpu_bf16_kernel(), ops::CpuBf16Kernel::kAvx2) << "auto picks AVX2 without AVX-512";
  }
  for (ops::CpuBf16Kernel kernel : {ops::CpuBf16Kernel::kDot, ops::CpuBf16Kernel::kAmx}) {
    if (!ops::cpu_bf16_kernel_available(kernel)) {
      EXPECT_THROW(ops::set_cpu_bf16_kernel(kernel), CheckFailure) << ops::cpu_bf16_kernel_name(kernel);
    }
  }
}

}  // namespace
}  // namespace updraft
