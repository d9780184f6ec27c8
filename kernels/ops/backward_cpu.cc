// CPU backward passes (f32). Row-parallel where rows are independent; attention accumulates key
// and value gradients in per-thread buffers and sums them once at the end.
#include "kernels/ops/backward_cpu.h"

#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops/attention_backward_avx512.h"
#include "kernels/ops/backend.h"
#include "kernels/ops/gemv_cpu.h"

namespace updraft::ops::cpu {

void add_column_sums(const Tensor& m, Tensor& sums) {
  const int64_t T = m.size(0), N = m.size(1);
  const float* p = m.data<float>();
  float* s = sums.data<float>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n)
      s[n] += p[t * N + n];
}

void rms_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor& dx, Tensor* dw) {
  const int64_t R = x.size(0), H = x.size(1);
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  const float* gp = dy.data<float>();
  float* dxp = dx.data<float>();
  std::vector<float> rinv(static_cast<size_t>(R));
#pragma omp parallel for schedule(static) if (R * H > (1 << 14))
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = xp + r * H;
    const float* gr = gp + r * H;
    float ss = 0.f, dot = 0.f;
    for (int64_t i = 0; i < H; ++i) {
      ss += xr[i] * xr[i];
      dot += wp[i] * gr[i] * xr[i];
    }
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(H) + eps);
    rinv[static_cast<size_t>(r)] = inv;
    const float c = inv * inv * inv * dot / static_cast<float>(H);
    float* dr = dxp + r * H;
    for (int64_t i = 0; i < H; ++i)
      dr[i] = inv * wp[i] * gr[i] - c * xr[i];
  }
  if (dw != nullptr) {
    float* dwp = dw->data<float>();
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < H; ++i)
        dwp[i] += gp[r * H + i] * xp[r * H + i] * rinv[static_cast<size_t>(r)];
  }
}

void rope_rotate(Tensor& x, const Tensor& positions, const Tensor& inv_freq, float sign) {
  const int64_t T = x.size(0), NH = x.size(1), HD = x.size(2), half = HD / 2;
  const int32_t* pos = positions.data<int32_t>();
  const float* inv = inv_freq.data<float>();
  float* xp = x.data<float>();
#pragma omp parallel for schedule(static) if (T * NH * HD > (1 << 15))
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      const float a = static_cast<float>(pos[t]) * inv[i];  // the forward's angle, exactly
      cs[static_cast<size_t>(i)] = std::cos(a);
      sn[static_cast<size_t>(i)] = sign * std::sin(a);
    }
    for (int64_t h = 0; h < NH; ++h) {
      float* v = xp + (t * NH + h) * HD;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cs[static_cast<size_t>(i)] - b * sn[static_cast<size_t>(i)];
        v[i + half] = b * cs[static_cast<size_t>(i)] + a * sn[static_cast<size_t>(i)];
      }
    }
  }
}

void silu_mul_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup) {
  const int64_t n = gate.numel();
  const float* g = gate.data<float>();
  const float* u = up.data<float>();
  const float* d = dout.data<float>();
  float* dg = dgate.data<float>();
  float* du = dup.data<float>();
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float s = 1.0f / (1.0f + std::exp(-g[i]));
    const float gi = g[i], ui = u[i], di = d[i];
    dg[i] = di * ui * s * (1.0f + gi * (1.0f - s));
    du[i] = di * gi * s;
  }
}

void embedding_backward(const Tensor& ids, const Tensor& dout, Tensor& dtable) {
  const int64_t T = ids.size(0), V = dtable.size(0), H = dtable.size(1);
  const int32_t* id = ids.data<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    UPD_REQUIRE(id[t] >= 0 && id[t] < V) << "embedding_backward: token id " << id[t] << " at position " << t
                                         << " is outside the vocabulary [0, " << V << ")";
  const float* d = dout.data<float>();
  float* tb = dtable.data<float>();
  for (int64_t t = 0; t < T; ++t) {
    float* row = tb + static_cast<int64_t>(id[t]) * H;
    for (int64_t i = 0; i < H; ++i)
      row[i] += d[t * H + i];
  }
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, const AttentionMask& mask, float scale, Tensor& dq, Tensor& dk,
                        Tensor& dv) {
  const int64_t T = q.size(0), NH = q.size(1), HD = q.size(2), S = k.size(0), NKV = k.size(1);
  const int64_t group = NH / NKV;
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  const float* op = out.data<float>();
  const float* lp = lse.data<float>();
  const float* gp = dout.data<float>();
  float* dqp = dq.data<float>();
  float* dkp = dk.data<float>();
  float* dvp = dv.data<float>();
  const uint8_t* tree = mask.kind == MaskKind::Tree ? mask.tree_mask.data<uint8_t>() : nullptr;
  const size_t kv_numel = static_cast<size_t>(S * NKV * HD);

  // Deterministic: items go to threads in a fixed round-robin of chunks of 4, and the threads'
  // dk/dv partial sums are added in thread order (a dynamic schedule and a critical section made
  // the gradients, and so every training run, depend on thread timing).
  const bool parallel = T * NH * S * HD > (1 << 16);
  const bool wide = cpu_has_avx512();
  const int nt = parallel ? omp_get_max_threads() : 1;
  std::vector<std::vector<float>> dk_parts(static_cast<size_t>(nt)), dv_parts(static_cast<size_t>(nt));
#pragma omp parallel num_threads(nt) if (parallel)
  {
    std::vector<int64_t> keys;
    std::vector<float> probs;
    const size_t me = static_cast<size_t>(omp_get_thread_num());
    std::vector<float>& dk_local = dk_parts[me];
    std::vector<float>& dv_local = dv_parts[me];
    dk_local.assign(kv_numel, 0.f);
    dv_local.assign(kv_numel, 0.f);
#pragma omp for schedule(static, 4)
    for (int64_t item = 0; item < T * NH; ++item) {
      const int64_t i = item / NH, h = item % NH, g = h / group;
      const float* qv = qp + (i * NH + h) * HD;
      const float* ov = op + (i * NH + h) * HD;
      const float* gv = gp + (i * NH + h) * HD;
      float* dqv = dqp + (i * NH + h) * HD;
      for (int64_t d = 0; d < HD; ++d)
        dqv[d] = 0.f;
      const float l = lp[i * NH + h];
      if (!std::isfinite(l))
        continue;  // no visible key: the output was 0 and nothing depends on q, k, v
      visible_keys(mask, tree, T, i, keys);
      float di = 0.f;  // D_i = dout_i · out_i
      for (int64_t d = 0; d < HD; ++d)
        di += gv[d] * ov[d];
      if (wide) {
        attention_backward_keys_avx512(qv, gv, dqv, keys.data(), static_cast<int64_t>(keys.size()), kp, vp, NKV, g, HD,
                                       scale, l, di, dk_local.data(), dv_local.data());
        continue;
      }
      for (const int64_t j : keys) {
        const float* kv = kp + (j * NKV + g) * HD;
        const float* vv = vp + (j * NKV + g) * HD;
        float s = 0.f, dp = 0.f;
        for (int64_t d = 0; d < HD; ++d) {
          s += qv[d] * kv[d];
          dp += gv[d] * vv[d];
        }
        const float p = std::exp(s * scale - l);
        const float ds = p * (dp - di) * scale;  // d(loss)/d(q·k)
        float* dkl = dk_local.data() + (j * NKV + g) * HD;
        float* dvl = dv_local.data() + (j * NKV + g) * HD;
        for (int64_t d = 0; d < HD; ++d) {
          dqv[d] += ds * kv[d];
          dkl[d] += ds * qv[d];
          dvl[d] += p * gv[d];
        }
      }
    }
#pragma omp for schedule(static)
    for (size_t n = 0; n < kv_numel; ++n)
      for (size_t t = 0; t < dk_parts.size(); ++t) {
        if (dk_parts[t].empty())
          continue;  // a thread the runtime did not start
        dkp[n] += dk_parts[t][n];
        dvp[n] += dv_parts[t][n];
      }
  }
}

namespace {

// softmax of row z (C) into out; returns nothing, f32 with max subtraction.
void row_softmax(const float* z, int64_t C, float* out) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < C; ++i)
    m = std::max(m, z[i]);
  float s = 0.f;
  for (int64_t i = 0; i < C; ++i) {
    out[i] = std::exp(z[i] - m);
    s += out[i];
  }
  const float inv = 1.0f / s;
  for (int64_t i = 0; i < C; ++i)
    out[i] *= inv;
}

}  // namespace

void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& dloss, Tensor& dlogits) {
  const int64_t R = logits.size(0), C = logits.size(1);
  const int32_t* tg = target.data<int32_t>();
  for (int64_t r = 0; r < R; ++r)
    UPD_CHECK(tg[r] < C) << "cross_entropy_backward: target " << tg[r] << " in row " << r << " >= C=" << C;
  const float* z = logits.data<float>();
  const float* dl = dloss.data<float>();
  float* dz = dlogits.data<float>();
#pragma omp parallel for schedule(static) if (R * C > (1 << 15))
  for (int64_t r = 0; r < R; ++r) {
    float* dr = dz + r * C;
    if (tg[r] < 0 || dl[r] == 0.f) {
      for (int64_t c = 0; c < C; ++c)
        dr[c] = 0.f;
      continue;
    }
    row_softmax(z + r * C, C, dr);
    dr[tg[r]] -= 1.f;
    for (int64_t c = 0; c < C; ++c)
      dr[c] *= dl[r];
  }
}

void soft_cross_entropy_backward(const Tensor& logits, const Tensor& teacher, const Tensor& dloss, Tensor& dlogits) {
  const int64_t R = logits.size(0), C = logits.size(1);
  const float* z = logits.data<float>();
  const float* p = teacher.data<float>();
  const float* dl = dloss.data<float>();
  float* dz = dlogits.data<float>();
#pragma omp parallel for schedule(static) if (R * C > (1 << 15))
  for (int64_t r = 0; r < R; ++r) {
    float* dr = dz + r * C;
    const float* pr = p + r * C;
    float mass = 0.f;
    for (int64_t c = 0; c < C; ++c)
      mass += pr[c];
    if (mass == 0.f || dl[r] == 0.f) {
      for (int64_t c = 0; c < C; ++c)
        dr[c] = 0.f;
      continue;
    }
    row_softmax(z + r * C, C, dr);
    for (int64_t c = 0; c < C; ++c)
      dr[c] = dl[r] * (mass * dr[c] - pr[c]);
  }
}

}  // namespace updraft::ops::cpu
