// The property greedy speculation rests on, for paged attention: a new row's output is bitwise
// the same whether it is computed alone (a decode step, or one tree node) or with the other rows
// of its sequence (verification, chunked prefill), for causal rows and tree rows, head sizes with
// and without a compiled specialisation, and contexts that cross the kernels' 16-key chunks and
// 64-key passes; and however many threads share one sequence's work.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/ops.h"
#include "tests/kernels/rand_vec.h"

namespace updraft {
namespace {

using testing_kernels::rand_vec;

struct PagedSeq {
  int64_t S, NH, NKV, HD, BS = 16;
  Tensor k_cache, v_cache, block_table;
  PagedSeq(int64_t s, int64_t nh, int64_t nkv, int64_t hd, uint64_t seed) : S(s), NH(nh), NKV(nkv), HD(hd) {
    const int64_t blocks = (S + BS - 1) / BS + 1;
    k_cache = Tensor::from_f32(rand_vec(blocks * BS * NKV * HD, seed), {blocks * BS, NKV, HD});
    v_cache = Tensor::from_f32(rand_vec(blocks * BS * NKV * HD, seed + 1), {blocks * BS, NKV, HD});
    std::vector<int32_t> table;
    for (int64_t b = 0; b < blocks; ++b)
      table.push_back(static_cast<int32_t>(blocks - 1 - b));  // out of order, as after reuse
    block_table = Tensor::from_i32(table, {1, blocks});
  }
  // Attention of q rows [T, NH, HD] over the first kv keys (the last T of them new).
  std::vector<float> run(const Tensor& q, int64_t kv, const Tensor& mask = Tensor(), int64_t window = 0) const {
    const int64_t T = q.size(0);
    Tensor out = Tensor::empty({T, NH, HD}, DType::F32);
    const Tensor mask_len = mask.defined() ? Tensor::from_i32({static_cast<int32_t>(window)}, {1}) : Tensor();
    ops::paged_attention(q, {k_cache, v_cache, BS}, block_table, Tensor::from_i32({static_cast<int32_t>(kv)}, {1}),
                         Tensor::from_i32({0, static_cast<int32_t>(T)}, {2}), mask, 0.3f, out, mask_len);
    return out.to_f32_vector();
  }
};

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, sizeof(float) * static_cast<size_t>(n)) == 0;
}

// Every row of a sequence against the same row computed alone, causal and tree, for NH query
// heads over NKV kv heads.
void expect_rows_alone_equal(int64_t NH, int64_t NKV, const char* what) {
  for (int64_t HD : {56, 64, 12}) {  // 12: no specialisation, the generic loop
    for (int64_t prefix : {0, 5, 37, 70, 600}) {
      for (int64_t n : {1, 5, 11, 40}) {  // 40 rows: two work items of the sequence, more with more threads
        const int64_t S = prefix + n, W = NH * HD;
        PagedSeq seq(S, NH, NKV, HD, 100 + HD + prefix + n);
        const Tensor q = Tensor::from_f32(rand_vec(n * W, 7 + n), {n, NH, HD});
        // Causal: row i alone sees the prefix and new keys 0..i.
        const auto all = seq.run(q, S);
        for (int64_t i = 0; i < n; ++i) {
          const auto one = seq.run(q.row(i), prefix + i + 1);
          ASSERT_TRUE(same_bits(all.data() + i * W, one.data(), W))
              << what << " causal HD=" << HD << " prefix=" << prefix << " n=" << n << " row " << i;
        }
        // Tree: random ancestors (each row sees itself), every row against the same window.
        std::mt19937 rng(static_cast<uint32_t>(HD * 1000 + prefix * 10 + n));
        std::vector<int32_t> parent(static_cast<size_t>(n), -1);
        Tensor mask = Tensor::zeros({n, n}, DType::Bool);
        for (int64_t i = 0; i < n; ++i) {
          parent[i] = i == 0 ? -1 : static_cast<int32_t>(rng() % i);
          for (int64_t a = i; a >= 0; a = parent[a])
            mask.data<uint8_t>()[i * n + a] = 1;
        }
        const auto tree = seq.run(q, S, mask, n);
        for (int64_t i = 0; i < n; ++i) {
          Tensor row_mask = Tensor::zeros({1, n}, DType::Bool);
          std::memcpy(row_mask.data<uint8_t>(), mask.data<uint8_t>() + i * n, static_cast<size_t>(n));
          const auto one = seq.run(q.row(i), S, row_mask, n);
          ASSERT_TRUE(same_bits(tree.data() + i * W, one.data(), W))
              << what << " tree HD=" << HD << " prefix=" << prefix << " n=" << n << " row " << i;
        }
      }
    }
  }
}

TEST(PagedAttentionRows, EachRowAloneEqualsItsRowAmongTheOthers) {
  expect_rows_alone_equal(4, 2, "two heads per kv head");
  expect_rows_alone_equal(6, 2, "three heads per kv head (the last paired with itself)");
}

// With more threads than the batch's kv heads, a sequence's rows are split into more work items.
TEST(PagedAttentionRows, RowsSplitAcrossMoreThreadsKeepTheirBits) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(8);
  expect_rows_alone_equal(4, 2, "8 threads");
  omp_set_num_threads(before);
}

// Softmax attention of row t of q over keys [0, kv) of the cache, in double: the reference.
std::vector<double> reference_row(const PagedSeq& s, const std::vector<float>& q, int64_t t, int64_t kv, float scale) {
  const int64_t G = s.NH / s.NKV;
  const float* kc = s.k_cache.data<float>();
  const float* vc = s.v_cache.data<float>();
  const int32_t* table = s.block_table.data<int32_t>();
  std::vector<double> out(static_cast<size_t>(s.NH * s.HD), 0.0);
  for (int64_t h = 0; h < s.NH; ++h) {
    std::vector<double> w(static_cast<size_t>(kv));
    double m = -INFINITY, sum = 0;
    auto slot = [&](int64_t j) { return (table[j / s.BS] * s.BS + j % s.BS) * s.NKV + h / G; };
    for (int64_t j = 0; j < kv; ++j) {
      double d = 0;
      for (int64_t x = 0; x < s.HD; ++x)
        d += static_cast<double>(q[(t * s.NH + h) * s.HD + x]) * kc[slot(j) * s.HD + x];
      w[j] = d * scale;
      m = std::max(m, w[j]);
    }
    for (double& x : w)
      sum += (x = std::exp(x - m));
    for (int64_t j = 0; j < kv; ++j)
      for (int64_t x = 0; x < s.HD; ++x)
        out[h * s.HD + x] += w[j] / sum * vc[slot(j) * s.HD + x];
  }
  return out;
}

// A sequence's rows and kv heads go to however many threads there are (one, or split by heads and
// row chunks): a row's bits must not change with the thread count, and at every context, long
// ones included, they stay within float rounding of the softmax computed in double.
TEST(PagedAttentionRows, ThreadCountDoesNotChangeABit) {
  const int before = omp_get_max_threads();
  for (const int64_t S : {100, 700, 2000})
    for (const int64_t T : {1, 5}) {
      const int64_t NH = 8, NKV = 4, HD = 56, W = NH * HD;
      PagedSeq seq(S, NH, NKV, HD, 500 + S + T);
      const auto qv = rand_vec(T * W, 9 + S);
      const Tensor q = Tensor::from_f32(qv, {T, NH, HD});
      omp_set_num_threads(1);
      const auto one = seq.run(q, S);
      for (int threads : {2, 3, 4, 8}) {
        omp_set_num_threads(threads);
        const auto many = seq.run(q, S);
        ASSERT_TRUE(same_bits(one.data(), many.data(), T * W)) << "S=" << S << " T=" << T << " threads=" << threads;
      }
      for (int64_t t = 0; t < T; ++t) {
        const auto ref = reference_row(seq, qv, t, S - T + t + 1, 0.3f);
        for (int64_t i = 0; i < W; ++i)
          ASSERT_NEAR(one[t * W + i], ref[i], 2e-6) << "S=" << S << " T=" << T << " row " << t << " i=" << i;
      }
    }
  omp_set_num_threads(before);
}

}  // namespace
}  // namespace updraft
