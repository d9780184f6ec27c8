// The row-wise CPU kernels that split their rows across an OpenMP team only past a size
// (kernels/ops/team_for.h: a team for large inputs, the calling thread's own loop below): a
// row's result is the same bits either way, so a prefill-sized call and a decode-sized one agree,
// and so do a large verification batch and a small decode batch.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/rand_vec.h"

namespace updraft {
namespace {

using testing_kernels::rand_vec;

Tensor clone(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  c.copy_from(t);
  return c;
}

// The bits of `whole` (one call over R rows, past the team threshold) against R calls of one row
// each (under it), per row: run(in_rows, out_rows) fills out_rows from in_rows.
void expect_rows_alike(const std::vector<Tensor>& in, const Tensor& out, int64_t R,
                       const std::function<void(const std::vector<Tensor>&, Tensor&)>& run) {
  Tensor whole = clone(out);
  run(in, whole);
  for (int64_t r = 0; r < R; ++r) {
    std::vector<Tensor> row;
    for (const Tensor& t : in)
      row.push_back(t.size(0) == R ? clone(t.rows(r, r + 1)) : t);
    Tensor one = clone(out.rows(r, r + 1));
    run(row, one);
    const Tensor w = whole.rows(r, r + 1);
    ASSERT_EQ(std::memcmp(w.raw(), one.raw(), w.nbytes()), 0) << "row " << r;
  }
}

Tensor random(const Shape& s, uint64_t seed, float lo = -2.f, float hi = 2.f) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return Tensor::from_f32(rand_vec(n, seed, lo, hi), s);
}

TEST(TeamSplit, NormsAddsAndSiluGiveEachRowTheSameBitsInATeamAndAlone) {
  const int64_t R = 160, H = 448, I = 1216;  // R x H past rms_norm's and add's 1 << 16, R x I past silu's 1 << 15
  const Tensor w = random({H}, 1).to_dtype(DType::BF16);
  expect_rows_alike({random({R, H}, 2)}, Tensor::empty({R, H}, DType::F32), R,
                    [&](const std::vector<Tensor>& in, Tensor& out) { ops::rms_norm(in[0], w, 1e-5f, out); });
  expect_rows_alike({random({R, H}, 3), random({R, H}, 4)}, Tensor::empty({R, H}, DType::F32), R,
                    [](const std::vector<Tensor>& in, Tensor& out) { ops::add(in[0], in[1], out); });
  expect_rows_alike({random({R, I}, 5), random({R, I}, 6)}, Tensor::empty({R, I}, DType::F32), R,
                    [](const std::vector<Tensor>& in, Tensor& out) { ops::silu_mul(in[0], in[1], out); });
}

TEST(TeamSplit, SoftmaxesGiveEachRowTheSameBitsInATeamAndAlone) {
  const int64_t R = 40, C = 1964;  // past softmax's 1 << 15
  const Tensor x = random({R, C}, 7, -8.f, 8.f);
  expect_rows_alike({x}, Tensor::empty({R, C}, DType::F32), R,
                    [](const std::vector<Tensor>& in, Tensor& out) { ops::softmax(in[0], out); });
  expect_rows_alike({x}, Tensor::empty({R, C}, DType::F32), R,
                    [](const std::vector<Tensor>& in, Tensor& out) { ops::log_softmax(in[0], out); });
  for (const int64_t k : {4, 64}) {  // the scan, and the ranked band (softmax_cpu.cc)
    expect_rows_alike({x}, Tensor::empty({R, k}, DType::F32), R, [&](const std::vector<Tensor>& in, Tensor& out) {
      Tensor idx = Tensor::empty({in[0].size(0), k}, DType::I32);
      ops::top_log_softmax(in[0], k, out, idx);
    });
    Tensor v = Tensor::empty({R, k}, DType::F32), idx = Tensor::empty({R, k}, DType::I32);
    ops::top_log_softmax(x, k, v, idx);
    for (int64_t r = 0; r < R; ++r) {
      Tensor vr = Tensor::empty({1, k}, DType::F32), ir = Tensor::empty({1, k}, DType::I32);
      ops::top_log_softmax(clone(x.rows(r, r + 1)), k, vr, ir);
      ASSERT_EQ(ir.to_i32_vector(), clone(idx.rows(r, r + 1)).to_i32_vector()) << "k " << k << ", row " << r;
    }
  }
}

TEST(TeamSplit, RopeGivesEachRowTheSameBitsInATeamAndAlone) {
  const int64_t T = 160, NH = 8, HD = 56;  // past the rotation's 1 << 15 and the angle table's 1 << 12
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    pos[static_cast<size_t>(t)] = static_cast<int32_t>(3 * t + 1);
  const Tensor positions = Tensor::from_i32(pos, {T});
  const Tensor inv = ops::rope_inv_freq(ops::RopeParams{}, HD);
  const Tensor x = random({T, NH, HD}, 8);
  expect_rows_alike({x, positions}, Tensor::empty({T, NH, HD}, DType::F32), T,
                    [&](const std::vector<Tensor>& in, Tensor& out) {
                      out.copy_from(in[0]);
                      ops::rope(out, in[1], inv);
                    });
}

}  // namespace
}  // namespace updraft
