#include "trainer/ttt_linear.h"

#include <algorithm>
#include <cstring>

#include "kernels/core/dtype.h"
#include "kernels/core/error.h"
#include "kernels/ops.h"
#include "kernels/ops/backward.h"

namespace updraft::train {
namespace {

// f32_to_bf16 (kernels/core/dtype.h) without branches, so that loops over it vectorise.
inline uint16_t round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const auto rounded = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  const auto quiet_nan = static_cast<uint16_t>((u >> 16) | 0x40u);
  return (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
}

struct ToBf16 {
  uint16_t operator()(float v) const { return round_bf16(v); }
};
struct Same {
  float operator()(float v) const { return v; }
};

// dst[c * ld + r] = conv(src[r * C + c]) for r < R, c < C (dst's columns from R to ld left as
// they are): 32 x 32 blocks, each converted along its rows into a tile and written out along
// its columns, in parallel over column blocks.
template <typename Out, typename Conv>
void transpose(const float* src, int64_t R, int64_t C, Out* dst, int64_t ld, Conv conv) {
  constexpr int64_t B = 32;
#pragma omp parallel for schedule(static) if (R * C > (1 << 15))
  for (int64_t c0 = 0; c0 < C; c0 += B) {
    Out tile[B][B];
    const int64_t cn = std::min(B, C - c0);
    for (int64_t r0 = 0; r0 < R; r0 += B) {
      const int64_t rn = std::min(B, R - r0);
      for (int64_t r = 0; r < rn; ++r) {
        const float* row = src + (r0 + r) * C + c0;
#pragma omp simd
        for (int64_t c = 0; c < cn; ++c)
          tile[c][r] = conv(row[c]);
      }
      for (int64_t c = 0; c < cn; ++c)
        std::copy(tile[c], tile[c] + rn, dst + (c0 + c) * ld + r0);
    }
  }
}

}  // namespace

TttMatmul parse_ttt_matmul(std::string_view name) {
  if (name == "f32")
    return TttMatmul::F32;
  if (name == "bf16")
    return TttMatmul::BF16;
  if (name == "auto")
    return auto_ttt_matmul();
  throw Error("training matmul precision '" + std::string(name) + "': expected f32, bf16 or auto");
}

const char* ttt_matmul_name(TttMatmul m) {
  return m == TttMatmul::BF16 ? "bf16" : "f32";
}

TttMatmul auto_ttt_matmul() {
  return ops::cpu_bf16_kernel() == ops::CpuBf16Kernel::kAmx ? TttMatmul::BF16 : TttMatmul::F32;
}

void TttLinears::set_precision(TttMatmul m) {
  precision_ = m;
  copies_.clear();
}

void TttLinears::refresh(const std::vector<const Param*>& weights, bool transposed) {
  pending_.clear();  // a backward that threw left its products unadded: they belong to no step now
  if (precision_ != TttMatmul::BF16)
    return;
  for (const Param* p : weights) {
    UPD_CHECK(p->value.dim() == 2 && p->value.is_cpu()) << "TttLinears: " << p->name << " is not a CPU matrix";
    const int64_t N = p->value.size(0), K = p->value.size(1);
    Copies& c = copies_[p];
    if (!c.w.defined())
      c.w = Tensor::empty({N, K}, DType::BF16);
    const float* src = p->value.data<float>();
    auto* w = static_cast<uint16_t*>(c.w.raw());
#pragma omp parallel for simd schedule(static) if (N * K > (1 << 15))
    for (int64_t i = 0; i < N * K; ++i)
      w[i] = round_bf16(src[i]);
    c.wt_current = transposed;  // the stale transpose keeps its memory for the next refresh
    if (!transposed)
      continue;
    if (!c.wt.defined())
      c.wt = Tensor::empty({K, N}, DType::BF16);
    transpose(src, N, K, static_cast<uint16_t*>(c.wt.raw()), N, ToBf16{});
  }
}

const TttLinears::Copies& TttLinears::copies(const Param& w, bool transposed) const {
  const auto it = copies_.find(&w);
  UPD_CHECK(it != copies_.end() && (!transposed || it->second.wt_current))
      << "TttLinears: no bf16 copy of " << w.name << (transposed ? " (transposed)" : "") << "; refresh() first";
  return it->second;
}

void TttLinears::forward(const Tensor& x, const Param& w, Tensor y) const {
  ops::linear(x, precision_ == TttMatmul::BF16 ? copies(w, false).w : w.value, nullptr, y);
}

void TttLinears::backward(const Tensor& x, const Param& w, const Tensor& dy, Tensor* dx, bool accumulate_dx) {
  if (precision_ == TttMatmul::F32) {
    Tensor grad = w.grad;  // a handle: the gradient's storage is shared
    ops::linear_backward(x, w.value, dy, dx, accumulate_dx, &grad, nullptr);
    return;
  }
  const int64_t T = x.size(0), K = x.size(1), N = w.value.size(0);
  UPD_CHECK(x.dim() == 2 && dy.dim() == 2 && dy.size(0) == T && dy.size(1) == N && K == w.value.size(1))
      << "TttLinears::backward: x " << x.str() << ", dy " << dy.str() << " against " << w.name << " " << w.value.str();
  if (dx != nullptr) {
    const Copies& c = copies(w, true);
    UPD_CHECK(dx->dim() == 2 && dx->size(0) == T && dx->size(1) == K) << "TttLinears::backward: dx " << dx->str();
    if (accumulate_dx) {
      Tensor part = Tensor::empty({T, K}, DType::F32);
      ops::linear(dy, c.wt, nullptr, part);
      ops::add(*dx, part, *dx);
    } else {
      ops::linear(dy, c.wt, nullptr, *dx);
    }
  }
  pending_.push_back({&w, x, dy});
}

void TttLinears::flush_grads() {
  std::vector<bool> done(pending_.size(), false);
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (done[i])
      continue;
    const Param& w = *pending_[i].w;
    const int64_t N = w.value.size(0), K = w.value.size(1);
    int64_t rows = 0;
    for (size_t j = i; j < pending_.size(); ++j)
      if (pending_[j].w == &w)
        rows += pending_[j].x.size(0);
    // w.grad[N, K] += dy^T·x over every call's rows: rows of dy^T against rows of x^T (bf16),
    // summed over the calls' rows padded to 32.
    const int64_t Tp = std::max<int64_t>(32, (rows + 31) / 32 * 32);
    Tensor dyt = Tensor::zeros({N, Tp}, DType::F32), xt = Tensor::zeros({K, Tp}, DType::BF16);
    int64_t at = 0;
    for (size_t j = i; j < pending_.size(); ++j) {
      if (pending_[j].w != &w)
        continue;
      const Pending& p = pending_[j];
      const int64_t T = p.x.size(0);
      transpose(p.dy.data<float>(), T, N, dyt.data<float>() + at, Tp, Same{});
      transpose(p.x.data<float>(), T, K, static_cast<uint16_t*>(xt.raw()) + at, Tp, ToBf16{});
      at += T;
      done[j] = true;
    }
    Tensor part = Tensor::empty({N, K}, DType::F32);
    ops::linear(dyt, xt, nullptr, part);
    Tensor grad = w.grad;
    ops::add(grad, part, grad);
  }
  pending_.clear();
}

}  // namespace updraft::train
