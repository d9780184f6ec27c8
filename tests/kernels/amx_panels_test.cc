// AMX weights in tile panels (ops::LinearWeight): the panel kernel (activations as the A tiles,
// weights as B) gives the row-major AMX kernel's bits (weights as A) exactly, for any thread
// split and row count; linear() falls back to the row-major weight
// on every other kernel; packing is skipped where it cannot apply.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/ops.h"
#include "kernels/ops/gemv_cpu.h"
#include "tests/kernels/rand_vec.h"

namespace updraft {
namespace {

using testing_kernels::rand_vec;

struct KernelGuard {
  ops::CpuBf16Kernel saved = ops::cpu_bf16_kernel();
  ~KernelGuard() { ops::set_cpu_bf16_kernel(saved); }
};

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

TEST(AmxPanels, PanelsGiveTheRowMajorKernelsBitsForEverySplitAndRowCount) {
  if (!ops::cpu::cpu_has_amx_bf16())
    GTEST_SKIP() << "this CPU (or kernel) offers no AMX-BF16";
  for (int64_t K : {32, 448}) {
    for (int64_t N : {7, 16, 29, 100, 200}) {  // 1 to 13 blocks: whole, ragged and short last panels
      Tensor w = Tensor::from_f32(rand_vec(N * K, 20 + N), {N, K}).to_dtype(DType::BF16);
      std::vector<uint16_t> panels(static_cast<size_t>(ops::cpu::amx_panel_elems(N, K)), 0xffff);
      ops::cpu::pack_panels_amx(w.data<uint16_t>(), N, K, panels.data());
      const int64_t blocks = (N + 15) / 16;
      for (int64_t T : {1, 3, 5, 16, 17, 31, 32, 50, 64}) {  // past 16: chunk pairs against block pairs
        const auto x = rand_vec(T * K, 30 + T);
        std::vector<uint16_t> xp(static_cast<size_t>(ops::cpu::amx_packed_elems(T, K)), 0xffff);
        ops::cpu::pack_rows_amx(x.data(), T, K, xp.data());
        std::vector<float> want(static_cast<size_t>(T * N), NAN);
        ops::cpu::gemv_rows_amx(xp.data(), T, K, w.data<uint16_t>(), 0, N, want.data(), N);
        // The panel kernel's activations: bf16 rows (padding rows poisoned first: they must be
        // written, not read as they were).
        std::vector<uint16_t> xa(static_cast<size_t>(ops::cpu::amx_rows_a_elems(T, K)), 0xffff);
        ops::cpu::pack_rows_amx_a(x.data(), T, K, xa.data());
        for (int64_t split = 0; split <= blocks; ++split) {  // every block boundary, mid-panel ones included
          std::vector<float> got(want.size(), NAN);
          if (split > 0)
            ops::cpu::gemv_panels_amx(xa.data(), T, K, panels.data(), N, 0, split, got.data(), N);
          if (split < blocks)
            ops::cpu::gemv_panels_amx(xa.data(), T, K, panels.data(), N, split, blocks, got.data(), N);
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_TRUE(same_bits(got[i], want[i])) << "K=" << K << " N=" << N << " T=" << T << " split=" << split
                                                    << " i=" << i << ": " << got[i] << " vs " << want[i];
        }
      }
    }
  }
}

TEST(AmxPanels, LinearReadsThePanelsOnlyOnTheAmxKernel) {
  KernelGuard guard;
  const int64_t K = 448, N = 150;
  Tensor w = Tensor::from_f32(rand_vec(N * K, 40), {N, K}).to_dtype(DType::BF16);
  Tensor bias = Tensor::from_f32(rand_vec(N, 41), {N});
  for (ops::CpuBf16Kernel kernel : {ops::CpuBf16Kernel::kPortable, ops::CpuBf16Kernel::kAvx2, ops::CpuBf16Kernel::kFma,
                                    ops::CpuBf16Kernel::kDot, ops::CpuBf16Kernel::kAmx}) {
    if (!ops::cpu_bf16_kernel_available(kernel))
      continue;
    ops::set_cpu_bf16_kernel(kernel);
    const ops::LinearWeight prepared = ops::prepare_linear(w);
    EXPECT_EQ(prepared.panels.defined(), kernel == ops::CpuBf16Kernel::kAmx) << ops::cpu_bf16_kernel_name(kernel);
    for (int64_t T : {1, 5, 40}) {
      Tensor x = Tensor::from_f32(rand_vec(T * K, 42 + T), {T, K});
      Tensor want = Tensor::empty({T, N}, DType::F32), got = Tensor::empty({T, N}, DType::F32);
      ops::linear(x, w, &bias, want);
      ops::linear(x, prepared, &bias, got);
      const auto a = want.to_f32_vector(), b = got.to_f32_vector();
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_TRUE(same_bits(a[i], b[i])) << ops::cpu_bf16_kernel_name(kernel) << " T=" << T << " i=" << i;
    }
  }
  // Panels made for AMX are ignored once the process runs another kernel.
  if (ops::cpu_bf16_kernel_available(ops::CpuBf16Kernel::kAmx)) {
    ops::set_cpu_bf16_kernel(ops::CpuBf16Kernel::kAmx);
    const ops::LinearWeight prepared = ops::prepare_linear(w);
    ASSERT_TRUE(prepared.panels.defined());
    ops::set_cpu_bf16_kernel(ops::CpuBf16Kernel::kPortable);
    Tensor x = Tensor::from_f32(rand_vec(3 * K, 50), {3, K});
    Tensor want = Tensor::empty({3, N}, DType::F32), got = Tensor::empty({3, N}, DType::F32);
    ops::linear(x, w, nullptr, want);
    ops::linear(x, prepared, nullptr, got);
    EXPECT_EQ(want.to_f32_vector(), got.to_f32_vector());
  }
}

TEST(AmxPanels, ProductsSharingAnInputEqualSeparateProducts) {
  // q, k, v-shaped products of one x (one with a bias) in one call against one linear() each,
  // bitwise, on every kernel (one pass of the thread team only where all have panels: AMX).
  KernelGuard guard;
  const int64_t K = 448;
  const std::vector<int64_t> Ns = {448, 224, 100};
  for (ops::CpuBf16Kernel kernel :
       {ops::CpuBf16Kernel::kPortable, ops::CpuBf16Kernel::kDot, ops::CpuBf16Kernel::kAmx}) {
    if (!ops::cpu_bf16_kernel_available(kernel))
      continue;
    ops::set_cpu_bf16_kernel(kernel);
    std::vector<ops::LinearWeight> ws;
    for (size_t i = 0; i < Ns.size(); ++i)
      ws.push_back(
          ops::prepare_linear(Tensor::from_f32(rand_vec(Ns[i] * K, 60 + i), {Ns[i], K}).to_dtype(DType::BF16)));
    const Tensor bias = Tensor::from_f32(rand_vec(Ns[1], 70), {Ns[1]});
    for (int64_t T : {1, 5, 20}) {
      Tensor x = Tensor::from_f32(rand_vec(T * K, 80 + T), {T, K});
      std::vector<Tensor> want, got;
      std::vector<ops::LinearProduct> products;
      for (size_t i = 0; i < Ns.size(); ++i) {
        want.push_back(Tensor::empty({T, Ns[i]}, DType::F32));
        got.push_back(Tensor::empty({T, Ns[i]}, DType::F32));
        const Tensor* b = i == 1 ? &bias : nullptr;
        ops::linear(x, ws[i].w, b, want.back());
        products.push_back({&ws[i], b, got.back()});
      }
      ops::linear_shared_input(x, products);
      for (size_t i = 0; i < Ns.size(); ++i) {
        const auto a = want[i].to_f32_vector(), b = got[i].to_f32_vector();
        for (size_t j = 0; j < a.size(); ++j)
          ASSERT_TRUE(same_bits(a[j], b[j]))
              << ops::cpu_bf16_kernel_name(kernel) << " T=" << T << " product " << i << " j=" << j;
      }
    }
  }
}

TEST(AmxPanels, PackingIsSkippedWhereItCannotApply) {
  KernelGuard guard;
  if (!ops::cpu_bf16_kernel_available(ops::CpuBf16Kernel::kAmx))
    GTEST_SKIP() << "this CPU (or kernel) offers no AMX-BF16";
  ops::set_cpu_bf16_kernel(ops::CpuBf16Kernel::kAmx);
  EXPECT_FALSE(ops::prepare_linear(Tensor::from_f32(rand_vec(16 * 64, 1), {16, 64})).panels.defined()) << "f32";
  EXPECT_FALSE(
      ops::prepare_linear(Tensor::from_f32(rand_vec(16 * 40, 2), {16, 40}).to_dtype(DType::BF16)).panels.defined())
      << "K not a multiple of 32";
  EXPECT_FALSE(ops::prepare_linear(Tensor()).panels.defined()) << "an absent weight stays absent";
  // A weight whose K is not a multiple of 32 still multiplies (row-major, another kernel's path).
  const int64_t K = 40, N = 20;
  Tensor w = Tensor::from_f32(rand_vec(N * K, 3), {N, K}).to_dtype(DType::BF16);
  Tensor x = Tensor::from_f32(rand_vec(2 * K, 4), {2, K});
  Tensor want = Tensor::empty({2, N}, DType::F32), got = Tensor::empty({2, N}, DType::F32);
  ops::linear(x, w, nullptr, want);
  ops::linear(x, ops::prepare_linear(w), nullptr, got);
  EXPECT_EQ(want.to_f32_vector(), got.to_f32_vector());
}

}  // namespace
}  // namespace updraft
