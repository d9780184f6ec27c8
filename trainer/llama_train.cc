#include "trainer/llama_train.h"

#include <cmath>
#include <filesystem>
#include <set>

#include "kernels/io/atomic_file.h"
#include "kernels/io/hf_checkpoint.h"
#include "kernels/io/safetensors.h"
#include "kernels/ops.h"
#include "trainer/init.h"

namespace updraft::train {
namespace {

Tensor f32(const Shape& s) {
  return Tensor::empty(s, DType::F32);
}

// What one layer's backward needs from its forward.
struct LayerActs {
  Tensor x, n1, q, k, v, attn, lse, h1, n2, gate, up, act;
};

}  // namespace

TrainableLlama::TrainableLlama(const PolicyConfig& cfg, uint64_t seed) : cfg_(cfg) {
  UPD_REQUIRE(cfg.arch == PolicyArch::Llama && !cfg.attention_bias && !cfg.qk_norm)
      << "TrainableLlama: only plain Llama layers (no biases, no q/k norm) are trainable";
  UPD_REQUIRE(cfg.num_heads > 0 && cfg.num_kv_heads > 0 && cfg.num_heads % cfg.num_kv_heads == 0 &&
              cfg.head_dim % 2 == 0)
      << "TrainableLlama: bad head configuration";
  const int64_t H = cfg.hidden_size, I = cfg.intermediate_size, V = cfg.vocab_size;
  const int64_t QD = cfg.num_heads * cfg.head_dim, KVD = cfg.num_kv_heads * cfg.head_dim;
  const float std_out = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.num_layers));
  uint64_t k = 0;
  auto lin = [&](const std::string& n, int64_t out, int64_t in, float sd) {
    return store_.add(n, init_normal({out, in}, sd, seed, ++k), true);
  };
  auto norm = [&](const std::string& n) { return store_.add(n, init_constant({H}, 1.f), false); };
  embed_ = lin("model.embed_tokens.weight", V, H, 0.02f);
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Layer L{};
    L.input_norm = norm(p + "input_layernorm.weight");
    L.post_norm = norm(p + "post_attention_layernorm.weight");
    L.q = lin(p + "self_attn.q_proj.weight", QD, H, 0.02f);
    L.k = lin(p + "self_attn.k_proj.weight", KVD, H, 0.02f);
    L.v = lin(p + "self_attn.v_proj.weight", KVD, H, 0.02f);
    L.o = lin(p + "self_attn.o_proj.weight", H, QD, std_out);
    L.gate = lin(p + "mlp.gate_proj.weight", I, H, 0.02f);
    L.up = lin(p + "mlp.up_proj.weight", I, H, 0.02f);
    L.down = lin(p + "mlp.down_proj.weight", H, I, std_out);
    layers_.push_back(L);
  }
  final_norm_ = norm("model.norm.weight");
  lm_head_ = cfg.tie_word_embeddings ? embed_ : lin("lm_head.weight", V, H, 0.02f);
  inv_freq_ = ops::rope_inv_freq(cfg.rope, cfg.head_dim);
}

TrainableLlama TrainableLlama::load_hf(const std::string& dir) {
  PolicyConfig cfg = PolicyConfig::from_file(dir + "/config.json");
  TrainableLlama m(cfg, 0);
  const CheckpointDir ckpt = CheckpointDir::open(dir);
  std::set<std::string> used;
  for (Param* p : m.params()) {
    if (!ckpt.has(p->name))
      throw Error("TrainableLlama: " + dir + " has no tensor " + p->name);
    const Tensor t = ckpt.get(p->name);
    if (t.shape() != p->value.shape())
      throw Error("TrainableLlama: " + dir + ": " + p->name + " has shape " + shape_str(t.shape()) + ", expected " +
                  shape_str(p->value.shape()));
    p->value.copy_from(t.to_dtype(DType::F32));
    used.insert(p->name);
  }
  for (const std::string& n : ckpt.names())
    if (!used.count(n))
      throw Error("TrainableLlama: " + dir + " holds " + n + ", which this architecture does not use");
  return m;
}

LmLoss TrainableLlama::forward_backward(const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                                        const std::vector<uint8_t>* target_mask, float grad_scale) {
  return run(tokens, B, T, target_mask, nullptr, grad_scale, true);
}

LmLoss TrainableLlama::weighted_backward(const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                                         const std::vector<float>& weights, float grad_scale) {
  UPD_REQUIRE(static_cast<int64_t>(weights.size()) == B * T) << "TrainableLlama: weights must have B*T entries";
  return run(tokens, B, T, nullptr, &weights, grad_scale, true);
}

LmLoss TrainableLlama::evaluate(const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                                const std::vector<uint8_t>* target_mask) const {
  return run(tokens, B, T, target_mask, nullptr, 0.f, false);
}

LmLoss TrainableLlama::run(const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                           const std::vector<uint8_t>* target_mask, const std::vector<float>* weights,
                           float grad_scale, bool backward) const {
  UPD_REQUIRE(B > 0 && T > 0 && static_cast<int64_t>(tokens.size()) == B * (T + 1))
      << "TrainableLlama: expected " << B << " sequences of " << T + 1 << " tokens, got " << tokens.size();
  UPD_REQUIRE(target_mask == nullptr || static_cast<int64_t>(target_mask->size()) == B * T)
      << "TrainableLlama: target mask must have B*T entries";
  const int64_t N = B * T, H = cfg_.hidden_size, V = cfg_.vocab_size, I = cfg_.intermediate_size;
  const int64_t NH = cfg_.num_heads, NKV = cfg_.num_kv_heads, HD = cfg_.head_dim;
  const float eps = cfg_.rms_norm_eps, scale = 1.0f / std::sqrt(static_cast<float>(HD));

  std::vector<int32_t> in_ids(static_cast<size_t>(N)), tgt(static_cast<size_t>(N)), pos(static_cast<size_t>(N));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const size_t r = static_cast<size_t>(b * T + t);
      in_ids[r] = tokens[static_cast<size_t>(b * (T + 1) + t)];
      const bool keep = weights != nullptr ? (*weights)[r] != 0.f : target_mask == nullptr || (*target_mask)[r] != 0;
      tgt[r] = keep ? tokens[static_cast<size_t>(b * (T + 1) + t + 1)] : -1;
      UPD_REQUIRE(tgt[r] < V) << "TrainableLlama: target token " << tgt[r] << " outside the vocabulary";
      pos[r] = static_cast<int32_t>(t);
    }
  const Tensor ids = Tensor::from_i32(in_ids, {N}), targets = Tensor::from_i32(tgt, {N});
  const Tensor positions = Tensor::from_i32(pos, {N});

  // ---- forward ----
  Tensor x = f32({N, H});
  ops::embedding(ids, embed_->value, x);
  std::vector<LayerActs> acts;
  for (const Layer& L : layers_) {
    LayerActs a;
    a.x = x;
    a.n1 = f32({N, H});
    ops::rms_norm(x, L.input_norm->value, eps, a.n1);
    a.q = f32({N, NH, HD});
    a.k = f32({N, NKV, HD});
    a.v = f32({N, NKV, HD});
    ops::linear(a.n1, L.q->value, nullptr, a.q.reshape({N, NH * HD}));
    ops::linear(a.n1, L.k->value, nullptr, a.k.reshape({N, NKV * HD}));
    ops::linear(a.n1, L.v->value, nullptr, a.v.reshape({N, NKV * HD}));
    ops::rope(a.q, positions, inv_freq_);
    ops::rope(a.k, positions, inv_freq_);
    a.attn = f32({N, NH, HD});
    a.lse = f32({N, NH});
    for (int64_t b = 0; b < B; ++b) {
      Tensor lse_b = a.lse.rows(b * T, (b + 1) * T);
      ops::attention(a.q.rows(b * T, (b + 1) * T), a.k.rows(b * T, (b + 1) * T), a.v.rows(b * T, (b + 1) * T),
                     ops::AttentionMask::causal(0), scale, a.attn.rows(b * T, (b + 1) * T), &lse_b);
    }
    a.h1 = f32({N, H});
    ops::linear(a.attn.reshape({N, NH * HD}), L.o->value, nullptr, a.h1);
    ops::add(a.h1, x, a.h1);
    a.n2 = f32({N, H});
    ops::rms_norm(a.h1, L.post_norm->value, eps, a.n2);
    a.gate = f32({N, I});
    a.up = f32({N, I});
    a.act = f32({N, I});
    ops::linear(a.n2, L.gate->value, nullptr, a.gate);
    ops::linear(a.n2, L.up->value, nullptr, a.up);
    ops::silu_mul(a.gate, a.up, a.act);
    Tensor next = f32({N, H});
    ops::linear(a.act, L.down->value, nullptr, next);
    ops::add(next, a.h1, next);
    x = next;
    if (backward)
      acts.push_back(std::move(a));
  }
  Tensor nf = f32({N, H});
  ops::rms_norm(x, final_norm_->value, eps, nf);
  Tensor logits = f32({N, V});
  ops::linear(nf, lm_head_->value, nullptr, logits);
  Tensor loss = f32({N});
  ops::cross_entropy(logits, targets, loss);

  LmLoss out;
  const float* lp = loss.data<float>();
  const float* zp = logits.data<float>();
  for (int64_t r = 0; r < N; ++r) {
    if (tgt[static_cast<size_t>(r)] < 0)
      continue;
    out.loss += lp[r];
    ++out.targets;
    const float* zr = zp + r * V;
    int64_t best = 0;
    for (int64_t c = 1; c < V; ++c)
      if (zr[c] > zr[best])
        best = c;
    out.correct += best == tgt[static_cast<size_t>(r)];
  }
  if (out.targets > 0)
    out.loss /= static_cast<double>(out.targets);
  if (!backward || out.targets == 0)
    return out;

  // ---- backward ----
  const float w = grad_scale / static_cast<float>(out.targets);
  Tensor dloss = f32({N});
  for (int64_t r = 0; r < N; ++r)
    dloss.data<float>()[r] = tgt[static_cast<size_t>(r)] < 0 ? 0.f : weights ? grad_scale * (*weights)[r] : w;
  ops::cross_entropy_backward(logits, targets, dloss, logits);  // logits now hold dlogits
  Tensor dnf = f32({N, H});
  ops::linear_backward(nf, lm_head_->value, logits, &dnf, false, &lm_head_->grad, nullptr);
  logits = Tensor();
  Tensor dx = f32({N, H});
  ops::rms_norm_backward(x, final_norm_->value, eps, dnf, dx, &final_norm_->grad);

  Tensor tmp_h = f32({N, H}), dact = f32({N, I}), dgate = f32({N, I}), dup = f32({N, I});
  Tensor dattn = f32({N, NH, HD}), dq = f32({N, NH, HD});
  Tensor dk = f32({N, NKV, HD}), dv = f32({N, NKV, HD});
  for (int64_t l = cfg_.num_layers - 1; l >= 0; --l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    LayerActs& a = acts[static_cast<size_t>(l)];
    // x_{l+1} = h1 + down(act): dx flows to h1 unchanged, and through the MLP.
    ops::linear_backward(a.act, L.down->value, dx, &dact, false, &L.down->grad, nullptr);
    ops::silu_mul_backward(a.gate, a.up, dact, dgate, dup);
    ops::linear_backward(a.n2, L.gate->value, dgate, &tmp_h, false, &L.gate->grad, nullptr);
    ops::linear_backward(a.n2, L.up->value, dup, &tmp_h, true, &L.up->grad, nullptr);
    Tensor dh1 = f32({N, H});
    ops::rms_norm_backward(a.h1, L.post_norm->value, eps, tmp_h, dh1, &L.post_norm->grad);
    ops::add(dh1, dx, dh1);
    // h1 = x + o(attn): dh1 reaches x directly and through attention.
    Tensor dattn2 = dattn.reshape({N, NH * HD});
    ops::linear_backward(a.attn.reshape({N, NH * HD}), L.o->value, dh1, &dattn2, false, &L.o->grad, nullptr);
    dk.zero_();
    dv.zero_();
    for (int64_t b = 0; b < B; ++b)
      ops::attention_backward(a.q.rows(b * T, (b + 1) * T), a.k.rows(b * T, (b + 1) * T), a.v.rows(b * T, (b + 1) * T),
                              a.attn.rows(b * T, (b + 1) * T), a.lse.rows(b * T, (b + 1) * T),
                              dattn.rows(b * T, (b + 1) * T), ops::AttentionMask::causal(0), scale,
                              dq.rows(b * T, (b + 1) * T), dk.rows(b * T, (b + 1) * T), dv.rows(b * T, (b + 1) * T));
    ops::rope_backward(dq, positions, inv_freq_);
    ops::rope_backward(dk, positions, inv_freq_);
    ops::linear_backward(a.n1, L.q->value, dq.reshape({N, NH * HD}), &tmp_h, false, &L.q->grad, nullptr);
    ops::linear_backward(a.n1, L.k->value, dk.reshape({N, NKV * HD}), &tmp_h, true, &L.k->grad, nullptr);
    ops::linear_backward(a.n1, L.v->value, dv.reshape({N, NKV * HD}), &tmp_h, true, &L.v->grad, nullptr);
    Tensor dxl = f32({N, H});
    ops::rms_norm_backward(a.x, L.input_norm->value, eps, tmp_h, dxl, &L.input_norm->grad);
    ops::add(dxl, dh1, dxl);
    dx = dxl;
    a = LayerActs{};  // free this layer's activations as soon as they are used
  }
  ops::embedding_backward(ids, dx, embed_->grad);
  return out;
}

}  // namespace updraft::train

namespace updraft::train {

std::map<std::string, Tensor> TrainableLlama::hf_tensors(DType dtype) const {
  std::map<std::string, Tensor> m;
  for (const auto& [name, t] : store_.set().copy_values(dtype))
    m[name] = t;
  return m;
}

void TrainableLlama::save_hf(const std::string& dir, DType dtype) const {
  PolicyConfig cfg = cfg_;
  cfg.dtype = dtype;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  UPD_REQUIRE(!ec) << "cannot create " << dir << ": " << ec.message();
  write_file_atomic(dir + "/config.json", cfg.to_json());
  const auto m = hf_tensors(dtype);
  std::vector<std::pair<std::string, Tensor>> list(m.begin(), m.end());
  save_safetensors(dir + "/model.safetensors", list, {{"format", "pt"}});
}

}  // namespace updraft::train
