// Backend parity cases (backend_parity.h): matrix products, linear layers, norms, rope and
// pointwise ops; embedding lookup, top-k, sampling and cross entropy.
#include <array>
#include <limits>
#include <string>
#include <vector>

#include "tests/kernels/backend_parity.h"

namespace updraft::parity {
namespace {

void gemm_case(const Backend& b, int64_t M, int64_t K, int64_t N, bool ta, bool tb, float alpha, float beta) {
  const Shape sa = ta ? Shape{K, M} : Shape{M, K}, sb = tb ? Shape{N, K} : Shape{K, N};
  auto av = rand_vec(M * K, 1 + M), bv = rand_vec(K * N, 2 + N), cv = rand_vec(M * N, 3);
  Vec A = rounded(av, b.act), B = rounded(bv, b.weight), C0 = rounded(cv, b.act);
  Tensor a = make(av, sa, b, b.act), w = make(bv, sb, b, b.weight), c = make(cv, {M, N}, b, b.act);
  ops::gemm(a, ta, w, tb, c, alpha, beta);
  Vec want = ref::gemm(A, ta, sa[0], sa[1], B, tb, sb[0], sb[1]);
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = alpha * want[i] + beta * C0[i];
  expect_close(fetch(c), want, atol(b) * std::sqrt(K), rtol(b), "gemm");
}

void linear_case(const Backend& b, int64_t T, int64_t K, int64_t N, bool with_bias) {
  auto xv = rand_vec(T * K, 10 + T), wv = rand_vec(N * K, 11 + N), bv = rand_vec(N, 12);
  // The CPU multiplies bf16 weights with bf16-rounded inputs (gemm.h): that rounding is part
  // of the contract, the arithmetic after it is f32.
  const DType x_seen = b.device == Device::CPU && b.weight == DType::BF16 ? DType::BF16 : b.act;
  Vec X = rounded(xv, x_seen), W = rounded(wv, b.weight), Bi = rounded(bv, b.weight);
  Tensor x = make(xv, {T, K}, b, b.act), w = make(wv, {N, K}, b, b.weight), y = Tensor::empty({T, N}, b.act, b.device);
  Tensor bias = make(bv, {N}, b, b.weight);
  ops::linear(x, w, with_bias ? &bias : nullptr, y);
  Vec want = ref::gemm(X, false, T, K, W, true, N, K);
  if (with_bias)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n)
        want[t * N + n] += Bi[n];
  expect_close(fetch(y), want, atol(b) * std::sqrt(K), rtol(b), "linear");
}

void sampling_case(const Backend& b) {
  const int64_t V = 300;
  const std::vector<float> temps = {0.f, 1.f, 0.7f, 1.f, 1.3f, 0.5f};
  const std::vector<int32_t> ks = {0, 0, 20, 0, 50, 1};
  const std::vector<float> ps = {1.f, 1.f, 1.f, 0.9f, 0.5f, 0.3f};
  const int64_t R = static_cast<int64_t>(temps.size());
  auto zv = rand_vec(R * V, 30, -4, 4);
  Tensor logits = make(zv, {R, V}, b, DType::F32);
  Tensor probs = Tensor::empty({R, V}, DType::F32, b.device);
  ops::sampling_probs(logits, make(temps, {R}, b, DType::F32), make_i32(ks, {R}, b), make(ps, {R}, b, DType::F32),
                      probs);
  Vec Z = rounded(zv, DType::F32), want;
  for (int64_t r = 0; r < R; ++r) {
    Vec row = ref::sampling_probs(Z.data() + r * V, V, temps[r], ks[r], ps[r]);
    want.insert(want.end(), row.begin(), row.end());
  }
  expect_close(fetch(probs), want, 1e-6, 1e-4, "sampling_probs");

  // Inverse-CDF sampling on the full-softmax rows with fixed uniforms.
  std::vector<float> us;
  for (int64_t r = 0; r < R; ++r)
    us.push_back(ops::uniform01(7, static_cast<uint64_t>(r)));
  Tensor ids = Tensor::empty({R}, DType::I32, b.device);
  ops::sample_from_probs(probs, make(us, {R}, b, DType::F32), ids);
  auto got = ids.to_i32_vector();
  auto pv = fetch(probs);
  for (int64_t r = 0; r < R; ++r) {
    double total = 0, cum = 0;
    for (int64_t i = 0; i < V; ++i)
      total += pv[r * V + i];
    int32_t expect = -1;
    for (int64_t i = 0; i < V && expect < 0; ++i) {
      if (pv[r * V + i] <= 0)
        continue;
      cum += pv[r * V + i];
      if (cum > us[r] * total)
        expect = static_cast<int32_t>(i);
    }
    EXPECT_EQ(got[r], expect) << "sample_from_probs row " << r;
  }
}

}  // namespace

void append_dense_cases(std::vector<OpCase>& c) {
  for (auto [M, K, N] : std::vector<std::array<int64_t, 3>>{{1, 64, 96}, {7, 33, 65}, {64, 128, 80}})
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      c.push_back({"gemm_" + std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N) + (ta ? "_ta" : "") +
                       (tb ? "_tb" : ""),
                   true, [=](const Backend& b) { gemm_case(b, M, K, N, ta, tb, 1.f, 0.f); }});
    }
  c.push_back({"gemm_alpha_beta", true, [](const Backend& b) { gemm_case(b, 9, 40, 24, false, true, 1.5f, 0.5f); }});
  c.push_back({"batched_gemm", true, [](const Backend& b) {
                 const int64_t Bt = 3, M = 5, K = 16, N = 12;
                 auto av = rand_vec(Bt * M * K, 40), bv = rand_vec(Bt * N * K, 41);
                 Tensor a = make(av, {Bt, M, K}, b, b.act), w = make(bv, {Bt, N, K}, b, b.weight);
                 Tensor out = Tensor::empty({Bt, M, N}, b.act, b.device);
                 ops::batched_gemm(a, false, w, true, out);
                 Vec A = rounded(av, b.act), B = rounded(bv, b.weight), want;
                 for (int64_t i = 0; i < Bt; ++i) {
                   Vec ai(A.begin() + i * M * K, A.begin() + (i + 1) * M * K),
                       bi(B.begin() + i * N * K, B.begin() + (i + 1) * N * K);
                   Vec ci = ref::gemm(ai, false, M, K, bi, true, N, K);
                   want.insert(want.end(), ci.begin(), ci.end());
                 }
                 expect_close(fetch(out), want, atol(b) * 4, rtol(b), "batched_gemm");
               }});
  for (auto [T, K, N] : std::vector<std::array<int64_t, 3>>{
           {1, 100, 70}, {3, 100, 70}, {8, 256, 512}, {9, 100, 70}, {40, 96, 130}, {300, 64, 40}})
    c.push_back({"linear_T" + std::to_string(T) + "_K" + std::to_string(K) + "_N" + std::to_string(N), true,
                 [=](const Backend& b) { linear_case(b, T, K, N, false); }});
  c.push_back({"linear_bias_decode", true, [](const Backend& b) { linear_case(b, 2, 48, 24, true); }});
  c.push_back({"linear_bias_prefill", true, [](const Backend& b) { linear_case(b, 20, 48, 24, true); }});

  for (auto [R, H] : std::vector<std::array<int64_t, 2>>{{1, 64}, {5, 100}})
    c.push_back({"rms_norm_" + std::to_string(R) + "x" + std::to_string(H), true, [=](const Backend& b) {
                   auto xv = rand_vec(R * H, 50, -3, 3), wv = rand_vec(H, 51, 0.5f, 1.5f);
                   Tensor x = make(xv, {R, H}, b, b.act), w = make(wv, {H}, b, b.weight);
                   Tensor out = Tensor::empty({R, H}, b.act, b.device);
                   ops::rms_norm(x, w, 1e-5f, out);
                   Vec want = ref::rms_norm(rounded(xv, b.act), rounded(wv, b.weight), R, H, 1e-5);
                   expect_close(fetch(out), want, atol(b), rtol(b), "rms_norm");
                   ops::rms_norm(x, w, 1e-5f, x);  // in place
                   expect_close(fetch(x), want, atol(b), rtol(b), "rms_norm in place");
                 }});

  for (std::string scaling : {"none", "llama3"})
    c.push_back({"rope_" + scaling, false, [=](const Backend& b) {
                   const int64_t T = 5, NH = 3, HD = 16;
                   ops::RopeParams p;
                   p.theta = 500000;
                   p.scaling = scaling;
                   p.factor = 8;
                   p.original_max_position = 64;  // small so that the ramp covers some of the 8 frequencies
                   std::vector<int32_t> pos = {0, 1, 17, 300, 4099};
                   auto xv = rand_vec(T * NH * HD, 60);
                   Tensor x = make(xv, {T, NH, HD}, b, b.act);
                   Tensor inv = ops::rope_inv_freq(p, HD, b.device);
                   ops::rope(x, make_i32(pos, {T}, b), inv);
                   Vec want = ref::rope(rounded(xv, b.act), pos, inv.to_f32_vector(), T, NH, HD);
                   expect_close(fetch(x), want, atol(b), rtol(b), "rope");
                 }});

  c.push_back({"silu_mul_add", false, [](const Backend& b) {
                 auto gv = rand_vec(7 * 33, 70, -6, 6), uv = rand_vec(7 * 33, 71);
                 Tensor g = make(gv, {7, 33}, b, b.act), u = make(uv, {7, 33}, b, b.act),
                        o = Tensor::empty({7, 33}, b.act, b.device);
                 ops::silu_mul(g, u, o);
                 expect_close(fetch(o), ref::silu_mul(rounded(gv, b.act), rounded(uv, b.act)), atol(b), rtol(b),
                              "silu_mul");
                 ops::add(g, u, o);
                 Vec G = rounded(gv, b.act), U = rounded(uv, b.act), want(G.size());
                 for (size_t i = 0; i < G.size(); ++i)
                   want[i] = G[i] + U[i];
                 expect_close(fetch(o), want, atol(b), rtol(b), "add");
               }});

  c.push_back({"convert", false, [](const Backend& b) {
                 auto v = rand_vec(1000, 80, -70000, 70000);
                 v[0] = 65519.f;
                 v[1] = 1e-7f;
                 for (DType dt : {DType::BF16, DType::F16}) {
                   Tensor src = make(v, {1000}, b, DType::F32), dst = Tensor::empty({1000}, dt, b.device);
                   ops::convert(src, dst);
                   Tensor host = dst.to(Device::CPU);
                   for (size_t i = 0; i < v.size(); ++i) {
                     const uint16_t want = dt == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
                     ASSERT_EQ(host.data<uint16_t>()[i], want) << "convert to " << dtype_name(dt) << " of " << v[i];
                   }
                   Tensor back = Tensor::empty({1000}, DType::F32, b.device);
                   ops::convert(dst, back);
                   EXPECT_EQ(back.to_f32_vector(), dst.to(Device::CPU).to_f32_vector());
                 }
               }});

  for (bool log : {false, true})
    c.push_back({log ? "log_softmax" : "softmax", false, [=](const Backend& b) {
                   const int64_t R = 4, C = 1000;
                   auto xv = rand_vec(R * C, 90, -20, 20);
                   Tensor x = make(xv, {R, C}, b, b.act), out = Tensor::empty({R, C}, DType::F32, b.device);
                   log ? ops::log_softmax(x, out) : ops::softmax(x, out);
                   expect_close(fetch(out), ref::softmax(rounded(xv, b.act), R, C, log), log ? atol(b) : 1e-6, rtol(b),
                                "softmax");
                 }});
}

void append_lookup_and_loss_cases(std::vector<OpCase>& c) {
  c.push_back({"embedding", true, [](const Backend& b) {
                 const int64_t V = 50, H = 24;
                 std::vector<int32_t> ids = {0, 49, 7, 7, 23, 1, 48, 30, 2};
                 const int64_t T = static_cast<int64_t>(ids.size());
                 auto tv = rand_vec(V * H, 100);
                 Tensor out = Tensor::empty({T, H}, b.act, b.device);
                 ops::embedding(make_i32(ids, {T}, b), make(tv, {V, H}, b, b.weight), out);
                 Vec tab = rounded(tv, b.weight), want;
                 for (int32_t id : ids)
                   want.insert(want.end(), tab.begin() + id * H, tab.begin() + (id + 1) * H);
                 expect_close(fetch(out), rounded(std::vector<float>(want.begin(), want.end()), b.act), 0, 0,
                              "embedding");
               }});

  for (int64_t k : {1, 5, 200})
    c.push_back(
        {"topk_" + std::to_string(k), false, [=](const Backend& b) {
           const int64_t R = 3, C = 200;
           auto xv = rand_vec(R * C, 110 + k);
           xv[5] = xv[9] = 2.f;  // an exact tie at the top: lower index first
           Tensor x = make(xv, {R, C}, b, b.act);
           Tensor vals = Tensor::empty({R, k}, DType::F32, b.device), idx = Tensor::empty({R, k}, DType::I32, b.device);
           ops::topk(x, k, vals, idx);
           Tensor am = Tensor::empty({R}, DType::I32, b.device);
           ops::argmax(x, am);
           Vec X = rounded(xv, b.act);
           auto gi = idx.to_i32_vector();
           auto gv = fetch(vals);
           auto ga = am.to_i32_vector();
           for (int64_t r = 0; r < R; ++r) {
             auto want = ref::topk(X.data() + r * C, C, k);
             EXPECT_EQ(ga[r], want[0]) << "argmax row " << r;
             for (int64_t j = 0; j < k; ++j) {
               EXPECT_EQ(gi[r * k + j], want[j]) << "topk row " << r << " rank " << j;
               EXPECT_EQ(gv[r * k + j], X[r * C + want[j]]);
             }
           }
         }});

  // The drafter's proposal: bitwise log_softmax then topk on the same backend, and the reference's
  // order. Row 1 has masked entries, row 2 a single finite one (its other ranks are -inf, lower
  // indices first), row 3 five values repeated (ties across the k-th rank: lower indices first),
  // row 4 the best far above the rest (the k best 60 below it), and C is not a multiple of 16.
  for (int64_t k : {1, 4, 32, 64})
    c.push_back({"top_log_softmax_" + std::to_string(k), false, [=](const Backend& b) {
                   const int64_t R = 5, C = 1000;
                   const float ninf = -std::numeric_limits<float>::infinity();
                   auto xv = rand_vec(R * C, 130 + k, -8, 8);
                   xv[5] = xv[9] = 30.f;  // an exact tie at the top: lower index first
                   for (int64_t i = 0; i < C; i += 3)
                     xv[C + i] = ninf;
                   for (int64_t i = 0; i < C; ++i) {
                     xv[2 * C + i] = i == 17 ? 1.f : ninf;
                     xv[3 * C + i] = static_cast<float>(i % 5);
                     xv[4 * C + i] = i == 500 ? 60.f : xv[4 * C + i];
                   }
                   Tensor x = make(xv, {R, C}, b, b.act), lp = Tensor::empty({R, C}, DType::F32, b.device);
                   const auto empty = [&](DType dt) { return Tensor::empty({R, k}, dt, b.device); };
                   Tensor vals = empty(DType::F32), idx = empty(DType::I32), v2 = empty(DType::F32),
                          i2 = empty(DType::I32);
                   ops::top_log_softmax(x, k, vals, idx);
                   ops::log_softmax(x, lp);
                   ops::topk(lp, k, v2, i2);
                   const auto gi = idx.to_i32_vector();
                   EXPECT_EQ(gi, i2.to_i32_vector());
                   EXPECT_EQ(vals.to_f32_vector(), v2.to_f32_vector());
                   const Vec want = ref::softmax(rounded(xv, b.act), R, C, true);
                   const auto gv = fetch(vals);
                   for (int64_t r = 0; r < R; ++r) {
                     const auto order = ref::topk(want.data() + r * C, C, k);
                     for (int64_t j = 0; j < k; ++j) {
                       EXPECT_EQ(gi[r * k + j], order[j]) << "row " << r << " rank " << j;
                       const double w = want[r * C + order[j]];
                       if (std::isinf(w))
                         EXPECT_EQ(gv[r * k + j], w);
                       else
                         EXPECT_NEAR(gv[r * k + j], w, atol(b) + rtol(b) * std::abs(w));
                     }
                   }
                 }});

  c.push_back({"sampling", false, sampling_case});

  c.push_back({"cross_entropy", false, [](const Backend& b) {
                 const int64_t R = 5, C = 40;
                 auto zv = rand_vec(R * C, 120, -5, 5);
                 std::vector<int32_t> tg = {3, 0, 39, -1, 17};
                 Tensor z = make(zv, {R, C}, b, b.act), loss = Tensor::empty({R}, DType::F32, b.device);
                 ops::cross_entropy(z, make_i32(tg, {R}, b), loss);
                 Vec ls = ref::softmax(rounded(zv, b.act), R, C, true), want(R);
                 for (int64_t r = 0; r < R; ++r)
                   want[r] = tg[r] < 0 ? 0 : -ls[r * C + tg[r]];
                 expect_close(fetch(loss), want, atol(b), rtol(b), "cross_entropy");
                 auto tv = rand_vec(R * C, 121, -3, 3);
                 Vec P = ref::softmax(rounded(tv, DType::F32), R, C, false);
                 Tensor teacher = make(std::vector<float>(P.begin(), P.end()), {R, C}, b, DType::F32);
                 ops::soft_cross_entropy(z, teacher, loss);
                 Vec Pf = rounded(std::vector<float>(P.begin(), P.end()), DType::F32);
                 for (int64_t r = 0; r < R; ++r) {
                   want[r] = 0;
                   for (int64_t i = 0; i < C; ++i)
                     want[r] -= Pf[r * C + i] * ls[r * C + i];
                 }
                 expect_close(fetch(loss), want, atol(b), rtol(b), "soft_cross_entropy");
               }});
}

}  // namespace updraft::parity
