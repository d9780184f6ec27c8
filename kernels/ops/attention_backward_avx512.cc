// Compiled with -mavx512*; only called when cpu_has_avx512().
#include "kernels/ops/attention_backward_avx512.h"

#include <immintrin.h>

#include <cmath>

namespace updraft::ops::cpu {

void attention_backward_keys_avx512(const float* q, const float* dout, float* dq, const int64_t* keys, int64_t nkeys,
                                    const float* k, const float* v, int64_t NKV, int64_t g, int64_t HD, float scale,
                                    float l, float di, float* dk, float* dv) {
  for (int64_t n = 0; n < nkeys; ++n) {
    const int64_t off = (keys[n] * NKV + g) * HD;
    const float* kv = k + off;
    const float* vv = v + off;
    __m512 s = _mm512_setzero_ps(), dp = _mm512_setzero_ps();
    for (int64_t d = 0; d < HD; d += 16) {
      const __mmask16 m = HD - d >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (HD - d)) - 1);
      s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + d), _mm512_maskz_loadu_ps(m, kv + d), s);
      dp = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, dout + d), _mm512_maskz_loadu_ps(m, vv + d), dp);
    }
    const float p = std::exp(_mm512_reduce_add_ps(s) * scale - l);
    const __m512 ds = _mm512_set1_ps(p * (_mm512_reduce_add_ps(dp) - di) * scale);  // d(loss)/d(q·k)
    const __m512 pv = _mm512_set1_ps(p);
    for (int64_t d = 0; d < HD; d += 16) {
      const __mmask16 m = HD - d >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (HD - d)) - 1);
      _mm512_mask_storeu_ps(dq + d, m,
                            _mm512_fmadd_ps(ds, _mm512_maskz_loadu_ps(m, kv + d), _mm512_maskz_loadu_ps(m, dq + d)));
      _mm512_mask_storeu_ps(
          dk + off + d, m,
          _mm512_fmadd_ps(ds, _mm512_maskz_loadu_ps(m, q + d), _mm512_maskz_loadu_ps(m, dk + off + d)));
      _mm512_mask_storeu_ps(
          dv + off + d, m,
          _mm512_fmadd_ps(pv, _mm512_maskz_loadu_ps(m, dout + d), _mm512_maskz_loadu_ps(m, dv + off + d)));
    }
  }
}

}  // namespace updraft::ops::cpu
