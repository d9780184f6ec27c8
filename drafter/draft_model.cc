#include "drafter/draft_model.h"

#include <atomic>
#include <cmath>
#include <filesystem>

#include "kernels/io/atomic_file.h"
#include "kernels/io/hf_checkpoint.h"
#include "kernels/io/weight_taker.h"
#include "kernels/ops.h"

namespace updraft {
namespace {

// A CPU weight as the compute device wants it: as stored on the CPU, bf16 on CUDA.
Tensor on_device(const Tensor& t, Device d) {
  if (d == Device::CPU)
    return t;
  return (t.dtype() == DType::BF16 ? t : t.to_dtype(DType::BF16)).to(d);
}

Tensor i32_on(const std::vector<int32_t>& v, Device d) {
  return Tensor::from_i32(v, {static_cast<int64_t>(v.size())}).to(d);
}

// fc with the input RMSNorm weights multiplied into its columns: fc·(w ⊙ n) = (fc ⊙ w)·n.
Tensor fold_columns(const Tensor& fc, const std::vector<float>& scale) {
  Tensor f = Tensor::from_f32(fc.to_f32_vector(), fc.shape());
  const int64_t rows = f.size(0), cols = f.size(1);
  float* p = f.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      p[r * cols + c] *= scale[static_cast<size_t>(c)];
  return f;
}

std::atomic<DraftWeights> g_draft_weights{DraftWeights::kAsStored};

}  // namespace

void set_draft_weights(DraftWeights w) {
  g_draft_weights.store(w);
}

DraftWeights draft_weights() {
  return g_draft_weights.load();
}

const char* draft_weights_name(DraftWeights w) {
  return w == DraftWeights::kInt8 ? "int8" : w == DraftWeights::kAuto ? "auto" : "bf16";
}

DraftWeights resolved_draft_weights(Device d) {
  const DraftWeights want = draft_weights();
  const bool cpu_int8 = ops::cpu_has_int8_tiles() || ops::cpu_has_int8_vectors();
  const bool int8 = want == DraftWeights::kInt8 || (want == DraftWeights::kAuto && d == Device::CPU && cpu_int8);
  return int8 ? DraftWeights::kInt8 : DraftWeights::kAsStored;
}

DraftWeights parse_draft_weights(const std::string& name) {
  for (DraftWeights w : {DraftWeights::kAsStored, DraftWeights::kInt8, DraftWeights::kAuto}) {
    if (name != draft_weights_name(w))
      continue;
    if (w == DraftWeights::kInt8 && !ops::cpu_has_int8_tiles() && !ops::cpu_has_int8_vectors())
      throw Error(
          "drafter weights int8: this CPU has neither AMX-INT8 tiles nor AVX512-VNNI, where int8 drafter weights "
          "would run slower than bf16 (`updraft info` lists what it has)");
    return w;
  }
  throw Error("drafter weights: '" + name + "' is not one of bf16, int8, auto");
}

DraftModel DraftModel::load(const std::string& dir, const DraftTarget& target) {
  const std::string cfg_path = (std::filesystem::path(dir) / "config.json").string();
  UPD_REQUIRE(std::filesystem::exists(cfg_path)) << dir << ": no config.json";
  UPD_REQUIRE(std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors") ||
              std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors.index.json") ||
              !std::filesystem::exists(std::filesystem::path(dir) / "pytorch_model.bin"))
      << dir << ": only safetensors checkpoints are read (found pytorch_model.bin; convert it to safetensors)";
  const DraftConfig cfg = DraftConfig::from_file(cfg_path);
  const CheckpointDir ckpt = CheckpointDir::open(dir);
  return build(
      cfg, ckpt.names(), [&](const std::string& n) { return ckpt.get(n); }, target, dir);
}

DraftModel DraftModel::build(const DraftConfig& cfg, const std::vector<std::string>& names,
                             const std::function<Tensor(const std::string&)>& get, const DraftTarget& target,
                             const std::string& where) {
  const int64_t H = cfg.hidden_size, Ht = cfg.target_hidden_size, V = cfg.vocab_size, Vd = cfg.draft_vocab_size;
  UPD_REQUIRE(Ht == target.hidden_size) << where << ": the drafter reads target states of width " << Ht
                                        << " (target_hidden_size) but the policy's hidden size is "
                                        << target.hidden_size;
  UPD_REQUIRE(H == target.hidden_size) << where << ": draft hidden_size " << H
                                       << " differs from the policy's hidden size " << target.hidden_size
                                       << " (the drafter shares the policy's embedding)";
  UPD_REQUIRE(V == target.vocab_size) << where << ": draft vocab_size " << V << " differs from the policy's vocabulary "
                                      << target.vocab_size;
  UPD_REQUIRE(target.embedding.defined() && (target.embedding.shape() == Shape{V, H}))
      << where << ": the policy's embedding must be [" << V << ", " << H << "]";
  DraftModel m;
  m.cfg_ = cfg;
  m.target_ = target;
  const int64_t L = target.num_layers;
  m.aux_layers_ = cfg.aux_layers.empty() ? std::vector<int64_t>{2, L / 2, L - 3} : cfg.aux_layers;
  for (int64_t l : m.aux_layers_)
    UPD_REQUIRE(l >= 0 && l < L) << where << ": aux layer (hidden_states index) " << l << " outside the policy's " << L
                                 << " layers";

  UPD_REQUIRE(draft_weights() != DraftWeights::kInt8 || target.device == Device::CPU)
      << where << ": int8 drafter weights (--draft-weights int8) run only on the CPU; this drafter serves a policy on "
      << device_name(target.device);
  m.weights_ = resolved_draft_weights(target.device);
  const bool int8 = m.weights_ == DraftWeights::kInt8;
  const auto prepare = [int8](Tensor t) { return int8 ? ops::prepare_linear_int8(t) : ops::prepare_linear(t); };
  WeightTaker w(names, get, Device::CPU, where);
  const std::string p = w.has("midlayer.input_layernorm.weight") ? "midlayer." : "layers.0.";
  const int64_t I = cfg.intermediate_size, QD = cfg.num_heads * cfg.head_dim, KVD = cfg.num_kv_heads * cfg.head_dim;
  auto keep = [&](const std::string& eagle_name, const std::string& name, const Shape& shape) {
    Tensor t = w.take(name, shape);
    m.stored_.emplace_back(eagle_name, t);
    return t;
  };
  auto layer = [&](const std::string& suffix, const Shape& shape) {
    return on_device(keep("midlayer." + suffix, p + suffix, shape), target.device);
  };
  Tensor fc = keep("fc.weight", "fc.weight", {H, 3 * Ht});
  std::vector<float> fold;
  if (cfg.norm_before_fc) {
    fold = keep("input_norm.weight", "input_norm.weight", {3 * Ht}).to_f32_vector();
    m.unit_fc_norm =
        on_device(Tensor::from_f32(std::vector<float>(static_cast<size_t>(3 * Ht), 1.f), {3 * Ht}), target.device);
  } else if (cfg.fc_norm) {
    for (int i = 0; i < 3; ++i) {
      const std::string n = "fc_norm." + std::to_string(i) + ".weight";
      auto v = keep(n, n, {Ht}).to_f32_vector();
      fold.insert(fold.end(), v.begin(), v.end());
    }
    m.unit_fc_norm = on_device(Tensor::from_f32(std::vector<float>(static_cast<size_t>(Ht), 1.f), {Ht}), target.device);
  }
  m.fc_ = prepare(on_device(fold.empty() ? fc : fold_columns(fc, fold), target.device));
  m.embed_norm_ = layer("input_layernorm.weight", {H});
  m.hidden_norm_ = layer("hidden_norm.weight", {H});
  m.layer_.attn.q = prepare(layer("self_attn.q_proj.weight", {QD, 2 * H}));
  m.layer_.attn.k = prepare(layer("self_attn.k_proj.weight", {KVD, 2 * H}));
  m.layer_.attn.v = prepare(layer("self_attn.v_proj.weight", {KVD, 2 * H}));
  m.layer_.attn.o = prepare(layer("self_attn.o_proj.weight", {H, QD}));
  m.layer_.post_attention_norm = layer("post_attention_layernorm.weight", {H});
  m.layer_.mlp.gate = prepare(layer("mlp.gate_proj.weight", {I, H}));
  m.layer_.mlp.up = prepare(layer("mlp.up_proj.weight", {I, H}));
  m.layer_.mlp.down = prepare(layer("mlp.down_proj.weight", {H, I}));
  m.final_norm_ = on_device(keep("norm.weight", "norm.weight", {H}), target.device);
  m.lm_head_ = prepare(on_device(keep("lm_head.weight", "lm_head.weight", {Vd, H}), target.device));

  if (w.has("d2t")) {
    Tensor d2t = w.take_raw("d2t");
    Tensor t2d = w.has("t2d") ? w.take_raw("t2d") : Tensor();
    m.vocab_ = VocabMap::from_tensors(d2t, t2d.defined() ? &t2d : nullptr, Vd, V, where);
  } else {
    UPD_REQUIRE(Vd == V) << where << ": no d2t tensor, but the draft vocabulary (" << Vd
                         << ") is smaller than the target's (" << V
                         << "); without the mapping every draft id would be misread (eagle3.md F.3)";
    if (w.has("t2d"))
      w.take_raw("t2d");
    m.vocab_ = VocabMap::identity(V);
  }
  m.stored_.emplace_back("d2t", m.vocab_.d2t());
  m.stored_.emplace_back("t2d", m.vocab_.t2d());
  // The policy's embedding is used; a copy in the checkpoint must at least fit it.
  if (w.has("embed_tokens.weight"))
    w.take("embed_tokens.weight", {V, H});
  for (const char* n : {"verifier_lm_head.weight", "verifier_norm.weight"})  // speculators training-only
    if (w.has(n))
      w.ignore(n);
  w.check_all_taken();
  m.inv_freq_ = ops::rope_inv_freq(cfg.rope, cfg.head_dim, target.device);
  return m;
}

void DraftModel::save(const std::string& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  UPD_REQUIRE(!ec) << dir << ": cannot create: " << ec.message();
  DraftConfig c = cfg_;
  c.dtype = stored_.front().second.dtype();
  save_safetensors((std::filesystem::path(dir) / "model.safetensors").string(), stored_, {{"format", "pt"}});
  write_file_atomic((std::filesystem::path(dir) / "config.json").string(), c.to_eagle_json(target_.num_layers) + "\n");
}

DraftModel DraftModel::rebind(const DraftTarget& target) const {
  // Only the embedding table changes (an RL update of the same policy): the prepared weights
  // (packed panels, int8 rows) do not depend on it, so they are shared, not prepared again. (The
  // CPU kernel that chose panel packing is set once at startup; cfg_ keeps its loaded format.)
  const bool same_shape = target.device == target_.device && target.act_dtype == target_.act_dtype &&
                          target.hidden_size == target_.hidden_size && target.vocab_size == target_.vocab_size &&
                          target.num_layers == target_.num_layers &&
                          resolved_draft_weights(target.device) == weights_ && target.embedding.defined() &&
                          target.embedding.shape() == target_.embedding.shape();
  if (same_shape) {
    DraftModel m = *this;
    m.target_ = target;
    return m;
  }
  // Otherwise rebuild from stored_, the EAGLE-format tensors, and the EAGLE form of the config.
  const DraftConfig cfg = DraftConfig::from_json_text(cfg_.to_eagle_json(target_.num_layers), "rebind");
  std::vector<std::string> names;
  for (const auto& [n, t] : stored_)
    names.push_back(n);
  return build(
      cfg, names,
      [&](const std::string& n) {
        for (const auto& [m, t] : stored_)
          if (m == n)
            return t;
        return Tensor();
      },
      target, "rebind");
}

bool DraftModel::shares_prepared_weights(const DraftModel& o) const {
  auto same = [](const ops::LinearWeight& a, const ops::LinearWeight& b) {
    if (a.q8 != nullptr || b.q8 != nullptr)
      return a.q8 == b.q8;
    return a.w.defined() && b.w.defined() && a.w.raw() == b.w.raw();
  };
  return inv_freq_.raw() == o.inv_freq_.raw() && same(fc_, o.fc_) && same(lm_head_, o.lm_head_) &&
         same(layer_.attn.q, o.layer_.attn.q) && same(layer_.mlp.down, o.layer_.mlp.down);
}

namespace {

// Whether every step's logit rows are its last rows, in order, and no step has a tree mask: then
// those rows alone can attend (each a causal row over every key before it and itself).
bool logit_rows_are_suffixes(const std::vector<SeqStep>& steps) {
  for (const SeqStep& s : steps) {
    const auto n = static_cast<int32_t>(s.tokens.size()), k = static_cast<int32_t>(s.logit_rows.size());
    if (s.tree_mask.defined())
      return false;
    for (int32_t j = 0; j < k; ++j)
      if (s.logit_rows[static_cast<size_t>(j)] != n - k + j)
        return false;
  }
  return true;
}

}  // namespace

DraftOut DraftModel::forward(KvCache& cache, std::vector<SeqStep>& steps, const Tensor& hidden,
                             bool states_at_logit_rows) const {
  const int64_t H = cfg_.hidden_size, Ht = cfg_.target_hidden_size, NH = cfg_.num_heads, NKV = cfg_.num_kv_heads,
                HD = cfg_.head_dim;
  const DType act = target_.act_dtype;
  const Device d = target_.device;
  UPD_CHECK(cache.shape().layers == 1 && cache.shape().kv_heads == NKV && cache.shape().head_dim == HD &&
            cache.shape().dtype == act && cache.shape().device == d)
      << "draft forward: KV cache shape does not match the drafter";
  const nn::PagedBatch pb = nn::PagedBatch::build(cache, steps, cfg_.vocab_size, "draft forward");
  const int64_t T = pb.T, R = pb.R;
  const bool features = hidden.dim() == 2 && hidden.size(1) == 3 * Ht;
  UPD_CHECK(hidden.dim() == 2 && hidden.size(0) == T && (features || hidden.size(1) == H) && hidden.dtype() == act &&
            hidden.device() == d)
      << "draft forward: hidden must be [" << T << ", " << 3 * Ht << "] target features or [" << T << ", " << H
      << "] draft states in the activation dtype; got " << hidden.str();

  Tensor x = hidden;
  if (features) {
    Tensor in = hidden;
    if (unit_fc_norm.defined()) {
      in = Tensor::empty({T, 3 * Ht}, act, d);
      const bool per_chunk = cfg_.fc_norm;
      ops::rms_norm(per_chunk ? hidden.reshape({3 * T, Ht}) : hidden, unit_fc_norm, cfg_.rms_norm_eps,
                    per_chunk ? in.reshape({3 * T, Ht}) : in);
    }
    x = Tensor::empty({T, H}, act, d);
    ops::linear(in, fc_, nullptr, x);
  }
  // a = [RMSNorm_in(embed(tok)) | RMSNorm_hid(x)], written as rows 2t and 2t+1 of [2T, H].
  Tensor e = Tensor::empty({T, H}, act, d), ne = Tensor::empty({T, H}, act, d), nh = Tensor::empty({T, H}, act, d);
  ops::embedding(i32_on(pb.ids, d), target_.embedding, e);
  ops::rms_norm(e, embed_norm_, cfg_.rms_norm_eps, ne);
  ops::rms_norm(x, hidden_norm_, cfg_.rms_norm_eps, nh);
  Tensor a = Tensor::empty({T, 2 * H}, act, d);
  std::vector<int32_t> even(static_cast<size_t>(T)), odd(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    even[t] = static_cast<int32_t>(2 * t);
    odd[t] = static_cast<int32_t>(2 * t + 1);
  }
  ops::copy_rows(ne, pb.src_rows, a.reshape({2 * T, H}), Tensor::from_i32(even, {T}));
  ops::copy_rows(nh, pb.src_rows, a.reshape({2 * T, H}), Tensor::from_i32(odd, {T}));

  Tensor q = Tensor::empty({T, NH, HD}, act, d), k = Tensor::empty({T, NKV, HD}, act, d),
         v = Tensor::empty({T, NKV, HD}, act, d);
  nn::project_qkv(a, layer_.attn, {NH, NKV, HD, cfg_.rms_norm_eps}, i32_on(pb.positions, d), inv_freq_, q, k, v);
  const ops::PagedKv kv = cache.layer(0);
  ops::copy_rows(k, pb.src_rows, kv.k_cache, pb.dst_slots);
  ops::copy_rows(v, pb.src_rows, kv.v_cache, pb.dst_slots);

  // The rows that go on: all T, or only the logit rows (their queries, residuals and q_start).
  const bool compact = states_at_logit_rows && R < T && logit_rows_are_suffixes(steps);
  const int64_t Ta = compact ? R : T;
  Tensor res = cfg_.norm_before_residual ? nh : x, q_start = pb.q_start;
  if (compact) {
    Tensor qa = Tensor::empty({R, NH, HD}, act, d), ra = Tensor::empty({R, H}, act, d);
    ops::copy_rows(q, pb.logit_rows, qa, pb.out_rows);
    ops::copy_rows(res, pb.logit_rows, ra, pb.out_rows);
    q = qa;
    res = ra;
    std::vector<int32_t> starts = {0};
    for (const SeqStep& s : steps)
      starts.push_back(starts.back() + static_cast<int32_t>(s.logit_rows.size()));
    q_start = Tensor::from_i32(starts, {static_cast<int64_t>(starts.size())});
  }
  nn::PagedBatch::advance(steps);
  if (Ta == 0) {  // only absorbing: every key and value is written, no row goes on
    DraftOut out;
    out.state = Tensor::empty({0, H}, act, d);
    return out;
  }
  return rest_of_layer(kv, pb, q, res, q_start, compact);
}

DraftOut DraftModel::rest_of_layer(const ops::PagedKv& kv, const nn::PagedBatch& pb, const Tensor& q, const Tensor& res,
                                   const Tensor& q_start, bool compact) const {
  const int64_t H = cfg_.hidden_size, NH = cfg_.num_heads, HD = cfg_.head_dim, Ta = q.size(0), R = pb.R;
  const DType act = target_.act_dtype;
  const Device d = target_.device;
  Tensor attn = Tensor::empty({Ta, NH, HD}, act, d);
  ops::paged_attention(q, kv, pb.block_table, pb.kv_len, q_start, pb.tree_mask,
                       1.0f / std::sqrt(static_cast<float>(HD)), attn, pb.mask_len);
  Tensor h = Tensor::empty({Ta, H}, act, d), mo = Tensor::empty({Ta, H}, act, d);
  ops::linear(attn.reshape({Ta, NH * HD}), layer_.attn.o, nullptr, h);
  ops::add(res, h, h);  // h1
  Tensor m = Tensor::empty({Ta, H}, act, d), gate = Tensor::empty({Ta, cfg_.intermediate_size}, act, d),
         up = Tensor::empty({Ta, cfg_.intermediate_size}, act, d);
  ops::rms_norm(h, layer_.post_attention_norm, cfg_.rms_norm_eps, m);
  nn::gated_mlp(m, layer_.mlp, gate, up, mo);
  ops::add(h, mo, h);  // h2
  if (cfg_.feed_back_normed)
    ops::rms_norm(h, final_norm_, cfg_.rms_norm_eps, h);
  DraftOut out;
  out.state = h;
  if (R > 0) {
    Tensor hr = Tensor::empty({R, H}, act, d);
    ops::copy_rows(h, compact ? pb.out_rows : pb.logit_rows, hr, pb.out_rows);
    if (!cfg_.feed_back_normed)
      ops::rms_norm(hr, final_norm_, cfg_.rms_norm_eps, hr);
    out.logits = Tensor::empty({R, cfg_.draft_vocab_size}, DType::F32, d);
    ops::linear(hr, lm_head_, nullptr, out.logits);
  }
  return out;
}

}  // namespace updraft
