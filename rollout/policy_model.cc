#include "rollout/policy_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <set>

#include "kernels/io/hf_checkpoint.h"
#include "kernels/io/weight_taker.h"
#include "kernels/ops.h"

namespace updraft {
namespace {

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
    L.attn.q = ops::prepare_linear(w.take(p + "self_attn.q_proj.weight", {QD, H}));
    L.attn.k = ops::prepare_linear(w.take(p + "self_attn.k_proj.weight", {KVD, H}));
    L.attn.v = ops::prepare_linear(w.take(p + "self_attn.v_proj.weight", {KVD, H}));
    L.attn.o = ops::prepare_linear(w.take(p + "self_attn.o_proj.weight", {H, QD}));
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
    L.mlp.gate = ops::prepare_linear(w.take(p + "mlp.gate_proj.weight", {I, H}));
    L.mlp.up = ops::prepare_linear(w.take(p + "mlp.up_proj.weight", {I, H}));
    L.mlp.down = ops::prepare_linear(w.take(p + "mlp.down_proj.weight", {H, I}));
    m.layers_.push_back(std::move(L));
  }
  m.final_norm_ = w.take("model.norm.weight", {H});
  if (cfg.tie_word_embeddings) {
    m.lm_head_ = ops::prepare_linear(m.embed_);
    w.ignore("lm_head.weight");  // some exports write the tied copy anyway
  } else {
    m.lm_head_ = ops::prepare_linear(w.take("lm_head.weight", {V, H}));
  }
  w.check_all_taken();
  m.inv_freq_ = ops::rope_inv_freq(cfg.rope, HD, opts.device);
  m.aux_layers_ = cfg.num_layers >= 4 ? cfg.default_aux_layers() : std::vector<int64_t>{};
  return m;
}

void PolicyModel::set_aux_layers(const std::vector<int64_t>& layers) {
  check_aux_layers(layers);
  aux_layers_ = layers;
}

void PolicyModel::check_aux_layers(const std::vector<int64_t>& layers) const {
  for (size_t i = 0; i < layers.size(); ++i)
    UPD_REQUIRE(layers[i] >= 0 && layers[i] < cfg_.num_layers && (i == 0 || layers[i] > layers[i - 1]))
        << "aux layers must be ascending Hugging Face hidden_states indices in [0, " << cfg_.num_layers << "); got "
        << layers[i] << " at position " << i;
}

namespace {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs f, adding its wall time to *bucket when profiling.
template <typename F>
void timed(ForwardProfile* prof, double ForwardProfile::*bucket, F&& f) {
  if (prof == nullptr) {
    f();
    return;
  }
  const double t0 = seconds_now();
  f();
  prof->*bucket += seconds_now() - t0;
}

}  // namespace

// The activations of one forward, reused by every layer.
struct PolicyModel::LayerScratch {
  Tensor x, h, h2, q, k, v, attn, gate, up, pos;
};

void PolicyModel::layer_forward(int64_t l, KvCache& cache, const nn::PagedBatch& pb, LayerScratch& s,
                                ForwardProfile* prof) const {
  const int64_t T = pb.T, NH = cfg_.num_heads, HD = cfg_.head_dim;
  const nn::HeadShape hs{NH, cfg_.num_kv_heads, HD, cfg_.rms_norm_eps};
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  const nn::DecoderLayerWeights& L = layers_[l];
  const ops::PagedKv kv = cache.layer(l);
  ops::rms_norm(s.x, L.input_norm, cfg_.rms_norm_eps, s.h);
  timed(prof, &ForwardProfile::matmul_s, [&] { nn::project_qkv(s.h, L.attn, hs, s.pos, inv_freq_, s.q, s.k, s.v); });
  timed(prof, &ForwardProfile::attention_s, [&] {
    ops::copy_rows(s.k, pb.src_rows, kv.k_cache, pb.dst_slots);
    ops::copy_rows(s.v, pb.src_rows, kv.v_cache, pb.dst_slots);
    ops::paged_attention(s.q, kv, pb.block_table, pb.kv_len, pb.q_start, pb.tree_mask, scale, s.attn, pb.mask_len);
  });
  timed(prof, &ForwardProfile::matmul_s, [&] {
    ops::linear(s.attn.reshape({T, NH * HD}), L.attn.o, L.attn.o_bias.defined() ? &L.attn.o_bias : nullptr, s.h2);
  });
  ops::add(s.x, s.h2, s.x);
  ops::rms_norm(s.x, L.post_attention_norm, cfg_.rms_norm_eps, s.h);
  timed(prof, &ForwardProfile::matmul_s, [&] { nn::gated_mlp(s.h, L.mlp, s.gate, s.up, s.h2); });
  ops::add(s.x, s.h2, s.x);
}

ForwardOut PolicyModel::forward(KvCache& cache, std::vector<SeqStep>& seqs, const ForwardOptions& opts) const {
  const double t_start = opts.profile != nullptr ? seconds_now() : 0;
  const int64_t H = cfg_.hidden_size, NH = cfg_.num_heads, NKV = cfg_.num_kv_heads, HD = cfg_.head_dim;
  UPD_CHECK(cache.shape().layers == cfg_.num_layers && cache.shape().kv_heads == NKV && cache.shape().head_dim == HD &&
            cache.shape().dtype == act_ && cache.shape().device == device_)
      << "policy forward: KV cache shape does not match the model";

  const nn::PagedBatch pb = nn::PagedBatch::build(cache, seqs, cfg_.vocab_size, "policy forward");
  const int64_t T = pb.T, R = pb.R;

  // ---- the layers ----
  ForwardOut out;
  const Device d = device_;
  LayerScratch s;
  s.x = Tensor::empty({T, H}, act_, d);
  s.h = Tensor::empty({T, H}, act_, d);
  s.h2 = Tensor::empty({T, H}, act_, d);
  s.q = Tensor::empty({T, NH, HD}, act_, d);
  s.k = Tensor::empty({T, NKV, HD}, act_, d);
  s.v = Tensor::empty({T, NKV, HD}, act_, d);
  s.attn = Tensor::empty({T, NH, HD}, act_, d);
  s.gate = Tensor::empty({T, cfg_.intermediate_size}, act_, d);
  s.up = Tensor::empty({T, cfg_.intermediate_size}, act_, d);
  s.pos = i32_on(pb.positions, d);
  ops::embedding(i32_on(pb.ids, d), embed_, s.x);
  const std::vector<int64_t>& aux_layers = opts.aux_layers.empty() ? aux_layers_ : opts.aux_layers;
  if (!opts.aux_layers.empty())
    check_aux_layers(opts.aux_layers);
  const int64_t A = static_cast<int64_t>(aux_layers.size());
  if (opts.aux) {
    UPD_CHECK(A > 0) << "policy forward: aux capture asked but no aux layers are set";
    out.aux = Tensor::empty({T, A, H}, act_, d);
  }
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    if (opts.aux)
      for (int64_t a = 0; a < A; ++a)
        if (aux_layers[a] == l) {
          std::vector<int32_t> dst(static_cast<size_t>(T));
          for (int64_t t = 0; t < T; ++t)
            dst[t] = static_cast<int32_t>(t * A + a);
          ops::copy_rows(s.x, pb.src_rows, out.aux.reshape({T * A, H}), Tensor::from_i32(dst, {T}));
        }
    layer_forward(l, cache, pb, s, opts.profile);
  }
  nn::PagedBatch::advance(seqs);

  // ---- outputs at the asked rows ----
  if (R > 0) {
    Tensor xr = Tensor::empty({R, H}, act_, d);
    ops::copy_rows(s.x, pb.logit_rows, xr, pb.out_rows);
    ops::rms_norm(xr, final_norm_, cfg_.rms_norm_eps, xr);
    out.logits = Tensor::empty({R, cfg_.vocab_size}, DType::F32, d);
    timed(opts.profile, &ForwardProfile::matmul_s, [&] { ops::linear(xr, lm_head_, nullptr, out.logits); });
    if (opts.hidden)
      out.hidden = xr;
  }
  if (opts.profile != nullptr) {
    opts.profile->total_s += seconds_now() - t_start;
    ++opts.profile->forwards;
  }
  return out;
}

}  // namespace updraft
