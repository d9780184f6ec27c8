#include "rollout/policy_model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "kernels/io/hf_checkpoint.h"
#include "kernels/ops.h"

namespace updraft {
namespace {

// Hands out the checkpoint's tensors by name, checking dtype and shape, and remembers which
// were taken so that leftovers can be reported.
class WeightTaker {
 public:
  WeightTaker(const std::vector<std::string>& names, const std::function<Tensor(const std::string&)>& get,
              Device device, const std::string& where)
      : names_(names.begin(), names.end()), get_(get), device_(device), where_(where) {}

  Tensor take(const std::string& name, const Shape& shape) {
    UPD_REQUIRE(names_.count(name)) << where_ << ": missing tensor " << name;
    Tensor t = get_(name);
    UPD_REQUIRE(t.defined()) << where_ << ": missing tensor " << name;
    UPD_REQUIRE(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16)
        << where_ << ": tensor " << name << " has dtype " << dtype_name(t.dtype()) << " (expected F32, BF16 or F16)";
    UPD_REQUIRE(t.shape() == shape) << where_ << ": tensor " << name << " has shape " << shape_str(t.shape())
                                    << ", the config implies " << shape_str(shape);
    taken_.insert(name);
    if (device_ == Device::CPU)
      return t;
    // CUDA: bf16 weights on the device (converted on the host, then copied).
    return (t.dtype() == DType::BF16 ? t : t.to_dtype(DType::BF16)).to(device_);
  }

  void ignore(const std::string& name) { taken_.insert(name); }

  void check_all_taken() const {
    for (const auto& n : names_) {
      const bool rotary_buffer = n.size() > 20 && n.compare(n.size() - 20, 20, "rotary_emb.inv_freq") == 0;
      UPD_REQUIRE(taken_.count(n) || rotary_buffer)
          << where_ << ": unexpected tensor " << n << " (not part of this architecture)";
    }
  }

 private:
  std::set<std::string> names_, taken_;
  const std::function<Tensor(const std::string&)>& get_;
  Device device_;
  std::string where_;
};

Tensor i32_on(const std::vector<int32_t>& v, Device d) {
  return Tensor::from_i32(v, {static_cast<int64_t>(v.size())}).to(d);
}

}  // namespace

PolicyModel PolicyModel::load(const std::string& dir, const PolicyOptions& opts) {
  const std::string cfg_path = (std::filesystem::path(dir) / "config.json").string();
  UPD_REQUIRE(std::filesystem::exists(cfg_path)) << dir << ": no config.json";
  PolicyConfig cfg = PolicyConfig::from_file(cfg_path);
  CheckpointDir ckpt = CheckpointDir::open(dir);
  return build(
      cfg, ckpt.names(), [&](const std::string& n) { return ckpt.get(n); }, opts, dir);
}

PolicyModel PolicyModel::build(const PolicyConfig& cfg, const std::vector<std::string>& names,
                               const std::function<Tensor(const std::string&)>& get, const PolicyOptions& opts,
                               const std::string& where) {
  UPD_REQUIRE(opts.device == Device::CPU || cuda_available())
      << "policy: CUDA requested but no usable CUDA device" << (cuda_compiled() ? "" : " (built without CUDA)");
  PolicyModel m;
  m.cfg_ = cfg;
  m.device_ = opts.device;
  m.act_ = opts.device == Device::CPU ? DType::F32 : DType::BF16;
  WeightTaker w(names, get, opts.device, where);
  const int64_t H = cfg.hidden_size, I = cfg.intermediate_size, V = cfg.vocab_size, HD = cfg.head_dim;
  const int64_t QD = cfg.num_heads * HD, KVD = cfg.num_kv_heads * HD;
  m.embed_ = w.take("model.embed_tokens.weight", {V, H});
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    nn::DecoderLayerWeights L;
    L.input_norm = w.take(p + "input_layernorm.weight", {H});
    L.post_attention_norm = w.take(p + "post_attention_layernorm.weight", {H});
    L.attn.q = w.take(p + "self_attn.q_proj.weight", {QD, H});
    L.attn.k = w.take(p + "self_attn.k_proj.weight", {KVD, H});
    L.attn.v = w.take(p + "self_attn.v_proj.weight", {KVD, H});
    L.attn.o = w.take(p + "self_attn.o_proj.weight", {H, QD});
    if (cfg.attention_bias) {
      L.attn.q_bias = w.take(p + "self_attn.q_proj.bias", {QD});
      L.attn.k_bias = w.take(p + "self_attn.k_proj.bias", {KVD});
      L.attn.v_bias = w.take(p + "self_attn.v_proj.bias", {KVD});
      if (cfg.arch != PolicyArch::Qwen2)  // Qwen2 has no o_proj bias; Llama/Qwen3 do with attention_bias
        L.attn.o_bias = w.take(p + "self_attn.o_proj.bias", {H});
    }
    if (cfg.qk_norm) {
      L.attn.q_norm = w.take(p + "self_attn.q_norm.weight", {HD});
      L.attn.k_norm = w.take(p + "self_attn.k_norm.weight", {HD});
    }
    L.mlp.gate = w.take(p + "mlp.gate_proj.weight", {I, H});
    L.mlp.up = w.take(p + "mlp.up_proj.weight", {I, H});
    L.mlp.down = w.take(p + "mlp.down_proj.weight", {H, I});
    m.layers_.push_back(std::move(L));
  }
  m.final_norm_ = w.take("model.norm.weight", {H});
  if (cfg.tie_word_embeddings) {
    m.lm_head_ = m.embed_;
    w.ignore("lm_head.weight");  // some exports write the tied copy anyway
  } else {
    m.lm_head_ = w.take("lm_head.weight", {V, H});
  }
  w.check_all_taken();
  m.inv_freq_ = ops::rope_inv_freq(cfg.rope, HD, opts.device);
  m.aux_layers_ = cfg.num_layers >= 4 ? cfg.default_aux_layers() : std::vector<int64_t>{};
  return m;
}

void PolicyModel::set_aux_layers(const std::vector<int64_t>& layers) {
  for (size_t i = 0; i < layers.size(); ++i)
    UPD_REQUIRE(layers[i] >= 0 && layers[i] < cfg_.num_layers && (i == 0 || layers[i] > layers[i - 1]))
        << "aux layers must be ascending Hugging Face hidden_states indices in [0, " << cfg_.num_layers << "); got "
        << layers[i] << " at position " << i;
  aux_layers_ = layers;
}

ForwardOut PolicyModel::forward(KvCache& cache, std::vector<SeqStep>& seqs, const ForwardOptions& opts) const {
  const int64_t B = static_cast<int64_t>(seqs.size());
  const int64_t H = cfg_.hidden_size, NH = cfg_.num_heads, NKV = cfg_.num_kv_heads, HD = cfg_.head_dim;
  UPD_CHECK(cache.shape().layers == cfg_.num_layers && cache.shape().kv_heads == NKV && cache.shape().head_dim == HD &&
            cache.shape().dtype == act_ && cache.shape().device == device_)
      << "policy forward: KV cache shape does not match the model";

  // ---- validate and lay out the batch (nothing is written before this is done) ----
  std::vector<int32_t> ids, positions, slots, q_start = {0}, kv_len, logit_rows;
  int64_t max_blocks = 1, max_new = 0;
  bool any_tree = false;
  for (int64_t b = 0; b < B; ++b) {
    const SeqStep& s = seqs[b];
    UPD_CHECK(s.kv != nullptr) << "policy forward: sequence " << b << " has no KV state";
    const int64_t n = static_cast<int64_t>(s.tokens.size()), base = s.kv->length;
    UPD_CHECK(cache.blocks_needed(base + n) <= static_cast<int64_t>(s.kv->blocks.size()))
        << "policy forward: sequence " << b << " needs " << base + n << " KV entries; reserve them first";
    UPD_CHECK(s.positions.empty() || static_cast<int64_t>(s.positions.size()) == n)
        << "policy forward: positions must match tokens";
    if (s.tree_mask.defined()) {
      UPD_CHECK(s.tree_mask.is_cpu() && s.tree_mask.dtype() == DType::Bool && (s.tree_mask.shape() == Shape{n, n}))
          << "policy forward: tree_mask must be a CPU bool [n, n]";
      any_tree = true;
    }
    for (int64_t i = 0; i < n; ++i) {
      const int32_t t = s.tokens[i];
      UPD_REQUIRE(t >= 0 && t < cfg_.vocab_size)
          << "token id " << t << " is outside the vocabulary [0, " << cfg_.vocab_size << ")";
      ids.push_back(t);
      positions.push_back(s.positions.empty() ? static_cast<int32_t>(base + i) : s.positions[i]);
      slots.push_back(static_cast<int32_t>(cache.slot(*s.kv, base + i)));
    }
    for (int32_t r : s.logit_rows) {
      UPD_CHECK(r >= 0 && r < n) << "policy forward: logit row " << r << " outside the sequence's new tokens";
      logit_rows.push_back(q_start.back() + r);
    }
    q_start.push_back(static_cast<int32_t>(q_start.back() + n));
    kv_len.push_back(static_cast<int32_t>(base + n));
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(s.kv->blocks.size()));
    max_new = std::max(max_new, n);
  }
  const int64_t T = q_start.back(), R = static_cast<int64_t>(logit_rows.size());
  std::vector<int32_t> table(static_cast<size_t>(B * max_blocks), 0);
  for (int64_t b = 0; b < B; ++b)
    std::copy(seqs[b].kv->blocks.begin(), seqs[b].kv->blocks.end(), table.begin() + b * max_blocks);
  Tensor tree;
  if (any_tree) {  // sequences without a mask get the causal pattern
    tree = Tensor::zeros({T, std::max<int64_t>(max_new, 1)}, DType::Bool);
    uint8_t* tm = tree.data<uint8_t>();
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = q_start[b + 1] - q_start[b];
      const uint8_t* sm = seqs[b].tree_mask.defined() ? seqs[b].tree_mask.data<uint8_t>() : nullptr;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
          tm[(q_start[b] + i) * tree.size(1) + j] = sm ? sm[i * n + j] : static_cast<uint8_t>(j <= i);
    }
  }
  Tensor tab = Tensor::from_i32(table, {B, max_blocks}), lens = Tensor::from_i32(kv_len, {B}),
         starts = Tensor::from_i32(q_start, {B + 1});
  std::vector<int32_t> iota(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    iota[t] = static_cast<int32_t>(t);
  Tensor src_rows = Tensor::from_i32(iota, {T}), dst_slots = Tensor::from_i32(slots, {T});

  // ---- the layers ----
  ForwardOut out;
  const Device d = device_;
  Tensor x = Tensor::empty({T, H}, act_, d), h = Tensor::empty({T, H}, act_, d), h2 = Tensor::empty({T, H}, act_, d);
  Tensor q = Tensor::empty({T, NH, HD}, act_, d), k = Tensor::empty({T, NKV, HD}, act_, d),
         v = Tensor::empty({T, NKV, HD}, act_, d), attn = Tensor::empty({T, NH, HD}, act_, d);
  Tensor gate = Tensor::empty({T, cfg_.intermediate_size}, act_, d),
         up = Tensor::empty({T, cfg_.intermediate_size}, act_, d);
  Tensor pos = i32_on(positions, d);
  ops::embedding(i32_on(ids, d), embed_, x);
  const int64_t A = static_cast<int64_t>(aux_layers_.size());
  if (opts.aux) {
    UPD_CHECK(A > 0) << "policy forward: aux capture asked but no aux layers are set";
    out.aux = Tensor::empty({T, A, H}, act_, d);
  }
  const nn::HeadShape hs{NH, NKV, HD, cfg_.rms_norm_eps};
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    if (opts.aux)
      for (int64_t a = 0; a < A; ++a)
        if (aux_layers_[a] == l) {
          std::vector<int32_t> dst(static_cast<size_t>(T));
          for (int64_t t = 0; t < T; ++t)
            dst[t] = static_cast<int32_t>(t * A + a);
          ops::copy_rows(x, src_rows, out.aux.reshape({T * A, H}), Tensor::from_i32(dst, {T}));
        }
    const nn::DecoderLayerWeights& L = layers_[l];
    const ops::PagedKv kv = cache.layer(l);
    ops::rms_norm(x, L.input_norm, cfg_.rms_norm_eps, h);
    nn::project_qkv(h, L.attn, hs, pos, inv_freq_, q, k, v);
    ops::copy_rows(k, src_rows, kv.k_cache, dst_slots);
    ops::copy_rows(v, src_rows, kv.v_cache, dst_slots);
    ops::paged_attention(q, kv, tab, lens, starts, tree, scale, attn);
    ops::linear(attn.reshape({T, NH * HD}), L.attn.o, L.attn.o_bias.defined() ? &L.attn.o_bias : nullptr, h2);
    ops::add(x, h2, x);
    ops::rms_norm(x, L.post_attention_norm, cfg_.rms_norm_eps, h);
    nn::gated_mlp(h, L.mlp, gate, up, h2);
    ops::add(x, h2, x);
  }
  for (auto& s : seqs)
    s.kv->length += static_cast<int64_t>(s.tokens.size());

  // ---- outputs at the asked rows ----
  if (R > 0) {
    std::vector<int32_t> ri(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r)
      ri[r] = static_cast<int32_t>(r);
    Tensor xr = Tensor::empty({R, H}, act_, d);
    ops::copy_rows(x, Tensor::from_i32(logit_rows, {R}), xr, Tensor::from_i32(ri, {R}));
    ops::rms_norm(xr, final_norm_, cfg_.rms_norm_eps, xr);
    out.logits = Tensor::empty({R, cfg_.vocab_size}, DType::F32, d);
    ops::linear(xr, lm_head_, nullptr, out.logits);
    if (opts.hidden)
      out.hidden = xr;
  }
  return out;
}

}  // namespace updraft
