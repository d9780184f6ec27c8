// The pieces of a Llama-style decoder layer that the policy and the EAGLE-3 drafter share.
// Weights use the Hugging Face layouts (Linear: [out, in]). Activations: f32 on the CPU, the
// backend's activation dtype on CUDA; every tensor on one device.
//
// project_qkv: from the normed input x [T, Hin] (Hin = H for the policy, 2H for the drafter):
//   q = x·Wq^T (+bq), k = x·Wk^T (+bk), v = x·Wv^T (+bv)       (Qwen2 biases when present)
//   q, k per-head RMSNorm with q_norm/k_norm when present        (Qwen3)
//   q, k rotated by RoPE at `positions` (i32 [T], on x's device) with inv_freq
//   outputs q [T, NH, HD], k, v [T, NKV, HD].
// gated_mlp: out[T, H] = down(silu(gate(x)) * up(x)); gate/up scratch [T, I].
#pragma once

#include "kernels/core/tensor.h"
#include "kernels/ops/gemm.h"

namespace updraft::nn {

// The projections are ops::LinearWeight: the weight, plus its AMX panels when prepared.
struct AttentionWeights {
  ops::LinearWeight q, k, v, o;           // [NH*HD, Hin], [NKV*HD, Hin] x2, [H, NH*HD]
  Tensor q_bias, k_bias, v_bias, o_bias;  // optional
  Tensor q_norm, k_norm;                  // optional [HD]
};

struct MlpWeights {
  ops::LinearWeight gate, up, down;  // [I, H], [I, H], [H, I]
};

// One Llama-style decoder layer: x += o(attn(norm1(x))); x += mlp(norm2(x)).
struct DecoderLayerWeights {
  Tensor input_norm, post_attention_norm;  // [H]
  AttentionWeights attn;
  MlpWeights mlp;
};

struct HeadShape {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  float norm_eps = 1e-6f;  // for q/k norm
};

void project_qkv(const Tensor& x, const AttentionWeights& w, const HeadShape& s, const Tensor& positions,
                 const Tensor& inv_freq, Tensor q, Tensor k, Tensor v);

void gated_mlp(const Tensor& x, const MlpWeights& w, Tensor gate_scratch, Tensor up_scratch, Tensor out);

}  // namespace updraft::nn
