#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ops/backend.h"
#include "kernels/ops/team_for.h"
#include "kernels/ops/vec_math.h"

namespace updraft::ops::cpu {
namespace {

[[gnu::always_inline]] inline void silu_mul16(const float* g, const float* u, float* o) {
  const v16f gv = load16(g), uv = load16(u);
  const v16f ov = gv / (1.0f + exp16(-gv)) * uv;
  std::memcpy(o, &ov, sizeof ov);
}

[[gnu::always_inline]] inline void add16(const float* a, const float* b, float* o) {
  const v16f ov = load16(a) + load16(b);
  std::memcpy(o, &ov, sizeof ov);
}

}  // namespace

// Built for AVX-512 and baseline x86-64, chosen at load time (as paged_attention).
__attribute__((target_clones("avx512f", "default"))) void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  const int64_t n = gate.numel();
  const float* g = gate.data<float>();
  const float* u = up.data<float>();
  float* o = out.data<float>();
  // 16 at a time (a vector exp); worth two threads from tens of thousands of elements. Whole
  // chunks load and store whole vectors: a copy of a variable length is a call to memcpy, and
  // three of them per chunk (with the vector bounced through memory) made this 14 us a layer of
  // the built-in policy at 9 rows, a tenth of the verification's forward.
  const int64_t chunks = n / 16;
  UPD_TEAM_FOR(n > (1 << 15), c, chunks, silu_mul16(g + c * 16, u + c * 16, o + c * 16));
  if (const int64_t i = chunks * 16, len = n - i; len > 0) {  // the last, partial chunk: the same lanes' math
    const v16f gv = load16_partial(g + i, len, 0.f), uv = load16_partial(u + i, len, 0.f);
    const v16f ov = gv / (1.0f + exp16(-gv)) * uv;
    std::memcpy(o + i, &ov, sizeof(float) * static_cast<size_t>(len));
  }
}

__attribute__((target_clones("avx512f", "default"))) void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = a.numel();
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  float* o = out.data<float>();
  // 16 at a time (the residual adds of a forward: a scalar loop was 3-6 us for 16 rows of 448).
  const int64_t chunks = n / 16;
  UPD_TEAM_FOR(n > (1 << 16), c, chunks, add16(ap + c * 16, bp + c * 16, o + c * 16));
  for (int64_t i = chunks * 16; i < n; ++i)
    o[i] = ap[i] + bp[i];
}

void convert(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  const DType st = src.dtype(), dt = dst.dtype();
  const void* s = src.raw();
  void* d = dst.raw();
  auto load = [&](int64_t i) -> float {
    if (st == DType::F32)
      return static_cast<const float*>(s)[i];
    const uint16_t h = static_cast<const uint16_t*>(s)[i];
    return st == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
  };
  const auto store = [&](int64_t i, float v) {
    if (dt == DType::F32)
      static_cast<float*>(d)[i] = v;
    else
      static_cast<uint16_t*>(d)[i] = dt == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
  };
  UPD_TEAM_FOR(n > (1 << 16), i, n, store(i, load(i)));
}

}  // namespace updraft::ops::cpu
