#include "rollout/random_policy.h"

#include <cmath>

#include "kernels/ops/sampling.h"

namespace updraft {
namespace {

Tensor fill(const Shape& shape, DType dtype, uint64_t seed, float center, float half_width) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.data<float>();
  const int64_t n = t.numel();
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    p[i] = center + half_width * (2.f * ops::uniform01(seed, static_cast<uint64_t>(i)) - 1.f);
  return dtype == DType::F32 ? t : t.to_dtype(dtype);
}

}  // namespace

std::map<std::string, Tensor> random_policy_tensors(const PolicyConfig& cfg, uint64_t seed, DType dtype) {
  std::map<std::string, Tensor> m;
  uint64_t k = 0;
  auto lin = [&](const std::string& n, int64_t out, int64_t in) {
    m[n] = fill({out, in}, dtype, ops::mix64(seed + ++k), 0.f, std::sqrt(3.f / static_cast<float>(in)));
  };
  auto norm = [&](const std::string& n, int64_t d) { m[n] = fill({d}, dtype, ops::mix64(seed + ++k), 1.f, 0.1f); };
  auto bias = [&](const std::string& n, int64_t d) { m[n] = fill({d}, dtype, ops::mix64(seed + ++k), 0.f, 0.1f); };
  const int64_t H = cfg.hidden_size, I = cfg.intermediate_size, HD = cfg.head_dim;
  const int64_t QD = cfg.num_heads * HD, KVD = cfg.num_kv_heads * HD;
  m["model.embed_tokens.weight"] = fill({cfg.vocab_size, H}, dtype, ops::mix64(seed + ++k), 0.f, 1.f);
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    norm(p + "input_layernorm.weight", H);
    norm(p + "post_attention_layernorm.weight", H);
    lin(p + "self_attn.q_proj.weight", QD, H);
    lin(p + "self_attn.k_proj.weight", KVD, H);
    lin(p + "self_attn.v_proj.weight", KVD, H);
    lin(p + "self_attn.o_proj.weight", H, QD);
    if (cfg.attention_bias) {
      bias(p + "self_attn.q_proj.bias", QD);
      bias(p + "self_attn.k_proj.bias", KVD);
      bias(p + "self_attn.v_proj.bias", KVD);
      if (cfg.arch != PolicyArch::Qwen2)
        bias(p + "self_attn.o_proj.bias", H);
    }
    if (cfg.qk_norm) {
      norm(p + "self_attn.q_norm.weight", HD);
      norm(p + "self_attn.k_norm.weight", HD);
    }
    lin(p + "mlp.gate_proj.weight", I, H);
    lin(p + "mlp.up_proj.weight", I, H);
    lin(p + "mlp.down_proj.weight", H, I);
  }
  norm("model.norm.weight", H);
  if (!cfg.tie_word_embeddings)
    lin("lm_head.weight", cfg.vocab_size, H);
  return m;
}

PolicyModel random_policy(const PolicyConfig& cfg, uint64_t seed, DType dtype, const PolicyOptions& opts) {
  auto tensors = random_policy_tensors(cfg, seed, dtype);
  std::vector<std::string> names;
  for (const auto& [n, t] : tensors)
    names.push_back(n);
  return PolicyModel::build(
      cfg, names, [&](const std::string& n) { return tensors.at(n); }, opts, "random policy");
}

}  // namespace updraft
