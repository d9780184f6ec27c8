// Every backward op against central finite differences of the double-precision reference
// forward (tests/kernels/reference.h): loss = Σ R∘y for a fixed random R, so dL/dy = R.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "kernels/ops.h"
#include "tests/kernels/reference.h"

namespace updraft {
namespace {

using ref::Vec;

// Values exactly representable in f32, so that the f32 backward and the double reference
// differentiate at the same point.
Vec random_vec(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Vec v(n);
  for (auto& x : v)
    x = static_cast<double>(static_cast<float>(u(rng) * scale));
  return v;
}

Tensor tensor_of(const Vec& v, const Shape& s) {
  std::vector<float> f(v.begin(), v.end());
  return Tensor::from_f32(f, s);
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += a[i] * b[i];
  return s;
}

// Compares the analytic gradient of loss() w.r.t. x (which loss reads by reference) with
// central differences, relative to the largest gradient entry.
void expect_grad(const char* what, Vec& x, const std::vector<float>& analytic, const std::function<double()>& loss) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  const double h = 1e-5;
  double worst = 0, scale = 1e-6;
  for (float a : analytic)
    scale = std::max(scale, std::fabs(static_cast<double>(a)));
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    const double numeric = (up - down) / (2 * h);
    worst = std::max(worst, std::fabs(numeric - analytic[i]) / scale);
  }
  EXPECT_LT(worst, 2e-4) << what << ": worst relative gradient error";
}

TEST(Backward, Linear) {
  const int64_t T = 5, K = 7, N = 4;
  Vec x = random_vec(T * K, 1), w = random_vec(N * K, 2), b = random_vec(N, 3), R = random_vec(T * N, 4);
  auto loss = [&] {
    Vec y = ref::gemm(x, false, T, K, w, true, N, K);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n)
        y[t * N + n] += b[n];
    return dot(y, R);
  };
  Tensor dx = Tensor::zeros({T, K}, DType::F32), dw = Tensor::zeros({N, K}, DType::F32);
  Tensor db = Tensor::zeros({N}, DType::F32);
  ops::linear_backward(tensor_of(x, {T, K}), tensor_of(w, {N, K}), tensor_of(R, {T, N}), &dx, false, &dw, &db);
  expect_grad("dx", x, dx.to_f32_vector(), loss);
  expect_grad("dw", w, dw.to_f32_vector(), loss);
  expect_grad("db", b, db.to_f32_vector(), loss);

  // Parameter gradients accumulate; dx accumulates only when asked.
  ops::linear_backward(tensor_of(x, {T, K}), tensor_of(w, {N, K}), tensor_of(R, {T, N}), &dx, true, &dw, nullptr);
  const auto once = Tensor::zeros({N, K}, DType::F32);
  Tensor single = once;
  ops::linear_backward(tensor_of(x, {T, K}), tensor_of(w, {N, K}), tensor_of(R, {T, N}), nullptr, false, &single,
                       nullptr);
  const auto twice = dw.to_f32_vector(), one = single.to_f32_vector();
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_NEAR(twice[i], 2 * one[i], 1e-5);
}

TEST(Backward, RmsNorm) {
  const int64_t R_ = 3, H = 16;
  const double eps = 1e-5;
  Vec x = random_vec(R_ * H, 5, 2.0), w = random_vec(H, 6), R = random_vec(R_ * H, 7);
  auto loss = [&] { return dot(ref::rms_norm(x, w, R_, H, eps), R); };
  Tensor dx = Tensor::empty({R_, H}, DType::F32), dw = Tensor::zeros({H}, DType::F32);
  ops::rms_norm_backward(tensor_of(x, {R_, H}), tensor_of(w, {H}), static_cast<float>(eps), tensor_of(R, {R_, H}), dx,
                         &dw);
  expect_grad("dx", x, dx.to_f32_vector(), loss);
  expect_grad("dw", w, dw.to_f32_vector(), loss);
}

TEST(Backward, Rope) {
  const int64_t T = 4, NH = 2, HD = 8;
  Vec x = random_vec(T * NH * HD, 8), R = random_vec(T * NH * HD, 9);
  const std::vector<int32_t> pos = {0, 3, 7, 1000};
  const Tensor inv = ops::rope_inv_freq({}, HD);
  const std::vector<float> inv_v = inv.to_f32_vector();
  auto loss = [&] { return dot(ref::rope(x, pos, inv_v, T, NH, HD), R); };
  Tensor dx = tensor_of(R, {T, NH, HD});
  ops::rope_backward(dx, Tensor::from_i32(pos, {T}), inv);
  expect_grad("dx", x, dx.to_f32_vector(), loss);
}

TEST(Backward, SiluMul) {
  const int64_t n = 40;
  Vec g = random_vec(n, 10, 4.0), u = random_vec(n, 11), R = random_vec(n, 12);
  auto loss = [&] { return dot(ref::silu_mul(g, u), R); };
  Tensor dg = Tensor::empty({n}, DType::F32), du = Tensor::empty({n}, DType::F32);
  ops::silu_mul_backward(tensor_of(g, {n}), tensor_of(u, {n}), tensor_of(R, {n}), dg, du);
  expect_grad("dgate", g, dg.to_f32_vector(), loss);
  expect_grad("dup", u, du.to_f32_vector(), loss);
}

TEST(Backward, EmbeddingAccumulatesRepeatedIds) {
  const int64_t V = 6, H = 3;
  const std::vector<int32_t> ids = {2, 0, 2, 5};
  Vec table = random_vec(V * H, 13), R = random_vec(ids.size() * H, 14);
  auto loss = [&] {
    double s = 0;
    for (size_t t = 0; t < ids.size(); ++t)
      for (int64_t i = 0; i < H; ++i)
        s += table[ids[t] * H + i] * R[t * H + i];
    return s;
  };
  Tensor dt = Tensor::zeros({V, H}, DType::F32);
  const auto T = static_cast<int64_t>(ids.size());
  ops::embedding_backward(Tensor::from_i32(ids, {T}), tensor_of(R, {T, H}), dt);
  expect_grad("dtable", table, dt.to_f32_vector(), loss);
  EXPECT_THROW(ops::embedding_backward(Tensor::from_i32({1, 6}, {2}), Tensor::zeros({2, H}, DType::F32), dt), Error);
}

// Attention under every mask kind, with grouped-query heads.
void check_attention(const ops::AttentionMask& mask, int64_t T, int64_t S, uint32_t seed) {
  const int64_t NH = 4, NKV = 2, HD = 8;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HD));
  Vec q = random_vec(T * NH * HD, seed, 1.5), k = random_vec(S * NKV * HD, seed + 1, 1.5);
  Vec v = random_vec(S * NKV * HD, seed + 2), R = random_vec(T * NH * HD, seed + 3);
  auto loss = [&] { return dot(ref::attention(q, k, v, mask, T, NH, HD, S, NKV, scale).first, R); };
  const Tensor qt = tensor_of(q, {T, NH, HD}), kt = tensor_of(k, {S, NKV, HD}), vt = tensor_of(v, {S, NKV, HD});
  Tensor out = Tensor::empty({T, NH, HD}, DType::F32), lse = Tensor::empty({T, NH}, DType::F32);
  ops::attention(qt, kt, vt, mask, static_cast<float>(scale), out, &lse);
  Tensor dq = Tensor::empty({T, NH, HD}, DType::F32);
  Tensor dk = Tensor::zeros({S, NKV, HD}, DType::F32), dv = Tensor::zeros({S, NKV, HD}, DType::F32);
  ops::attention_backward(qt, kt, vt, out, lse, tensor_of(R, {T, NH, HD}), mask, static_cast<float>(scale), dq, dk, dv);
  expect_grad("dq", q, dq.to_f32_vector(), loss);
  expect_grad("dk", k, dk.to_f32_vector(), loss);
  expect_grad("dv", v, dv.to_f32_vector(), loss);
}

TEST(Backward, AttentionCausal) {
  check_attention(ops::AttentionMask::causal(0), 5, 5, 20);
  check_attention(ops::AttentionMask::causal(3), 4, 7, 30);
}

TEST(Backward, AttentionTree) {
  const int64_t T = 4;
  std::vector<uint8_t> m = {1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 1, 0, 1};
  Tensor tm = Tensor::empty({T, T}, DType::Bool);
  std::copy(m.begin(), m.end(), tm.data<uint8_t>());
  check_attention(ops::AttentionMask::tree(3, tm), T, 3 + T, 40);
}

TEST(Backward, AttentionTrainingTimeTest) {
  const int64_t T = 5;
  for (int64_t steps : {0, 1, 3})
    check_attention(ops::AttentionMask::ttt(steps), T, (steps + 1) * T, 50 + static_cast<uint32_t>(steps));
  // Only the last rows as queries (TTT steps >= 1 skip rows that predict nothing).
  for (int64_t steps : {1, 3})
    check_attention(ops::AttentionMask::ttt(steps, 2), T - 2, (steps + 1) * T, 60 + static_cast<uint32_t>(steps));
}

// Large enough to run on every thread: the key and value gradients are the same bits on every run
// (the threads' partial sums are added in a fixed order), so training runs repeat exactly.
TEST(Backward, AttentionIsDeterministicAcrossRuns) {
  const int64_t T = 96, NH = 8, NKV = 4, HD = 32, S = 96;
  const ops::AttentionMask mask = ops::AttentionMask::causal(0);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  const Tensor q = tensor_of(random_vec(T * NH * HD, 61, 1.5), {T, NH, HD});
  const Tensor k = tensor_of(random_vec(S * NKV * HD, 62, 1.5), {S, NKV, HD});
  const Tensor v = tensor_of(random_vec(S * NKV * HD, 63), {S, NKV, HD});
  const Tensor g = tensor_of(random_vec(T * NH * HD, 64), {T, NH, HD});
  Tensor out = Tensor::empty({T, NH, HD}, DType::F32), lse = Tensor::empty({T, NH}, DType::F32);
  ops::attention(q, k, v, mask, scale, out, &lse);
  auto grads = [&] {
    Tensor dq = Tensor::empty({T, NH, HD}, DType::F32);
    Tensor dk = Tensor::zeros({S, NKV, HD}, DType::F32), dv = Tensor::zeros({S, NKV, HD}, DType::F32);
    ops::attention_backward(q, k, v, out, lse, g, mask, scale, dq, dk, dv);
    std::vector<float> all = dk.to_f32_vector(), dvv = dv.to_f32_vector();
    all.insert(all.end(), dvv.begin(), dvv.end());
    return all;
  };
  const std::vector<float> first = grads();
  for (int run = 0; run < 40; ++run)
    ASSERT_EQ(grads(), first) << "run " << run;
}

TEST(Backward, CrossEntropy) {
  const int64_t R_ = 4, C = 9;
  Vec z = random_vec(R_ * C, 60, 3.0), dl = {1.0, 0.5, 2.0, 1.0};
  const std::vector<int32_t> target = {3, -1, 0, 8};
  auto loss = [&] {
    Vec ls = ref::softmax(z, R_, C, true);
    double s = 0;
    for (int64_t r = 0; r < R_; ++r)
      if (target[r] >= 0)
        s -= dl[r] * ls[r * C + target[r]];
    return s;
  };
  Tensor dz = Tensor::empty({R_, C}, DType::F32);
  ops::cross_entropy_backward(tensor_of(z, {R_, C}), Tensor::from_i32(target, {R_}), tensor_of(dl, {R_}), dz);
  expect_grad("dlogits", z, dz.to_f32_vector(), loss);
}

TEST(Backward, SoftCrossEntropy) {
  const int64_t R_ = 3, C = 7;
  Vec z = random_vec(R_ * C, 70, 3.0), dl = {1.0, 0.25, 3.0};
  // Row 0 sums to 1, row 1 is all zero (a masked row), row 2 has mass 0.6 (a teacher
  // restricted to a draft vocabulary without renormalising).
  Vec p(R_ * C, 0.0);
  for (int64_t c = 0; c < C; ++c) {
    p[c] = 1.0 / C;
    p[2 * C + c] = c < 3 ? 0.2 : 0.0;
  }
  auto loss = [&] {
    Vec ls = ref::softmax(z, R_, C, true);
    double s = 0;
    for (int64_t r = 0; r < R_; ++r)
      for (int64_t c = 0; c < C; ++c)
        s -= dl[r] * p[r * C + c] * ls[r * C + c];
    return s;
  };
  Tensor zt = tensor_of(z, {R_, C});
  Tensor dz = Tensor::empty({R_, C}, DType::F32);
  ops::soft_cross_entropy_backward(zt, tensor_of(p, {R_, C}), tensor_of(dl, {R_}), dz);
  expect_grad("dlogits", z, dz.to_f32_vector(), loss);
  // In place gives the same result.
  ops::soft_cross_entropy_backward(zt, tensor_of(p, {R_, C}), tensor_of(dl, {R_}), zt);
  EXPECT_EQ(zt.to_f32_vector(), dz.to_f32_vector());
}

TEST(Backward, RejectsBadShapes) {
  Tensor x = Tensor::zeros({2, 3}, DType::F32), w = Tensor::zeros({4, 3}, DType::F32);
  Tensor dy = Tensor::zeros({2, 5}, DType::F32), dx = Tensor::zeros({2, 3}, DType::F32);
  EXPECT_THROW(ops::linear_backward(x, w, dy, &dx, false, nullptr, nullptr), CheckFailure);
  Tensor dk = Tensor::zeros({3, 1, 4}, DType::F32);
  Tensor q = Tensor::zeros({2, 1, 4}, DType::F32), lse = Tensor::zeros({2, 1}, DType::F32);
  EXPECT_THROW(ops::attention_backward(q, dk, dk, q, lse, q, ops::AttentionMask::ttt(1), 1.f, q, dk, dk), CheckFailure);
}

}  // namespace
}  // namespace updraft
