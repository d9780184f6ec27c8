// int8 weights (ops::prepare_linear_int8): the quantization rule, the AMX-INT8 kernel against
// the reference loop bit for bit, the VNNI kernel too, rows independent of the row count, the error against the f32
// product, and products of one input mixing int8 and bf16 weights.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/ops.h"
#include "kernels/ops/gemv_cpu.h"
#include "tests/kernels/rand_vec.h"

namespace updraft {
namespace {

using testing_kernels::rand_vec;

TEST(LinearInt8, RowsQuantizeSymmetricallyToTheirLargestMagnitude) {
  const std::vector<float> x = {1.f, -2.f, 0.5f, 0.f, 1.984375f};
  std::vector<int8_t> q(x.size());
  const float s = ops::cpu::quantize_row_int8(x.data(), 5, q.data());
  EXPECT_EQ(s, 2.f / 127.f);
  // 63.5 rounds to even (64), -2 is the largest magnitude (-127), 0.5 -> 31.75 -> 32.
  EXPECT_EQ(std::vector<int>(q.begin(), q.end()), (std::vector<int>{64, -127, 32, 0, 126}));
  const std::vector<float> zero(7, 0.f);
  std::vector<int8_t> qz(7, 5);
  EXPECT_EQ(ops::cpu::quantize_row_int8(zero.data(), 7, qz.data()), 0.f);
  EXPECT_EQ(std::vector<int>(qz.begin(), qz.end()), std::vector<int>(7, 0));
  const std::vector<float> bad = {1.f, NAN, 2.f};
  std::vector<int8_t> qb(3);
  EXPECT_TRUE(std::isnan(ops::cpu::quantize_row_int8(bad.data(), 3, qb.data())));
}

// The AMX kernel's y over weight blocks [0, split) and [split, blocks), against the reference.
void expect_amx_equals_reference(int64_t T, int64_t K, int64_t N, int64_t split_block) {
  const Tensor w = Tensor::from_f32(rand_vec(N * K, 60 + N + K), {N, K});
  const ops::cpu::Int8Weight q = ops::cpu::quantize_weight_int8(w);
  ASSERT_FALSE(q.panels.empty());
  const auto x = rand_vec(T * K, 70 + T);
  // The kernel's A tiles: the int8 rows, padding rows (past 16) filled with junk that only
  // padding outputs may see.
  std::vector<int8_t> xq(static_cast<size_t>(ops::cpu::amx_rows_a_elems(T, K)), int8_t{-85});
  std::vector<float> xs(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    xs[t] = ops::cpu::quantize_row_int8(x.data() + t * K, K, xq.data() + t * K);
  const int64_t blocks = (N + 15) / 16, split = std::min(split_block, blocks);
  std::vector<float> y(static_cast<size_t>(T * N), NAN), ref(y.size(), NAN);
  ops::cpu::gemv_panels_amx_i8(xq.data(), T, xs.data(), q, 0, split, y.data(), N);
  ops::cpu::gemv_panels_amx_i8(xq.data(), T, xs.data(), q, split, blocks, y.data(), N);
  ops::cpu::linear_int8_reference(xq.data(), xs.data(), T, q, 0, N, ref.data(), N);
  for (size_t i = 0; i < y.size(); ++i)
    ASSERT_EQ(y[i], ref[i]) << "T=" << T << " K=" << K << " N=" << N << " split=" << split << " i=" << i;
}

TEST(LinearInt8, AmxTilesEqualTheReferenceLoopBitForBit) {
  // Ragged N (a zero-padded last block), panels of 1..4 blocks, token chunks of 16 with a short
  // last one, K from one tile step to the drafter's widest input (3 x 448).
  if (!ops::cpu::cpu_has_amx_int8())
    GTEST_SKIP() << "this CPU (or kernel) offers no AMX-INT8";
  for (int64_t K : {64, 448, 1216, 1344})
    for (int64_t N : {1, 15, 16, 17, 64, 100})
      for (int64_t T : {1, 2, 5, 16, 17, 32, 40})
        expect_amx_equals_reference(T, K, N, 3);
  expect_amx_equals_reference(7, 448, 1024, 9);
}

TEST(LinearInt8, VnniKernelEqualsTheReferenceLoopBitForBit) {
  // Every row count through the register blocks (1-6 rows, then passes of up to 6), K with and
  // without a masked last step, N ragged against the 4-row panels, split between two calls
  // anywhere (within a panel too).
  if (!ops::cpu::cpu_has_avx512_vnni())
    GTEST_SKIP() << "this CPU has no AVX512-VNNI";
  for (int64_t K : {64, 77, 448, 1216, 1344})
    for (int64_t N : {1, 7, 17, 100}) {
      const Tensor w = Tensor::from_f32(rand_vec(N * K, 80 + N + K), {N, K});
      ops::cpu::Int8Weight q = ops::cpu::quantize_weight_int8(w);
      if (q.vnni_panels.empty()) {  // AMX panels were built instead (K a multiple of 64 on AMX)
        q.vnni_panels.resize(static_cast<size_t>(ops::cpu::vnni_panel_elems(N, K)));
        ops::cpu::pack_panels_vnni(q.q.data(), N, K, q.vnni_panels.data());
      }
      for (int64_t T : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 17}) {
        const auto x = rand_vec(T * K, 90 + T);
        std::vector<int8_t> xq(static_cast<size_t>(T * K));
        std::vector<uint8_t> xu(xq.size());
        std::vector<float> xs(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t)
          xs[t] = ops::cpu::quantize_row_int8(x.data() + t * K, K, xq.data() + t * K);
        ops::cpu::offset_rows_u8(xq.data(), T * K, xu.data());
        std::vector<float> y(static_cast<size_t>(T * N), NAN), ref(y.size(), NAN);
        const int64_t split = N / 3;
        ops::cpu::linear_int8_vnni(xu.data(), xs.data(), T, q, 0, split, y.data(), N);
        ops::cpu::linear_int8_vnni(xu.data(), xs.data(), T, q, split, N, y.data(), N);
        ops::cpu::linear_int8_reference(xq.data(), xs.data(), T, q, 0, N, ref.data(), N);
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(y[i], ref[i]) << "T=" << T << " K=" << K << " N=" << N << " i=" << i;
      }
    }
}

TEST(LinearInt8, VectorQuantizerGivesTheScalarRulesBytes) {
  if (!ops::cpu::cpu_has_avx512())
    GTEST_SKIP() << "this CPU has no AVX-512";
  const int64_t K = 64, T = 7;
  std::vector<float> x = rand_vec(T * K, 31);
  for (int64_t k = 0; k < K; ++k)  // row 1: every value a tie (k + 0.5 steps) or a whole step
    x[K + k] = (k == 0 ? 127.f : static_cast<float>(k % 9) + (k % 2 ? 0.5f : 0.f)) * 0.25f;
  std::fill(x.begin() + 2 * K, x.begin() + 3 * K, 0.f);  // row 2: zeros
  x[3 * K + 5] = INFINITY;                               // row 3: not finite
  x[4 * K + 9] = NAN;                                    // row 4: not finite
  for (int64_t k = 0; k < K; ++k)                        // row 6: finite, but 127 / max overflows; zeros among it
    x[6 * K + k] = k % 2 ? 1e-38f : 0.f;
  std::vector<int8_t> qv(static_cast<size_t>(T * K)), qs(qv.size());
  std::vector<float> sv(T), ss(T);
  ops::cpu::quantize_rows_int8_avx512(x.data(), T, K, qv.data(), sv.data());
  for (int64_t t = 0; t < T; ++t)
    ss[t] = ops::cpu::quantize_row_int8(x.data() + t * K, K, qs.data() + t * K);
  EXPECT_EQ(qv, qs);
  EXPECT_EQ(ss[6], 0.f);
  EXPECT_EQ(std::vector<int8_t>(qs.begin() + 6 * K, qs.end()), std::vector<int8_t>(K, 0));
  for (int64_t t = 0; t < T; ++t)
    EXPECT_TRUE(sv[t] == ss[t] || (std::isnan(sv[t]) && std::isnan(ss[t]))) << "row " << t;
}

// y = x w^T through ops::linear with int8 weights.
std::vector<float> linear_q8(const ops::LinearWeight& w, const std::vector<float>& x, int64_t T) {
  const int64_t K = w.w.size(1), N = w.w.size(0);
  Tensor y = Tensor::empty({T, N}, DType::F32);
  ops::linear(Tensor::from_f32(std::vector<float>(x.begin(), x.begin() + T * K), {T, K}), w, nullptr, y);
  return y.to_f32_vector();
}

TEST(LinearInt8, EachRowIsTheSameWhateverTheRowCount) {
  // What a drafter needs to draft the same tokens for a sequence alone or in a batch.
  const int64_t K = 448, N = 200, Tmax = 40;
  const ops::LinearWeight w =
      ops::prepare_linear_int8(Tensor::from_f32(rand_vec(N * K, 3), {N, K}).to_dtype(DType::BF16));
  const auto x = rand_vec(Tmax * K, 4);
  const auto all = linear_q8(w, x, Tmax);
  for (int64_t t = 0; t < Tmax; t += 3) {
    const auto one = linear_q8(w, std::vector<float>(x.begin() + t * K, x.end()), 1);
    for (int64_t n = 0; n < N; ++n)
      ASSERT_EQ(one[n], all[t * N + n]) << "t=" << t << " n=" << n;
  }
}

TEST(LinearInt8, LinearGivesTheReferenceLoopsBits) {
  // The whole path (quantizing x in vectors, packing whole chunks by transposes, pairs of chunks
  // against pairs of blocks past 32 rows) against the scalar rule and loop.
  const int64_t K = 448, N = 100;
  const Tensor w = Tensor::from_f32(rand_vec(N * K, 41), {N, K}).to_dtype(DType::BF16);
  const ops::LinearWeight lw = ops::prepare_linear_int8(w);
  for (int64_t T : {1, 5, 16, 17, 32, 33, 40, 64}) {
    const auto x = rand_vec(T * K, 42 + T);
    const auto y = linear_q8(lw, x, T);
    std::vector<int8_t> xq(static_cast<size_t>(T * K));
    std::vector<float> xs(T), ref(static_cast<size_t>(T * N));
    for (int64_t t = 0; t < T; ++t)
      xs[t] = ops::cpu::quantize_row_int8(x.data() + t * K, K, xq.data() + t * K);
    ops::cpu::linear_int8_reference(xq.data(), xs.data(), T, *lw.q8, 0, N, ref.data(), N);
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_EQ(y[i], ref[i]) << "T=" << T << " i=" << i;
  }
}

TEST(LinearInt8, ProductsStayWithinTheQuantizationError) {
  // Per-row int8 of weights and inputs: each product off by at most half a step of each,
  // so the row's error norm stays near 1% of its norm; a wrong scale or a lost sign is far off.
  const int64_t K = 1216, N = 96, T = 5;
  const auto wv = rand_vec(N * K, 11), x = rand_vec(T * K, 12);
  const ops::LinearWeight w = ops::prepare_linear_int8(Tensor::from_f32(wv, {N, K}));
  const auto y = linear_q8(w, x, T);
  for (int64_t t = 0; t < T; ++t) {
    double err = 0, norm = 0;
    for (int64_t n = 0; n < N; ++n) {
      double exact = 0;
      for (int64_t k = 0; k < K; ++k)
        exact += static_cast<double>(x[t * K + k]) * wv[n * K + k];
      err += (y[t * N + n] - exact) * (y[t * N + n] - exact);
      norm += exact * exact;
    }
    EXPECT_LT(std::sqrt(err / norm), 0.03) << "row " << t;
    EXPECT_GT(std::sqrt(err / norm), 1e-4) << "row " << t << ": int8 products should not be exact";
  }
}

TEST(LinearInt8, SharedInputMixesInt8AndBf16Weights) {
  const int64_t K = 448, T = 3;
  const Tensor wa = Tensor::from_f32(rand_vec(64 * K, 21), {64, K}).to_dtype(DType::BF16);
  const Tensor wb = Tensor::from_f32(rand_vec(32 * K, 22), {32, K}).to_dtype(DType::BF16);
  const ops::LinearWeight qa = ops::prepare_linear_int8(wa), qb = ops::prepare_linear_int8(wb);
  const ops::LinearWeight pb = ops::prepare_linear(wb);
  const Tensor x = Tensor::from_f32(rand_vec(T * K, 23), {T, K});
  Tensor ya = Tensor::empty({T, 64}, DType::F32), yb = Tensor::empty({T, 32}, DType::F32);
  Tensor ya1 = Tensor::empty({T, 64}, DType::F32), yb1 = Tensor::empty({T, 32}, DType::F32);
  ops::linear_shared_input(x, {{&qa, nullptr, ya}, {&qb, nullptr, yb}});
  ops::linear(x, qa, nullptr, ya1);
  ops::linear(x, qb, nullptr, yb1);
  EXPECT_EQ(ya.to_f32_vector(), ya1.to_f32_vector());
  EXPECT_EQ(yb.to_f32_vector(), yb1.to_f32_vector());
  ops::linear_shared_input(x, {{&qa, nullptr, ya}, {&pb, nullptr, yb}});
  EXPECT_EQ(ya.to_f32_vector(), ya1.to_f32_vector());
  ops::linear(x, wb, nullptr, yb1);
  EXPECT_EQ(yb.to_f32_vector(), yb1.to_f32_vector()) << "the bf16 product of a mixed pair must stay the bf16 one";
}

}  // namespace
}  // namespace updraft
