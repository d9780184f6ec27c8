#include "trainer/ttt_model.h"

#include <cmath>

#include "kernels/ops.h"
#include "trainer/init.h"

namespace updraft::train {
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

// What one TTT step's backward needs.
struct StepActs {
  Tensor in_state, emb, ne, nh, a, q, attn, lse, h1, n2, gate, up, act, h2, nf, dz;
  Tensor positions;
};

// Teacher of one step: dense draft-vocabulary probabilities, the rows that count, the target.
struct StepTeacher {
  Tensor probs;              // f32 [T, Vd]
  std::vector<int32_t> top;  // draft id of the teacher's top-1, -1 when not counted
  int64_t rows = 0;
};

StepTeacher make_teacher(const TttSample& s, const VocabMap& vocab, int64_t k) {
  const int64_t n = s.length(), T = n - 1, Vd = vocab.draft_vocab();
  StepTeacher st;
  st.probs = Tensor::zeros({T, Vd}, DType::F32);
  st.top.assign(static_cast<size_t>(T), -1);
  float* pp = st.probs.data<float>();
  for (int64_t p = 0; p < T; ++p) {
    const int64_t j = p + 2 + k;  // the token this row predicts
    if (j >= n || j < s.prompt_length)
      continue;
    const int64_t r = j - s.prompt_length;
    float* row = pp + p * Vd;
    if (s.teacher_k == 0) {
      const int32_t d = vocab.to_draft(s.tokens[static_cast<size_t>(j)]);
      if (d < 0)
        continue;
      row[d] = 1.f;
      st.top[static_cast<size_t>(p)] = d;
      ++st.rows;
      continue;
    }
    const int32_t* ids = s.teacher_ids.data() + r * s.teacher_k;
    const float* lps = s.teacher_logprobs.data() + r * s.teacher_k;
    int64_t best = 0;
    for (int64_t i = 1; i < s.teacher_k; ++i)
      if (lps[i] > lps[best])
        best = i;
    const int32_t top = vocab.to_draft(ids[best]);
    if (top < 0)
      continue;  // the teacher's top-1 is outside the draft vocabulary: the row does not count
    double mass = 0;
    for (int64_t i = 0; i < s.teacher_k; ++i) {
      const int32_t d = vocab.to_draft(ids[i]);
      if (d >= 0) {
        row[d] += std::exp(lps[i]);
        mass += std::exp(lps[i]);
      }
    }
    for (int64_t c = 0; c < Vd; ++c)
      row[c] = static_cast<float>(row[c] / mass);
    st.top[static_cast<size_t>(p)] = top;
    ++st.rows;
  }
  return st;
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

std::vector<Tensor> TrainableDraft::step_logits(const TttSample& s, int64_t steps) const {
  std::vector<Tensor> out;
  run(s, TttOptions{steps, 0.8}, 0.f, false, &out);
  return out;
}

TttStats TrainableDraft::run(const TttSample& s, const TttOptions& o, float grad_scale, bool backward,
                             std::vector<Tensor>* logits_out) const {
  const DraftConfig& c = cfg_;
  s.validate(c.fc_in(), target_.vocab_size, "TTT sample");
  UPD_REQUIRE(o.steps >= 1) << "TTT needs at least one step";
  const int64_t n = s.length(), T = n - 1, K = o.steps;
  const int64_t H = c.hidden_size, I = c.intermediate_size, Vd = c.draft_vocab_size;
  const int64_t NH = c.num_heads, NKV = c.num_kv_heads, HD = c.head_dim;
  const float eps = c.rms_norm_eps, scale = 1.0f / std::sqrt(static_cast<float>(HD));
  TttStats st;
  st.samples = 1;
  st.step_loss.assign(static_cast<size_t>(K), 0.0);
  st.rows.assign(static_cast<size_t>(K), 0);
  st.correct.assign(static_cast<size_t>(K), 0);
  if (T < 1)
    return st;

  const Tensor g = s.aux.rows(0, T).dtype() == DType::F32 ? s.aux.rows(0, T) : s.aux.rows(0, T).to_dtype(DType::F32);
  Tensor state = f32({T, H});
  ops::linear(g, fc_->value, nullptr, state);

  Tensor kbuf = f32({K * T, NKV, HD}), vbuf = f32({K * T, NKV, HD});
  std::vector<StepActs> acts;
  std::vector<StepTeacher> teachers;
  int64_t rows0 = 0;
  for (int64_t k = 0; k < K; ++k) {
    StepActs a;
    a.in_state = state;
    std::vector<int32_t> ids(static_cast<size_t>(T)), pos(static_cast<size_t>(T));
    for (int64_t p = 0; p < T; ++p) {
      const int64_t j = p + 1 + k;
      ids[static_cast<size_t>(p)] = j < n ? s.tokens[static_cast<size_t>(j)] : 0;  // past the end: masked rows
      pos[static_cast<size_t>(p)] = static_cast<int32_t>(p + k);
    }
    a.positions = Tensor::from_i32(pos, {T});
    a.emb = f32({T, H});
    ops::embedding(Tensor::from_i32(ids, {T}), target_.embedding, a.emb);
    a.ne = f32({T, H});
    a.nh = f32({T, H});
    ops::rms_norm(a.emb, embed_norm_->value, eps, a.ne);
    ops::rms_norm(state, hidden_norm_->value, eps, a.nh);
    a.a = f32({T, 2 * H});
    copy_columns(a.a, a.ne, 0, true);
    copy_columns(a.a, a.nh, H, true);
    a.q = f32({T, NH, HD});
    Tensor kk = kbuf.rows(k * T, (k + 1) * T), vv = vbuf.rows(k * T, (k + 1) * T);
    ops::linear(a.a, q_->value, nullptr, a.q.reshape({T, NH * HD}));
    ops::linear(a.a, k_->value, nullptr, kk.reshape({T, NKV * HD}));
    ops::linear(a.a, v_->value, nullptr, vv.reshape({T, NKV * HD}));
    ops::rope(a.q, a.positions, inv_freq_);
    ops::rope(kk, a.positions, inv_freq_);
    a.attn = f32({T, NH, HD});
    a.lse = f32({T, NH});
    ops::attention(a.q, kbuf.rows(0, (k + 1) * T), vbuf.rows(0, (k + 1) * T), ops::AttentionMask::ttt(k), scale, a.attn,
                   &a.lse);
    a.h1 = f32({T, H});
    ops::linear(a.attn.reshape({T, NH * HD}), o_->value, nullptr, a.h1);
    ops::add(a.h1, state, a.h1);
    a.n2 = f32({T, H});
    ops::rms_norm(a.h1, post_norm_->value, eps, a.n2);
    a.gate = f32({T, I});
    a.up = f32({T, I});
    a.act = f32({T, I});
    ops::linear(a.n2, gate_->value, nullptr, a.gate);
    ops::linear(a.n2, up_->value, nullptr, a.up);
    ops::silu_mul(a.gate, a.up, a.act);
    a.h2 = f32({T, H});
    ops::linear(a.act, down_->value, nullptr, a.h2);
    ops::add(a.h2, a.h1, a.h2);
    a.nf = f32({T, H});
    ops::rms_norm(a.h2, final_norm_->value, eps, a.nf);
    a.dz = f32({T, Vd});
    ops::linear(a.nf, lm_head_->value, nullptr, a.dz);  // logits; the backward turns them into dlogits

    if (logits_out != nullptr)
      logits_out->push_back(a.dz.to(Device::CPU).reshape({T, Vd}).to_dtype(DType::F32));
    StepTeacher te = make_teacher(s, vocab_, k);
    if (k == 0)
      rows0 = te.rows;
    Tensor loss = f32({T});
    ops::soft_cross_entropy(a.dz, te.probs, loss);
    const float* lp = loss.data<float>();
    const float* zp = a.dz.data<float>();
    double lk = 0;
    for (int64_t p = 0; p < T; ++p) {
      const int32_t top = te.top[static_cast<size_t>(p)];
      if (top < 0)
        continue;
      lk += lp[p];
      const float* zr = zp + p * Vd;
      int64_t best = 0;
      for (int64_t v = 1; v < Vd; ++v)
        if (zr[v] > zr[best])
          best = v;
      st.correct[static_cast<size_t>(k)] += best == top;
    }
    st.rows[static_cast<size_t>(k)] = te.rows;
    st.step_loss[static_cast<size_t>(k)] = rows0 > 0 ? lk / static_cast<double>(rows0) : 0.0;
    st.loss += std::pow(o.decay, static_cast<double>(k)) * st.step_loss[static_cast<size_t>(k)];
    state = a.h2;
    if (backward) {
      acts.push_back(std::move(a));
      teachers.push_back(std::move(te));
    }
  }
  if (!backward || rows0 == 0)
    return st;

  // ---- backward, last step first ----
  Tensor dkbuf = Tensor::zeros({K * T, NKV, HD}, DType::F32), dvbuf = Tensor::zeros({K * T, NKV, HD}, DType::F32);
  Tensor dstate;  // d(loss)/d(state fed into step k+1), i.e. of h2 at step k
  Tensor dh = f32({T, H}), dtmp = f32({T, H}), dact = f32({T, I}), dgate = f32({T, I}), dup = f32({T, I});
  Tensor dattn = f32({T, NH, HD}), dq = f32({T, NH, HD}), da = f32({T, 2 * H});
  Tensor dne = f32({T, H}), dnh = f32({T, H}), dscratch = f32({T, H});
  for (int64_t k = K - 1; k >= 0; --k) {
    StepActs& a = acts[static_cast<size_t>(k)];
    const StepTeacher& te = teachers[static_cast<size_t>(k)];
    const float wk =
        grad_scale * static_cast<float>(std::pow(o.decay, static_cast<double>(k))) / static_cast<float>(rows0);
    Tensor dloss = f32({T});
    for (int64_t p = 0; p < T; ++p)
      dloss.data<float>()[p] = te.top[static_cast<size_t>(p)] < 0 ? 0.f : wk;
    ops::soft_cross_entropy_backward(a.dz, te.probs, dloss, a.dz);
    // h2 -> nf -> logits, plus the gradient arriving through the next step's input.
    Tensor dnf = f32({T, H});
    ops::linear_backward(a.nf, lm_head_->value, a.dz, &dnf, false, &lm_head_->grad, nullptr);
    Tensor dh2 = f32({T, H});
    ops::rms_norm_backward(a.h2, final_norm_->value, eps, dnf, dh2, &final_norm_->grad);
    if (dstate.defined())
      ops::add(dh2, dstate, dh2);
    // h2 = h1 + down(silu(gate) * up).
    ops::linear_backward(a.act, down_->value, dh2, &dact, false, &down_->grad, nullptr);
    ops::silu_mul_backward(a.gate, a.up, dact, dgate, dup);
    ops::linear_backward(a.n2, gate_->value, dgate, &dtmp, false, &gate_->grad, nullptr);
    ops::linear_backward(a.n2, up_->value, dup, &dtmp, true, &up_->grad, nullptr);
    ops::rms_norm_backward(a.h1, post_norm_->value, eps, dtmp, dh, &post_norm_->grad);
    ops::add(dh, dh2, dh);  // dh = d(loss)/d(h1)
    // h1 = state + o(attention over the keys of steps 0..k).
    Tensor dattn2 = dattn.reshape({T, NH * HD});
    ops::linear_backward(a.attn.reshape({T, NH * HD}), o_->value, dh, &dattn2, false, &o_->grad, nullptr);
    ops::attention_backward(a.q, kbuf.rows(0, (k + 1) * T), vbuf.rows(0, (k + 1) * T), a.attn, a.lse, dattn,
                            ops::AttentionMask::ttt(k), scale, dq, dkbuf.rows(0, (k + 1) * T),
                            dvbuf.rows(0, (k + 1) * T));
    // Step k's own keys have now received the gradient of every step that reads them.
    Tensor dk = dkbuf.rows(k * T, (k + 1) * T), dv = dvbuf.rows(k * T, (k + 1) * T);
    ops::rope_backward(dq, a.positions, inv_freq_);
    ops::rope_backward(dk, a.positions, inv_freq_);
    ops::linear_backward(a.a, q_->value, dq.reshape({T, NH * HD}), &da, false, &q_->grad, nullptr);
    ops::linear_backward(a.a, k_->value, dk.reshape({T, NKV * HD}), &da, true, &k_->grad, nullptr);
    ops::linear_backward(a.a, v_->value, dv.reshape({T, NKV * HD}), &da, true, &v_->grad, nullptr);
    copy_columns(da, dne, 0, false);
    copy_columns(da, dnh, H, false);
    ops::rms_norm_backward(a.emb, embed_norm_->value, eps, dne, dscratch, &embed_norm_->grad);  // embedding frozen
    Tensor ds = f32({T, H});
    ops::rms_norm_backward(a.in_state, hidden_norm_->value, eps, dnh, ds, &hidden_norm_->grad);
    ops::add(ds, dh, ds);  // the residual
    dstate = ds;
    a = StepActs{};
  }
  // state_0 = fc(g).
  ops::linear_backward(g, fc_->value, dstate, nullptr, false, &fc_->grad, nullptr);
  return st;
}


}  // namespace updraft::train
