// AMX-INT8 linear kernel for int8 weights (gemv_cpu.h, "int8 weights"), with the operands as
// gemv_amx_panels.cc has them: the quantized activations are the A tiles (up to 16 token rows x
// 64 k, straight from the int8 rows), the weights the B tiles (16 k-quads x 16 weight rows, the
// VNNI layout of pack_panels_amx), and each TDPBSSD adds a T x 16 block of exact int32 sums of
// y, whose rows are scaled into y with contiguous vector loads. Half the bytes of a bf16 panel
// per k, and half the tile instructions; with T <= 16 the tiles are T rows high (a decode row's
// TDPBSSD costs about half a full tile's). The sums are exact, so the order of the steps does
// not matter to the result: every row of y equals the reference loop's bits whatever T is.
// Compiled with -mamx-tile -mamx-int8 and AVX-512; only called when cpu_has_amx_int8().
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ops/amx_tiles.h"
#include "kernels/ops/gemv_cpu.h"

namespace updraft::ops::cpu {
namespace {

constexpr int kTile = 16;

// The int8 products for amx_panel::run: TDPBSSD, and each C tile's int32 sums scaled into y:
// y[t, n + i] = (float(sum[t][i]) * xscale[t]) * scale[n + i], a contiguous row at a time.
struct Int8Panels {
  const Int8Weight& w;
  const float* xscale;
  float* y;
  int64_t ldy;

  template <int C, int A, int B>
  static void dp() {
    UPD_AMX_WITH_CAB(_tile_dpbssd);
  }
  template <int C>
  void store(int64_t t0, int64_t n, int64_t rows) const {
    alignas(64) int32_t acc[kTile * kTile];
#define UPD_STORE_ACC(c) _tile_stored(c, acc, 4 * kTile)
    UPD_AMX_WITH_C(UPD_STORE_ACC);
#undef UPD_STORE_ACC
    const __mmask16 live = static_cast<__mmask16>((1u << std::min<int64_t>(kTile, w.N - n)) - 1u);
    const __m512 sw = _mm512_maskz_loadu_ps(live, w.scale.data() + n);
    for (int64_t t = 0; t < rows; ++t) {
      const __m512 sums = _mm512_cvtepi32_ps(_mm512_load_si512(acc + t * kTile));
      const __m512 xs = _mm512_set1_ps(xscale[t0 + t]);
      _mm512_mask_storeu_ps(y + (t0 + t) * ldy + n, live, _mm512_mul_ps(_mm512_mul_ps(sums, xs), sw));
    }
  }
};

}  // namespace

void quantize_rows_int8_avx512(const float* x, int64_t T, int64_t K, int8_t* q, float* scale) {
  const __m512 lo = _mm512_set1_ps(-127.f), hi = _mm512_set1_ps(127.f);
  for (int64_t t = 0; t < T; ++t) {
    const float* r = x + t * K;
    __m512 amax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int64_t k = 0; k < K; k += 16) {
      const __m512 v = _mm512_loadu_ps(r + k);
      amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
      bad |= _mm512_fpclass_ps_mask(v, 0x99);  // NaN or infinity
    }
    const float m = _mm512_reduce_max_ps(amax);
    if (bad != 0 || m == 0 || !std::isfinite(127.f / m)) {  // the reference's rule for these rows
      scale[t] = quantize_row_int8(r, K, q + t * K);
      continue;
    }
    scale[t] = m / 127.f;
    const __m512 inv = _mm512_set1_ps(127.f / m);
    for (int64_t k = 0; k < K; k += 16) {
      const __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(r + k), inv),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i i = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + t * K + k), _mm512_cvtsepi32_epi8(i));
    }
  }
}

void gemv_panels_amx_i8(const int8_t* xa, int64_t T, const float* xscale, const Int8Weight& w, int64_t b_begin,
                        int64_t b_end, float* y, int64_t ldy) {
  if (T <= 0)
    return;
  amx_configure_rows(std::min<int64_t>(T, kTile));
  amx_panel::run(Int8Panels{w, xscale, y, ldy}, reinterpret_cast<const uint8_t*>(xa), w.K, T,
                 reinterpret_cast<const uint8_t*>(w.panels.data()), w.K, w.N, b_begin, b_end);
}

}  // namespace updraft::ops::cpu
