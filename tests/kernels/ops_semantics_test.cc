// Hand-built cases for the op semantics that matter most to speculative decoding and TTT:
// masks, RoPE scaling, the sampling distribution, and the errors bad input must raise.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/ops.h"
#include "tests/kernels/rand_vec.h"
#include "tests/kernels/reference.h"

namespace updraft {
namespace {

using testing_kernels::rand_vec;

TEST(AttentionMask, TttIsCausalOnStepZeroPlusTheDiagonal) {
  const auto m = ops::AttentionMask::ttt(2);
  const int64_t T = 3;
  // Row 1 sees step-0 keys 0,1 and step-1 key 4 and step-2 key 7, nothing else.
  std::vector<int64_t> seen;
  for (int64_t j = 0; j < 3 * T; ++j)
    if (ops::attention_visible(m, T, 1, j))
      seen.push_back(j);
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 4, 7}));
  // The same row as query 0 of the last two rows (first_row 1): the same keys.
  seen.clear();
  for (int64_t j = 0; j < 3 * T; ++j)
    if (ops::attention_visible(ops::AttentionMask::ttt(2, 1), T - 1, 0, j))
      seen.push_back(j);
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 4, 7}));
}

TEST(Attention, TttLastRowsEqualTheFullStep) {
  // Queries for rows 2..4 only (first_row 2) give those rows' outputs of the full step, bit for bit.
  const int64_t T = 5, NH = 2, NKV = 1, HD = 8, steps = 2, S = (steps + 1) * T, first = 2;
  auto qv = rand_vec(T * NH * HD, 11), kv = rand_vec(S * NKV * HD, 12), vv = rand_vec(S * NKV * HD, 13);
  Tensor q = Tensor::from_f32(qv, {T, NH, HD}), k = Tensor::from_f32(kv, {S, NKV, HD}),
         v = Tensor::from_f32(vv, {S, NKV, HD});
  Tensor full = Tensor::empty({T, NH, HD}, DType::F32), last = Tensor::empty({T - first, NH, HD}, DType::F32);
  ops::attention(q, k, v, ops::AttentionMask::ttt(steps), 0.35f, full);
  ops::attention(q.rows(first, T), k, v, ops::AttentionMask::ttt(steps, first), 0.35f, last);
  EXPECT_EQ(full.rows(first, T).to_f32_vector(), last.to_f32_vector());
  Tensor bad = Tensor::empty({T - 1, NH, HD}, DType::F32);
  EXPECT_THROW(ops::attention(q.rows(0, T - 1), k, v, ops::AttentionMask::ttt(steps, first), 0.35f, bad), CheckFailure);
}

TEST(Attention, TttRowEqualsCausalAttentionOverItsOwnChain) {
  // Row p at step k must behave like a query attending to [step-0 keys 0..p, step-1 key p, ..., step-k key p].
  const int64_t T = 5, NH = 2, NKV = 1, HD = 8, steps = 2, S = (steps + 1) * T;
  auto qv = rand_vec(T * NH * HD, 1), kv = rand_vec(S * NKV * HD, 2), vv = rand_vec(S * NKV * HD, 3);
  Tensor q = Tensor::from_f32(qv, {T, NH, HD}), k = Tensor::from_f32(kv, {S, NKV, HD}),
         v = Tensor::from_f32(vv, {S, NKV, HD});
  Tensor out = Tensor::empty({T, NH, HD}, DType::F32);
  ops::attention(q, k, v, ops::AttentionMask::ttt(steps), 0.35f, out);
  for (int64_t p = 0; p < T; ++p) {
    std::vector<int64_t> rows;
    for (int64_t j = 0; j <= p; ++j)
      rows.push_back(j);
    for (int64_t s = 1; s <= steps; ++s)
      rows.push_back(s * T + p);
    const int64_t n = static_cast<int64_t>(rows.size());
    Tensor kc = Tensor::empty({n, NKV, HD}, DType::F32), vc = Tensor::empty({n, NKV, HD}, DType::F32);
    for (int64_t r = 0; r < n; ++r) {
      kc.row(r).copy_from(k.row(rows[r]));
      vc.row(r).copy_from(v.row(rows[r]));
    }
    Tensor o1 = Tensor::empty({1, NH, HD}, DType::F32);
    ops::attention(q.row(p), kc, vc, ops::AttentionMask::causal(n - 1), 0.35f, o1);
    auto a = out.row(p).to_f32_vector(), b = o1.to_f32_vector();
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(a[i], b[i], 1e-5) << "row " << p;
  }
}

TEST(Attention, ChainTreeEqualsCausal) {
  const int64_t prefix = 4, T = 3, S = prefix + T, NH = 2, HD = 8;
  Tensor mask = Tensor::zeros({T, T}, DType::Bool);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j <= i; ++j)
      mask.data<uint8_t>()[i * T + j] = 1;
  Tensor q = Tensor::from_f32(rand_vec(T * NH * HD, 4), {T, NH, HD});
  Tensor k = Tensor::from_f32(rand_vec(S * NH * HD, 5), {S, NH, HD}),
         v = Tensor::from_f32(rand_vec(S * NH * HD, 6), {S, NH, HD});
  Tensor a = Tensor::empty({T, NH, HD}, DType::F32), b = Tensor::empty({T, NH, HD}, DType::F32);
  ops::attention(q, k, v, ops::AttentionMask::tree(prefix, mask), 0.3f, a);
  ops::attention(q, k, v, ops::AttentionMask::causal(prefix), 0.3f, b);
  EXPECT_EQ(a.to_f32_vector(), b.to_f32_vector());
}

TEST(Attention, BadShapesAreRejected) {
  Tensor q = Tensor::zeros({2, 3, 8}, DType::F32), k = Tensor::zeros({4, 2, 8}, DType::F32),
         out = Tensor::zeros({2, 3, 8}, DType::F32);
  EXPECT_THROW(ops::attention(q, k, k, ops::AttentionMask::causal(0), 1.f, out),
               CheckFailure);  // 3 heads over 2 kv heads
  Tensor q2 = Tensor::zeros({3, 2, 8}, DType::F32), o2 = Tensor::zeros({3, 2, 8}, DType::F32);
  EXPECT_THROW(ops::attention(q2, k, k, ops::AttentionMask::causal(2), 1.f, o2), CheckFailure);  // S < q_offset + T
  EXPECT_THROW(ops::attention(q2, k, k, ops::AttentionMask::ttt(1), 1.f, o2), CheckFailure);     // S != 2T
}

TEST(Rope, Llama3ScalingFollowsTheThreeBands) {
  ops::RopeParams p;
  p.theta = 500000;
  p.scaling = "llama3";
  p.factor = 8;
  p.low_freq_factor = 1;
  p.high_freq_factor = 4;
  p.original_max_position = 8192;
  auto inv = ops::rope_inv_freq(p, 128).to_f32_vector();
  ops::RopeParams plain = p;
  plain.scaling = "none";
  auto base = ops::rope_inv_freq(plain, 128).to_f32_vector();
  EXPECT_FLOAT_EQ(inv[0], 1.0f);  // wavelength 2*pi: high frequency, unchanged
  for (size_t i = 0; i < inv.size(); ++i) {
    const double wavelen = 2 * M_PI / base[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_FLOAT_EQ(inv[i], base[i]) << i;
    }
    if (wavelen > 8192.0 / 1) {
      EXPECT_FLOAT_EQ(inv[i], base[i] / 8) << i;
    }
    if (wavelen >= 8192.0 / 4 && wavelen <= 8192.0) {
      EXPECT_LE(inv[i], base[i] * (1 + 1e-6)) << i;
      EXPECT_GE(inv[i], base[i] / 8 * (1 - 1e-6)) << i;
    }
  }
  p.scaling = "yarn";
  EXPECT_THROW(ops::rope_inv_freq(p, 128), Error);
}

TEST(Rope, PositionZeroIsIdentityAndRotationKeepsNorms) {
  const int64_t T = 2, NH = 1, HD = 8;
  auto xv = rand_vec(T * NH * HD, 7);
  Tensor x = Tensor::from_f32(xv, {T, NH, HD});
  ops::rope(x, Tensor::from_i32({0, 12345}, {T}), ops::rope_inv_freq({}, HD));
  auto y = x.to_f32_vector();
  for (int i = 0; i < HD; ++i)
    EXPECT_EQ(y[i], xv[i]);
  for (int i = 0; i < HD / 2; ++i) {
    const float a = xv[HD + i], b = xv[HD + i + HD / 2], c = y[HD + i], d = y[HD + i + HD / 2];
    EXPECT_NEAR(a * a + b * b, c * c + d * d, 1e-5);
  }
}

// The CPU keeps the last call's angles for the next call with the same positions and frequencies
// (a forward rotates every layer's q and k at the same ones): each call below changes one of
// them, and each result must be that of its own positions and frequencies.
TEST(Rope, ACallWithOtherPositionsOrFrequenciesGetsItsOwnAngles) {
  const int64_t T = 3, NH = 2, HD = 16;
  const auto xv = rand_vec(T * NH * HD, 11);
  ops::RopeParams fast;
  fast.theta = 500.f;
  const Tensor inv_a = ops::rope_inv_freq({}, HD), inv_b = ops::rope_inv_freq(fast, HD);
  struct Call {
    std::vector<int32_t> pos;
    const Tensor* inv;
  };
  const std::vector<Call> calls = {{{4, 5, 6}, &inv_a}, {{4, 5, 6}, &inv_a}, {{4, 5, 7}, &inv_a},
                                   {{4, 5, 7}, &inv_b}, {{9, 10}, &inv_b},   {{4, 5, 6}, &inv_a}};
  for (const Call& c : calls) {
    const int64_t n = static_cast<int64_t>(c.pos.size());
    const std::vector<float> in(xv.begin(), xv.begin() + n * NH * HD);
    Tensor x = Tensor::from_f32(in, {n, NH, HD});
    ops::rope(x, Tensor::from_i32(c.pos, {n}), *c.inv);
    const auto want = ref::rope(ref::Vec(in.begin(), in.end()), c.pos, c.inv->to_f32_vector(), n, NH, HD);
    const auto got = x.to_f32_vector();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5) << "element " << i << " at positions starting " << c.pos[0];
  }
}

std::vector<float> probs_of(const std::vector<float>& logits, float temp, int32_t k, float p) {
  const int64_t V = static_cast<int64_t>(logits.size());
  Tensor out = Tensor::empty({1, V}, DType::F32);
  ops::sampling_probs(Tensor::from_f32(logits, {1, V}), Tensor::from_f32({temp}, {1}), Tensor::from_i32({k}, {1}),
                      Tensor::from_f32({p}, {1}), out);
  return out.to_f32_vector();
}

TEST(Sampling, TopPKeepsTheTokenThatCrossesTheThreshold) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  auto p = probs_of(logits, 1.f, 0, 0.6f);
  EXPECT_NEAR(p[0], 0.625f, 1e-6);
  EXPECT_NEAR(p[1], 0.375f, 1e-6);
  EXPECT_EQ(p[2], 0.f);
  p = probs_of(logits, 1.f, 0, 0.5f);  // mass 0.5 reached by the first token alone
  EXPECT_NEAR(p[0], 1.f, 1e-6);
  p = probs_of(logits, 1.f, 2, 1.f);  // top-k 2
  EXPECT_NEAR(p[1], 0.375f, 1e-6);
  p = probs_of(logits, 1.f, 2, 0.7f);  // top-p over the top-k renormalised: 0.625 < 0.7 -> both kept
  EXPECT_NEAR(p[0], 0.625f, 1e-6);
  p = probs_of(logits, 0.f, 0, 1.f);  // greedy
  EXPECT_EQ(p, (std::vector<float>{1.f, 0.f, 0.f}));
  p = probs_of(logits, 2.f, 0, 1.f);  // temperature 2: p ~ sqrt(p0)
  const float s = std::sqrt(0.5f) + std::sqrt(0.3f) + std::sqrt(0.2f);
  EXPECT_NEAR(p[2], std::sqrt(0.2f) / s, 1e-6);
}

TEST(Sampling, BadParamsAreErrors) {
  const std::vector<float> logits = {0.f, 1.f};
  EXPECT_THROW(probs_of(logits, -1.f, 0, 1.f), Error);
  EXPECT_THROW(probs_of(logits, 1.f, 0, 0.f), Error);
  EXPECT_THROW(probs_of(logits, 1.f, 0, 1.5f), Error);
  EXPECT_THROW(probs_of(logits, 1.f, -3, 1.f), Error);
}

TEST(Sampling, InverseCdfSamplesFollowTheDistribution) {
  // 30000 draws from [0.1, 0.2, 0.7] with the counter RNG; a chi-square test with 2 degrees of
  // freedom at p = 0.001 (critical value 13.8) fails a correct sampler once in a thousand seeds;
  // the seed is fixed, so the test is deterministic.
  const std::vector<float> probs = {0.1f, 0.2f, 0.7f};
  const int n = 30000;
  Tensor p = Tensor::empty({n, 3}, DType::F32);
  std::vector<float> us(n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j)
      p.data<float>()[i * 3 + j] = probs[j];
    us[i] = ops::uniform01(42, static_cast<uint64_t>(i));
  }
  Tensor ids = Tensor::empty({n}, DType::I32);
  ops::sample_from_probs(p, Tensor::from_f32(us, {n}), ids);
  int count[3] = {0, 0, 0};
  for (int32_t id : ids.to_i32_vector())
    count[id]++;
  double chi2 = 0;
  for (int j = 0; j < 3; ++j)
    chi2 += std::pow(count[j] - n * probs[j], 2) / (n * probs[j]);
  EXPECT_LT(chi2, 13.8) << count[0] << " " << count[1] << " " << count[2];
  // And a zero-probability token is never drawn, even at u close to 1.
  Tensor q = Tensor::from_f32({0.5f, 0.5f, 0.f}, {1, 3});
  ops::sample_from_probs(q, Tensor::from_f32({0.99999994f}, {1}), ids.rows(0, 1));
  EXPECT_EQ(ids.data<int32_t>()[0], 1);
}

TEST(Sampling, CounterRngIsDeterministicAndUniform) {
  EXPECT_EQ(ops::uniform01(1, 2), ops::uniform01(1, 2));
  EXPECT_NE(ops::uniform01(1, 2), ops::uniform01(2, 2));
  double sum = 0;
  for (uint64_t i = 0; i < 100000; ++i) {
    const float u = ops::uniform01(9, i);
    ASSERT_GE(u, 0.f);
    ASSERT_LT(u, 1.f);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);  // std of the mean is 0.0009
}

TEST(Softmax, MasksGetExactlyZeroAndRowsMatchADoubleReference) {
  // Widths with and without a tail past 16 lanes; -inf entries (top-k / top-p masks) anywhere.
  for (const int64_t C : {5, 16, 37, 1024}) {
    std::vector<float> x(static_cast<size_t>(3 * C));
    for (int64_t i = 0; i < 3 * C; ++i)
      x[i] = std::sin(0.7f * static_cast<float>(i)) * 9.f;
    for (int64_t i = 0; i < C; i += 3)
      x[i] = -INFINITY;  // row 0: a third masked, the tail included
    for (int64_t i = 2 * C; i < 3 * C; ++i)
      x[i] = -INFINITY;  // row 2: all masked
    const Tensor t = Tensor::from_f32(x, {3, C});
    Tensor p = Tensor::empty({3, C}, DType::F32), lp = Tensor::empty({3, C}, DType::F32);
    ops::softmax(t, p);
    ops::log_softmax(t, lp);
    const auto pv = p.to_f32_vector(), lv = lp.to_f32_vector();
    for (int64_t r = 0; r < 2; ++r) {
      double m = -INFINITY, sum = 0;
      for (int64_t i = 0; i < C; ++i)
        m = std::max(m, static_cast<double>(x[r * C + i]));
      for (int64_t i = 0; i < C; ++i)
        sum += std::exp(static_cast<double>(x[r * C + i]) - m);
      for (int64_t i = 0; i < C; ++i) {
        const double ref = std::exp(static_cast<double>(x[r * C + i]) - m) / sum;
        if (std::isinf(x[r * C + i])) {
          EXPECT_EQ(pv[r * C + i], 0.f) << "C=" << C << " masked entry " << i;
          EXPECT_EQ(lv[r * C + i], -INFINITY) << "C=" << C << " masked entry " << i;
        } else {
          EXPECT_NEAR(pv[r * C + i], ref, 1e-6 * ref + 1e-12) << "C=" << C << " r=" << r << " i=" << i;
          EXPECT_NEAR(lv[r * C + i], std::log(ref), 1e-5) << "C=" << C << " r=" << r << " i=" << i;
        }
      }
    }
    for (int64_t i = 2 * C; i < 3 * C; ++i)
      EXPECT_TRUE(pv[i] == 0.f || std::isnan(pv[i])) << "an all-masked row gives no probability to anything";
  }
}

TEST(Embedding, OutOfRangeIdIsAnErrorNamingIt) {
  Tensor table = Tensor::zeros({10, 4}, DType::F32), out = Tensor::empty({2, 4}, DType::F32);
  try {
    ops::embedding(Tensor::from_i32({3, 10}, {2}), table, out);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 10 at position 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::embedding(Tensor::from_i32({-1}, {1}), table, out.rows(0, 1)), Error);
}

TEST(Gemm, MismatchedShapesAndDevicesAreCheckFailures) {
  Tensor a = Tensor::zeros({2, 3}, DType::F32), b = Tensor::zeros({4, 5}, DType::F32),
         c = Tensor::zeros({2, 5}, DType::F32);
  EXPECT_THROW(ops::gemm(a, false, b, false, c), CheckFailure);
  Tensor w = Tensor::zeros({5, 3}, DType::F32);
  EXPECT_THROW(ops::linear(a, w, nullptr, a), CheckFailure);  // output shape
  Tensor wi = Tensor::zeros({5, 3}, DType::I32);
  EXPECT_THROW(ops::linear(a, wi, nullptr, c), CheckFailure);  // weight dtype
}

TEST(Loss, TargetBeyondVocabIsACheckFailure) {
  Tensor z = Tensor::zeros({1, 4}, DType::F32), l = Tensor::empty({1}, DType::F32);
  EXPECT_THROW(ops::cross_entropy(z, Tensor::from_i32({4}, {1}), l), CheckFailure);
  ops::cross_entropy(z, Tensor::from_i32({2}, {1}), l);
  EXPECT_NEAR(l.data<float>()[0], std::log(4.f), 1e-6);
}

}  // namespace
}  // namespace updraft
