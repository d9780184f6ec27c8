// The property greedy speculation rests on, for paged attention: a new row's output is bitwise
// the same whether it is computed alone (a decode step, or one tree node) or with the other rows
// of its sequence (verification, chunked prefill), for causal rows and tree rows, head sizes with
// and without a compiled specialisation, and contexts that cross the kernels' 16-key chunks.
#include <gtest/gtest.h>
#include <omp.h>

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
    for (int64_t prefix : {0, 5, 37, 70}) {
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

}  // namespace
}  // namespace updraft
