#include "kernels/nn/llama_layer.h"

#include "kernels/ops.h"

namespace updraft::nn {

void project_qkv(const Tensor& x, const AttentionWeights& w, const HeadShape& s, const Tensor& positions,
                 const Tensor& inv_freq, Tensor q, Tensor k, Tensor v) {
  const int64_t T = x.size(0);
  check_shape("project_qkv", "q", q, {T, s.heads, s.head_dim});
  check_shape("project_qkv", "k", k, {T, s.kv_heads, s.head_dim});
  check_shape("project_qkv", "v", v, {T, s.kv_heads, s.head_dim});
  auto opt = [](const Tensor& b) { return b.defined() ? &b : nullptr; };
  ops::linear_shared_input(x, {{&w.q, opt(w.q_bias), q.reshape({T, s.heads * s.head_dim})},
                               {&w.k, opt(w.k_bias), k.reshape({T, s.kv_heads * s.head_dim})},
                               {&w.v, opt(w.v_bias), v.reshape({T, s.kv_heads * s.head_dim})}});
  if (w.q_norm.defined()) {
    Tensor qr = q.reshape({T * s.heads, s.head_dim}), kr = k.reshape({T * s.kv_heads, s.head_dim});
    ops::rms_norm(qr, w.q_norm, s.norm_eps, qr);
    ops::rms_norm(kr, w.k_norm, s.norm_eps, kr);
  }
  ops::rope(q, positions, inv_freq);
  ops::rope(k, positions, inv_freq);
}

void gated_mlp(const Tensor& x, const MlpWeights& w, Tensor gate_scratch, Tensor up_scratch, Tensor out) {
  ops::linear_shared_input(x, {{&w.gate, nullptr, gate_scratch}, {&w.up, nullptr, up_scratch}});
  ops::silu_mul(gate_scratch, up_scratch, gate_scratch);
  ops::linear(gate_scratch, w.down, nullptr, out);
}

}  // namespace updraft::nn
