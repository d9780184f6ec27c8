#include "trainer/ttt_model.h"

#include <cmath>

#include "kernels/ops.h"
#include "trainer/init.h"
#include "trainer/ttt_teacher.h"

namespace updraft::train {
// What one TTT step's backward needs: rows lo .. T-1 of the step, logits (dz) of rows head .. T-1.
struct StepActs {
  Tensor in_state, emb, ne, nh, a, q, attn, lse, h1, n2, gate, up, act, h2, nf, dz;
  Tensor positions;
};

namespace {

Tensor f32(const Shape& s) {
  return Tensor::empty(s, DType::F32);
}

void check_variant(const DraftConfig& c) {
  UPD_REQUIRE(!c.norm_before_residual && !c.norm_before_fc && !c.fc_norm && !c.feed_back_normed)
      << "TTT training supports the native EAGLE-3 layout only (no norm_before_residual, norm_before_fc, "
         "fc_norm or fed-back normed state)";
}

// Copies src [T, W] into columns [c0, c0 + W) of dst [T, D] (or the reverse with to_dst false).
void copy_columns(Tensor& dst, const Tensor& src, int64_t c0, bool to_dst) {
  const int64_t T = dst.size(0), D = dst.size(1), W = src.size(1);
  float* d = dst.data<float>();
  float* s = src.data<float>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < W; ++i) {
      if (to_dst)
        d[t * D + c0 + i] = s[t * W + i];
      else
        s[t * W + i] = d[t * D + c0 + i];
    }
}

}  // namespace

void TttStats::add(const TttStats& o) {
  if (step_loss.size() < o.step_loss.size()) {
    step_loss.resize(o.step_loss.size(), 0.0);
    rows.resize(o.step_loss.size(), 0);
    correct.resize(o.step_loss.size(), 0);
  }
  loss += o.loss;
  for (size_t k = 0; k < o.step_loss.size(); ++k) {
    step_loss[k] += o.step_loss[k];
    rows[k] += o.rows[k];
    correct[k] += o.correct[k];
  }
  samples += o.samples;
}

TrainableDraft::TrainableDraft(const DraftConfig& cfg, const VocabMap& vocab, const DraftTarget& target,
                               const Tensor& policy_lm_head, uint64_t seed)
    : cfg_(cfg), vocab_(vocab), target_(target) {
  check_variant(cfg_);
  UPD_REQUIRE(target.device == Device::CPU) << "TTT training runs on the CPU";
  UPD_REQUIRE(vocab.target_vocab() == target.vocab_size && vocab.draft_vocab() == cfg.draft_vocab_size)
      << "TrainableDraft: vocabulary map " << vocab.draft_vocab() << "/" << vocab.target_vocab()
      << " does not match the config (" << cfg.draft_vocab_size << ") and the policy (" << target.vocab_size << ")";
  check_shape("TrainableDraft", "policy lm_head", policy_lm_head, {target.vocab_size, target.hidden_size});
  // Rows of the policy's lm_head for the draft vocabulary.
  const int64_t Vd = vocab.draft_vocab(), Ht = target.hidden_size;
  const Tensor lm = policy_lm_head.to_dtype(DType::F32);
  Tensor rows = f32({Vd, Ht});
  for (int64_t j = 0; j < Vd; ++j)
    rows.row(j).copy_from(lm.row(vocab.to_target(j)));
  UPD_REQUIRE(cfg.hidden_size == Ht) << "TrainableDraft: draft hidden size must equal the policy's";
  init_params(seed, &rows);
}

TrainableDraft::TrainableDraft(const DraftModel& draft, const DraftTarget& target)
    : cfg_(draft.config()), vocab_(draft.vocab()), target_(target) {
  check_variant(cfg_);
  init_params(0, nullptr);
  for (const auto& [name, t] : draft.tensors()) {
    Param* p = store_.set().find(name);
    if (p == nullptr)
      continue;  // d2t / t2d
    check_shape("TrainableDraft", name.c_str(), t, p->value.shape());
    p->value.copy_from(t.to_dtype(DType::F32));
  }
}

void TrainableDraft::init_params(uint64_t seed, const Tensor* lm_head_rows) {
  const DraftConfig& c = cfg_;
  const int64_t H = c.hidden_size, QD = c.num_heads * c.head_dim, KVD = c.num_kv_heads * c.head_dim;
  uint64_t k = 0;
  auto lin = [&](const std::string& n, int64_t out, int64_t in) {
    return store_.add(n, init_normal({out, in}, 0.02f, seed, ++k), true);
  };
  auto norm = [&](const std::string& n) { return store_.add(n, init_constant({H}, 1.f), false); };
  fc_ = lin("fc.weight", H, c.fc_in());
  embed_norm_ = norm("midlayer.input_layernorm.weight");
  hidden_norm_ = norm("midlayer.hidden_norm.weight");
  q_ = lin("midlayer.self_attn.q_proj.weight", QD, 2 * H);
  k_ = lin("midlayer.self_attn.k_proj.weight", KVD, 2 * H);
  v_ = lin("midlayer.self_attn.v_proj.weight", KVD, 2 * H);
  o_ = lin("midlayer.self_attn.o_proj.weight", H, QD);
  post_norm_ = norm("midlayer.post_attention_layernorm.weight");
  gate_ = lin("midlayer.mlp.gate_proj.weight", c.intermediate_size, H);
  up_ = lin("midlayer.mlp.up_proj.weight", c.intermediate_size, H);
  down_ = lin("midlayer.mlp.down_proj.weight", H, c.intermediate_size);
  final_norm_ = norm("norm.weight");
  lm_head_ = store_.add("lm_head.weight",
                        lm_head_rows ? *lm_head_rows : init_normal({c.draft_vocab_size, H}, 0.02f, seed, ++k), true);
  inv_freq_ = ops::rope_inv_freq(c.rope, c.head_dim);
}

DraftModel TrainableDraft::to_draft(DType dtype) const {
  std::vector<std::pair<std::string, Tensor>> tensors = store_.set().copy_values(dtype);
  tensors.emplace_back("d2t", vocab_.d2t());
  tensors.emplace_back("t2d", vocab_.t2d());
  std::vector<std::string> names;
  for (const auto& [n, t] : tensors)
    names.push_back(n);
  DraftConfig c = cfg_;
  c.format = DraftFormat::Eagle;
  c.dtype = dtype;
  return DraftModel::build(
      c, names,
      [&](const std::string& n) {
        for (const auto& [name, t] : tensors)
          if (name == n)
            return t;
        return Tensor();
      },
      target_, "trained drafter");
}

void TrainableDraft::set_target(const DraftTarget& target) {
  UPD_REQUIRE(target.hidden_size == target_.hidden_size && target.vocab_size == target_.vocab_size &&
              target.num_layers == target_.num_layers)
      << "TrainableDraft::set_target: the new policy's sizes differ from the draft's";
  target_ = target;
}

TttStats TrainableDraft::forward_backward(const TttSample& s, const TttOptions& o, float grad_scale) {
  return run(s, o, grad_scale, true);
}

TttStats TrainableDraft::evaluate(const TttSample& s, const TttOptions& o) const {
  return run(s, o, 0.f, false);
}

TttStats TrainableDraft::evaluate(const TttDataset& data, const TttOptions& o) const {
  prepare_linears(o, false);
  TttStats total;
  for (size_t i = 0; i < data.size(); ++i)
    total.add(run(data.get(i), o, 0.f, false, nullptr, true));
  return total;
}

void TrainableDraft::prepare_linears(const TttOptions& o, bool backward) const {
  if (linears_.precision() != o.matmul)
    linears_.set_precision(o.matmul);
  linears_.refresh({fc_}, false);
  linears_.refresh({q_, k_, v_, o_, gate_, up_, down_, lm_head_}, backward);
}

std::vector<Tensor> TrainableDraft::step_logits(const TttSample& s, int64_t steps) const {
  std::vector<Tensor> out;
  run(s, TttOptions{steps, 0.8}, 0.f, false, &out);
  return out;
}

TttStats TrainableDraft::run(const TttSample& s, const TttOptions& o, float grad_scale, bool backward,
                             std::vector<Tensor>* logits_out, bool prepared) const {
  s.validate(cfg_.fc_in(), target_.vocab_size, "TTT sample");
  UPD_REQUIRE(o.steps >= 1) << "TTT needs at least one step";
  UPD_REQUIRE(std::isfinite(o.rejected_weight) && o.rejected_weight > 0)
      << "TTT: rejected_weight " << o.rejected_weight << " must be a positive number";
  const int64_t T = s.length() - 1, K = o.steps;
  TttStats st;
  st.samples = 1;
  st.step_loss.assign(static_cast<size_t>(K), 0.0);
  st.rows.assign(static_cast<size_t>(K), 0);
  st.correct.assign(static_cast<size_t>(K), 0);
  if (T < 1)
    return st;
  std::vector<StepTeacher> teachers;
  for (int64_t k = 0; k < K; ++k)
    teachers.push_back(make_teacher(s, vocab_, k, o.rejected_weight));
  const RowPlan plan = plan_rows(teachers, T, o.skip_idle_rows && logits_out == nullptr);
  if (!prepared)
    prepare_linears(o, backward);
  const int64_t rows0 = teachers[0].rows;
  const double norm = teachers[0].weight_sum;  // rows0 when every weight is 1

  const Tensor g = s.aux.rows(0, T).dtype() == DType::F32 ? s.aux.rows(0, T) : s.aux.rows(0, T).to_dtype(DType::F32);
  Tensor state = f32({T, cfg_.hidden_size});
  linears_.forward(g, *fc_, state);
  const int64_t NKV = cfg_.num_kv_heads, HD = cfg_.head_dim;
  Tensor kbuf = Tensor::zeros({K * T, NKV, HD}, DType::F32), vbuf = Tensor::zeros({K * T, NKV, HD}, DType::F32);
  std::vector<StepActs> acts;
  for (int64_t k = 0; k < plan.steps; ++k) {
    const int64_t lo = plan.lo[static_cast<size_t>(k)], head = plan.head[static_cast<size_t>(k)];
    StepActs a = forward_step(s, k, lo, head, state, kbuf, vbuf);
    if (logits_out != nullptr)
      logits_out->push_back(a.dz.to(Device::CPU).reshape({T, cfg_.draft_vocab_size}).to_dtype(DType::F32));
    const StepTeacher& te = teachers[static_cast<size_t>(k)];
    const double lk = score_step(a.dz, te, head, st.correct[static_cast<size_t>(k)]);
    st.rows[static_cast<size_t>(k)] = te.rows;
    st.step_loss[static_cast<size_t>(k)] = rows0 > 0 ? lk / norm : 0.0;
    st.loss += std::pow(o.decay, static_cast<double>(k)) * st.step_loss[static_cast<size_t>(k)];
    if (k + 1 < plan.steps)
      state = a.h2.rows(plan.lo[static_cast<size_t>(k + 1)] - lo, T - lo);
    if (backward)
      acts.push_back(std::move(a));
  }
  if (!backward || rows0 == 0)
    return st;

  // Backward, last step first. dkbuf/dvbuf collect the keys' gradients from every step reading them.
  Tensor dkbuf = Tensor::zeros({K * T, NKV, HD}, DType::F32), dvbuf = Tensor::zeros({K * T, NKV, HD}, DType::F32);
  Tensor dstate;  // d(loss)/d(the state fed into step k+1), rows lo[k+1] .. T-1
  for (int64_t k = plan.steps - 1; k >= 0; --k) {
    const float wk =
        grad_scale * static_cast<float>(std::pow(o.decay, static_cast<double>(k))) / static_cast<float>(norm);
    const int64_t next_lo = k + 1 < plan.steps ? plan.lo[static_cast<size_t>(k + 1)] : T;
    dstate = backward_step(acts[static_cast<size_t>(k)], teachers[static_cast<size_t>(k)], k,
                           plan.lo[static_cast<size_t>(k)], plan.head[static_cast<size_t>(k)], wk, dstate, next_lo,
                           kbuf, vbuf, dkbuf, dvbuf);
    acts[static_cast<size_t>(k)] = StepActs{};
  }
  // state_0 = fc(g).
  linears_.backward(g, *fc_, dstate, nullptr, false);
  linears_.flush_grads();
  return st;
}

// Rows lo .. T-1 of step k; the LM head over rows head .. T-1 (a.dz). Writes the step's keys and
// values into kbuf/vbuf at k*T + lo ...
StepActs TrainableDraft::forward_step(const TttSample& s, int64_t k, int64_t lo, int64_t head, const Tensor& state,
                                      Tensor& kbuf, Tensor& vbuf) const {
  const DraftConfig& c = cfg_;
  const int64_t n = s.length(), T = n - 1, R = T - lo;
  const int64_t H = c.hidden_size, I = c.intermediate_size, NH = c.num_heads, NKV = c.num_kv_heads, HD = c.head_dim;
  const float eps = c.rms_norm_eps, scale = 1.0f / std::sqrt(static_cast<float>(HD));
  StepActs a;
  a.in_state = state;
  std::vector<int32_t> ids(static_cast<size_t>(R)), pos(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    const int64_t p = lo + r, j = p + 1 + k;
    ids[static_cast<size_t>(r)] = j < n ? s.tokens[static_cast<size_t>(j)] : 0;  // past the end: masked rows
    pos[static_cast<size_t>(r)] = static_cast<int32_t>(p + k);
  }
  a.positions = Tensor::from_i32(pos, {R});
  a.emb = f32({R, H});
  ops::embedding(Tensor::from_i32(ids, {R}), target_.embedding, a.emb);
  a.ne = f32({R, H});
  a.nh = f32({R, H});
  ops::rms_norm(a.emb, embed_norm_->value, eps, a.ne);
  ops::rms_norm(state, hidden_norm_->value, eps, a.nh);
  a.a = f32({R, 2 * H});
  copy_columns(a.a, a.ne, 0, true);
  copy_columns(a.a, a.nh, H, true);
  a.q = f32({R, NH, HD});
  Tensor kk = kbuf.rows(k * T + lo, (k + 1) * T), vv = vbuf.rows(k * T + lo, (k + 1) * T);
  linears_.forward(a.a, *q_, a.q.reshape({R, NH * HD}));
  linears_.forward(a.a, *k_, kk.reshape({R, NKV * HD}));
  linears_.forward(a.a, *v_, vv.reshape({R, NKV * HD}));
  ops::rope(a.q, a.positions, inv_freq_);
  ops::rope(kk, a.positions, inv_freq_);
  a.attn = f32({R, NH, HD});
  a.lse = f32({R, NH});
  ops::attention(a.q, kbuf.rows(0, (k + 1) * T), vbuf.rows(0, (k + 1) * T), ops::AttentionMask::ttt(k, lo), scale,
                 a.attn, &a.lse);
  a.h1 = f32({R, H});
  linears_.forward(a.attn.reshape({R, NH * HD}), *o_, a.h1);
  ops::add(a.h1, state, a.h1);
  a.n2 = f32({R, H});
  ops::rms_norm(a.h1, post_norm_->value, eps, a.n2);
  a.gate = f32({R, I});
  a.up = f32({R, I});
  a.act = f32({R, I});
  linears_.forward(a.n2, *gate_, a.gate);
  linears_.forward(a.n2, *up_, a.up);
  ops::silu_mul(a.gate, a.up, a.act);
  a.h2 = f32({R, H});
  linears_.forward(a.act, *down_, a.h2);
  ops::add(a.h2, a.h1, a.h2);
  a.nf = f32({R, H});
  ops::rms_norm(a.h2, final_norm_->value, eps, a.nf);
  a.dz = f32({T - head, c.draft_vocab_size});
  linears_.forward(a.nf.rows(head - lo, R), *lm_head_, a.dz);  // the backward turns them into dlogits
  return a;
}

// The step's summed soft-CE over counted rows (logits z of rows head .. T-1); counts argmax hits.
double TrainableDraft::score_step(const Tensor& z, const StepTeacher& te, int64_t head, int64_t& correct) const {
  const int64_t rows = z.size(0), Vd = z.size(1);
  Tensor loss = f32({rows});
  ops::soft_cross_entropy(z, te.probs.rows(head, head + rows), loss);
  const float* lp = loss.data<float>();
  const float* zp = z.data<float>();
  double lk = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t top = te.top[static_cast<size_t>(head + r)];
    if (top < 0)
      continue;
    lk += static_cast<double>(te.weight[static_cast<size_t>(head + r)]) * lp[r];
    const float* zr = zp + r * Vd;
    int64_t best = 0;
    for (int64_t v = 1; v < Vd; ++v)
      if (zr[v] > zr[best])
        best = v;
    correct += best == top;
  }
  return lk;
}

// Adds step k's parameter gradients; returns d(loss)/d(the step's input state), rows lo .. T-1.
// dnext: the gradient arriving through step k+1's input state (rows next_lo .. T-1), or undefined.
Tensor TrainableDraft::backward_step(StepActs& a, const StepTeacher& te, int64_t k, int64_t lo, int64_t head, float wk,
                                     const Tensor& dnext, int64_t next_lo, const Tensor& kbuf, const Tensor& vbuf,
                                     Tensor& dkbuf, Tensor& dvbuf) const {
  const DraftConfig& c = cfg_;
  const int64_t T = te.probs.size(0), R = T - lo;
  const int64_t H = c.hidden_size, I = c.intermediate_size, NH = c.num_heads, NKV = c.num_kv_heads, HD = c.head_dim;
  const float eps = c.rms_norm_eps, scale = 1.0f / std::sqrt(static_cast<float>(HD));
  Tensor dloss = f32({T - head});
  for (int64_t r = 0; r < T - head; ++r)
    dloss.data<float>()[r] = wk * te.weight[static_cast<size_t>(head + r)];
  ops::soft_cross_entropy_backward(a.dz, te.probs.rows(head, T), dloss, a.dz);
  // h2 -> nf -> logits, plus the gradient arriving through the next step's input.
  Tensor dnf = Tensor::zeros({R, H}, DType::F32);
  Tensor dnf_head = dnf.rows(head - lo, R);
  linears_.backward(a.nf.rows(head - lo, R), *lm_head_, a.dz, &dnf_head, false);
  Tensor dh2 = f32({R, H});
  ops::rms_norm_backward(a.h2, final_norm_->value, eps, dnf, dh2, &final_norm_->grad);
  if (dnext.defined()) {
    Tensor tail = dh2.rows(next_lo - lo, R);
    ops::add(tail, dnext, tail);
  }
  // h2 = h1 + down(silu(gate) * up).
  Tensor dact = f32({R, I}), dgate = f32({R, I}), dup = f32({R, I}), dtmp = f32({R, H}), dh = f32({R, H});
  linears_.backward(a.act, *down_, dh2, &dact, false);
  ops::silu_mul_backward(a.gate, a.up, dact, dgate, dup);
  linears_.backward(a.n2, *gate_, dgate, &dtmp, false);
  linears_.backward(a.n2, *up_, dup, &dtmp, true);
  ops::rms_norm_backward(a.h1, post_norm_->value, eps, dtmp, dh, &post_norm_->grad);
  ops::add(dh, dh2, dh);  // dh = d(loss)/d(h1)
  // h1 = state + o(attention over the keys of steps 0..k).
  Tensor dattn = f32({R, NH, HD}), dq = f32({R, NH, HD}), da = f32({R, 2 * H});
  Tensor dattn2 = dattn.reshape({R, NH * HD});
  linears_.backward(a.attn.reshape({R, NH * HD}), *o_, dh, &dattn2, false);
  ops::attention_backward(a.q, kbuf.rows(0, (k + 1) * T), vbuf.rows(0, (k + 1) * T), a.attn, a.lse, dattn,
                          ops::AttentionMask::ttt(k, lo), scale, dq, dkbuf.rows(0, (k + 1) * T),
                          dvbuf.rows(0, (k + 1) * T));
  // Step k's own keys have now received the gradient of every step that reads them.
  Tensor dk = dkbuf.rows(k * T + lo, (k + 1) * T), dv = dvbuf.rows(k * T + lo, (k + 1) * T);
  ops::rope_backward(dq, a.positions, inv_freq_);
  ops::rope_backward(dk, a.positions, inv_freq_);
  linears_.backward(a.a, *q_, dq.reshape({R, NH * HD}), &da, false);
  linears_.backward(a.a, *k_, dk.reshape({R, NKV * HD}), &da, true);
  linears_.backward(a.a, *v_, dv.reshape({R, NKV * HD}), &da, true);
  Tensor dne = f32({R, H}), dnh = f32({R, H}), dscratch = f32({R, H}), ds = f32({R, H});
  copy_columns(da, dne, 0, false);
  copy_columns(da, dnh, H, false);
  ops::rms_norm_backward(a.emb, embed_norm_->value, eps, dne, dscratch, &embed_norm_->grad);  // embedding frozen
  ops::rms_norm_backward(a.in_state, hidden_norm_->value, eps, dnh, ds, &hidden_norm_->grad);
  ops::add(ds, dh, ds);  // the residual
  return ds;
}

}  // namespace updraft::train
