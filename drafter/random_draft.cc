#include "drafter/random_draft.h"

#include <cmath>

#include "kernels/ops/sampling.h"

namespace updraft {
namespace {

Tensor fill(const Shape& shape, DType dtype, uint64_t seed, float center, float half_width) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = center + half_width * (2.f * ops::uniform01(seed, static_cast<uint64_t>(i)) - 1.f);
  return dtype == DType::F32 ? t : t.to_dtype(dtype);
}

}  // namespace

std::map<std::string, Tensor> random_draft_tensors(const DraftConfig& c, const VocabMap& vocab, uint64_t seed,
                                                   DType dtype) {
  std::map<std::string, Tensor> m;
  uint64_t k = 0;
  auto lin = [&](const std::string& n, int64_t out, int64_t in) {
    m[n] = fill({out, in}, dtype, ops::mix64(seed + ++k), 0.f, std::sqrt(3.f / static_cast<float>(in)));
  };
  auto norm = [&](const std::string& n, int64_t d) { m[n] = fill({d}, dtype, ops::mix64(seed + ++k), 1.f, 0.1f); };
  const int64_t H = c.hidden_size, QD = c.num_heads * c.head_dim, KVD = c.num_kv_heads * c.head_dim;
  lin("fc.weight", H, c.fc_in());
  if (c.norm_before_fc)
    norm("input_norm.weight", c.fc_in());
  if (c.fc_norm)
    for (int i = 0; i < 3; ++i)
      norm("fc_norm." + std::to_string(i) + ".weight", c.target_hidden_size);
  norm("midlayer.input_layernorm.weight", H);
  norm("midlayer.hidden_norm.weight", H);
  lin("midlayer.self_attn.q_proj.weight", QD, 2 * H);
  lin("midlayer.self_attn.k_proj.weight", KVD, 2 * H);
  lin("midlayer.self_attn.v_proj.weight", KVD, 2 * H);
  lin("midlayer.self_attn.o_proj.weight", H, QD);
  norm("midlayer.post_attention_layernorm.weight", H);
  lin("midlayer.mlp.gate_proj.weight", c.intermediate_size, H);
  lin("midlayer.mlp.up_proj.weight", c.intermediate_size, H);
  lin("midlayer.mlp.down_proj.weight", H, c.intermediate_size);
  norm("norm.weight", H);
  lin("lm_head.weight", c.draft_vocab_size, H);
  m["d2t"] = vocab.d2t();
  m["t2d"] = vocab.t2d();
  return m;
}

DraftModel random_draft(const DraftConfig& cfg, const VocabMap& vocab, const DraftTarget& target, uint64_t seed,
                        DType dtype) {
  auto tensors = random_draft_tensors(cfg, vocab, seed, dtype);
  std::vector<std::string> names;
  for (const auto& [n, t] : tensors)
    names.push_back(n);
  return DraftModel::build(
      cfg, names, [&](const std::string& n) { return tensors.at(n); }, target, "random drafter");
}

VocabMap spread_vocab(int64_t draft_vocab, int64_t target_vocab) {
  std::vector<int32_t> ids;
  for (int64_t j = 0; j < draft_vocab; ++j)
    ids.push_back(static_cast<int32_t>(j * target_vocab / draft_vocab));
  return VocabMap::from_ids(ids, target_vocab, "spread vocabulary");
}

}  // namespace updraft
