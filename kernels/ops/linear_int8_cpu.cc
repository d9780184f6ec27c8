// int8 weights on the CPU (gemv_cpu.h, "int8 weights"): quantization of weights and activation
// rows, the reference loop every int8 kernel must match bit for bit, and linear_int8, which runs
// the products of one input through AMX-INT8, VNNI or that loop.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/core/error.h"
#include "kernels/ops/gemv_cpu.h"

namespace updraft::ops::cpu {
namespace {

// x's rows quantized to int8 (quantize_row_int8's bytes) into xq, their scales into xscale; with
// `amx`, zero rows pad xq to the AMX tiles' row count (K is a multiple of 64 there).
// quantize_rows_int8_avx512 where it applies (K a multiple of 16), else the scalar rule.
void quantize_x_int8(const float* xp, int64_t T, int64_t K, bool amx, std::vector<int8_t>& xq,
                     std::vector<float>& xscale) {
  xq.resize(static_cast<size_t>(amx ? amx_rows_a_elems(T, K) : T * K));
  xscale.resize(static_cast<size_t>(T));
  if (amx || (K % 16 == 0 && cpu_has_avx512())) {  // the same bytes, in vectors
    quantize_rows_int8_avx512(xp, T, K, xq.data(), xscale.data());
    std::fill(xq.begin() + T * K, xq.end(), int8_t{0});
  } else {
    for (int64_t t = 0; t < T; ++t)
      xscale[t] = quantize_row_int8(xp + t * K, K, xq.data() + t * K);
  }
}

}  // namespace

float quantize_row_int8(const float* x, int64_t K, int8_t* q) {
  float amax = 0;
  bool finite = true;
  for (int64_t k = 0; k < K; ++k) {
    finite = finite && std::isfinite(x[k]);
    amax = std::max(amax, std::fabs(x[k]));
  }
  // A row so small that 127 / max overflows (below about 4e-37) quantizes to zeros, as zeros do.
  if (!finite || amax == 0 || !std::isfinite(127.f / amax)) {
    std::fill(q, q + K, int8_t{0});
    return finite ? 0.f : std::numeric_limits<float>::quiet_NaN();
  }
  const float inv = 127.f / amax;
  for (int64_t k = 0; k < K; ++k)
    q[k] = static_cast<int8_t>(std::clamp(std::nearbyint(x[k] * inv), -127.f, 127.f));
  return amax / 127.f;
}

Int8Weight quantize_weight_int8(const Tensor& w) {
  UPD_CHECK(w.is_cpu() && w.dim() == 2) << "quantize_weight_int8: expected a CPU [N, K] weight, got " << w.str();
  Int8Weight out;
  out.N = w.size(0);
  out.K = w.size(1);
  const std::vector<float> v = w.to_f32_vector();
  out.q.resize(static_cast<size_t>(out.N * out.K));
  out.scale.resize(static_cast<size_t>(out.N));
  if (out.K % 16 == 0 && cpu_has_avx512())  // the same bytes, without a libm call per element
    quantize_rows_int8_avx512(v.data(), out.N, out.K, out.q.data(), out.scale.data());
  else
    for (int64_t n = 0; n < out.N; ++n)
      out.scale[n] = quantize_row_int8(v.data() + n * out.K, out.K, out.q.data() + n * out.K);
  out.row_sums.assign(static_cast<size_t>(out.N), 0);
  for (int64_t n = 0; n < out.N; ++n)
    for (int64_t k = 0; k < out.K; ++k)
      out.row_sums[n] += out.q[n * out.K + k];
  if (out.K % 64 == 0 && cpu_has_amx_int8()) {
    out.panels.resize(static_cast<size_t>((out.N + 15) / 16 * 16 * out.K));
    // The bf16 panels' VNNI layout: a 4-byte k-quad where those have a bf16 pair.
    pack_panels_amx(reinterpret_cast<const uint16_t*>(out.q.data()), out.N, out.K / 2,
                    reinterpret_cast<uint16_t*>(out.panels.data()));
  } else if (out.K <= kVnniMaxK && cpu_has_avx512_vnni()) {
    out.vnni_panels.resize(static_cast<size_t>(vnni_panel_elems(out.N, out.K)));
    pack_panels_vnni(out.q.data(), out.N, out.K, out.vnni_panels.data());
  }
  return out;
}

void linear_int8_reference(const int8_t* xq, const float* xscale, int64_t T, const Int8Weight& w, int64_t n_begin,
                           int64_t n_end, float* y, int64_t ldy) {
  const int64_t K = w.K;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = n_begin; n < n_end; ++n) {
      const int8_t* a = xq + t * K;
      const int8_t* b = w.q.data() + n * K;
      int32_t acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<int32_t>(a[k]) * static_cast<int32_t>(b[k]);
      y[t * ldy + n] = (static_cast<float>(acc) * xscale[t]) * w.scale[n];
    }
}

void linear_int8(const Tensor& x, const std::vector<Int8Product>& products) {
  const int64_t T = x.size(0), K = x.size(1);
  if (T == 0)
    return;
  const float* xp = x.data<float>();
  bool amx = true, vnni = true;
  int64_t work = 0;
  for (const Int8Product& p : products) {
    amx = amx && !p.w->panels.empty();
    vnni = vnni && !p.w->vnni_panels.empty();
    work += p.w->N * K * T;
  }
  vnni = vnni && !amx;
#pragma omp parallel if (work > (1 << 15))
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    // Each thread with blocks to compute quantizes x itself (as linear_amx packs: no waiting on
    // the other core's stores); quantization is deterministic, so both get the same bytes.
    thread_local std::vector<int8_t> xq;   // with AMX, zero rows pad it to the tiles' row count
    thread_local std::vector<uint8_t> xu;  // with VNNI, xq offset by 128
    thread_local std::vector<float> xscale;
    bool ready = false;
    for (const Int8Product& p : products) {
      const int64_t blocks = (p.w->N + 15) / 16, b0 = blocks * id / nt, b1 = blocks * (id + 1) / nt;
      if (b0 >= b1)
        continue;
      if (!ready) {
        quantize_x_int8(xp, T, K, amx, xq, xscale);
        if (vnni) {
          xu.resize(static_cast<size_t>(T * K));
          offset_rows_u8(xq.data(), T * K, xu.data());
        }
        ready = true;
      }
      float* y = p.y->data<float>();
      const int64_t n0 = b0 * 16, n1 = std::min(p.w->N, b1 * 16);
      if (amx)
        gemv_panels_amx_i8(xq.data(), T, xscale.data(), *p.w, b0, b1, y, p.w->N);
      else if (vnni)
        linear_int8_vnni(xu.data(), xscale.data(), T, *p.w, n0, n1, y, p.w->N);
      else
        linear_int8_reference(xq.data(), xscale.data(), T, *p.w, n0, n1, y, p.w->N);
    }
  }
  for (const Int8Product& p : products)
    add_bias_rows(p.bias, T, p.w->N, p.y->data<float>());
}

}  // namespace updraft::ops::cpu
