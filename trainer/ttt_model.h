// A trainable EAGLE-3 drafter and its training-time-test objective (eagle3.md C.3-C.6).
//
// For a sample of n tokens the draft rows are p = 0 .. n-2: row p pairs the policy's aux states
// g_p with the token x_{p+1} and, at TTT step k (0 <= k < K), reads token x_{p+1+k} (teacher
// forcing) and the hidden state the draft itself produced at step k-1 (fc(g_p) at step 0), sits
// at RoPE position p + k, attends to the step-0 keys of rows 0..p and to its own keys of steps
// 1..k (the diagonal; ops::attention's TTT mask, no T×T block beyond step 0), and predicts
// x_{p+2+k} against the teacher at that position restricted to the draft vocabulary and
// renormalised. Rows count at step k only when x_{p+2+k} is a response token whose teacher
// top-1 lies in the draft vocabulary. Loss = Σ_k decay^k · loss_k, loss_k = Σ_counted w·soft-CE
// / (Σ w over the rows counted at step 0), w = 1 but at rejected positions (rejected_weight);
// gradients flow through the fed-back hidden states (not detached).
//
// Trainable: fc, the decoder layer, the final norm and lm_head. The embedding is the policy's
// table, frozen. Supported variant: the native EAGLE-3 layout (no fc norms, residual before
// hidden_norm, the pre-norm state fed back); other DraftConfig flags are an Error.
//
// Fresh drafts: lm_head starts from the policy's lm_head rows of the draft vocabulary (a warm
// start that shortens training; speculators does the same, EAGLE starts from random), the
// other linear weights ~ N(0, 0.02), norms 1.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "drafter/draft_model.h"
#include "trainer/init.h"
#include "trainer/params.h"
#include "trainer/ttt_data.h"
#include "trainer/ttt_linear.h"

namespace updraft::train {

struct TttOptions {
  int64_t steps = 7;   // K
  double decay = 0.8;  // weight of step k: decay^k
  // Rows that predict nothing at a step or after it (the prompt's, the last ones) skip that step's
  // work beyond the step-0 keys later rows read, and the LM head runs from the first counted row:
  // the same loss and gradients, up to float rounding, for less work (most where prompts are long).
  bool skip_idle_rows = true;
  // The matrix products' precision (ttt_linear.h): f32, or bf16 operands summed in f32 (fast with
  // AMX; the weights and the optimiser stay f32).
  TttMatmul matmul = TttMatmul::F32;
  // The loss weight of a row whose target token the serving speculation was rejected at
  // (TttSample::rejected); others weigh 1, and each step's loss is divided by the step-0 rows'
  // weight sum instead of their count, so the weights move emphasis, not the step size.
  double rejected_weight = 1.0;
};

struct StepActs;     // one step's activations (ttt_model.cc)
struct StepTeacher;  // one step's teacher distribution (ttt_model.cc)

struct TttStats {
  double loss = 0;                     // Σ_k decay^k loss_k, summed over samples
  std::vector<double> step_loss;       // loss_k, summed over samples
  std::vector<int64_t> rows, correct;  // per step: rows counted, draft argmax == teacher argmax
  int64_t samples = 0;

  void add(const TttStats& o);
  double accuracy(size_t k) const { return rows[k] ? static_cast<double>(correct[k]) / rows[k] : 0.0; }
  double mean_loss() const { return samples ? loss / samples : 0.0; }
};

class TrainableDraft {
 public:
  // A fresh draft for the policy described by `target` (its embedding table is shared, its
  // lm_head [V, Ht] seeds the draft's lm_head rows).
  TrainableDraft(const DraftConfig& cfg, const VocabMap& vocab, const DraftTarget& target, const Tensor& policy_lm_head,
                 uint64_t seed);
  // Continues from a loaded draft (online refresh).
  TrainableDraft(const DraftModel& draft, const DraftTarget& target);
  TrainableDraft(const TrainableDraft&) = delete;
  TrainableDraft& operator=(const TrainableDraft&) = delete;

  const DraftConfig& config() const { return cfg_; }
  const VocabMap& vocab() const { return vocab_; }
  // Serves a new version of the same policy from now on (its embedding table): the online
  // trainer follows RL this way. CheckFailure when the sizes differ.
  void set_target(const DraftTarget& target);
  ParamSet& params() { return store_.set(); }

  // Adds grad_scale × d(loss)/d(params) to the grads; returns the sample's statistics.
  TttStats forward_backward(const TttSample& s, const TttOptions& o, float grad_scale);
  TttStats evaluate(const TttSample& s, const TttOptions& o) const;
  // Every sample of `data`, summed (the weights' bf16 copies made once for all of them).
  TttStats evaluate(const TttDataset& data, const TttOptions& o) const;
  // The draft-vocabulary logits of every step, f32 [T, Vd] each (for tests and inspection).
  std::vector<Tensor> step_logits(const TttSample& s, int64_t steps) const;

  // The current weights as a servable draft (EAGLE names; bf16 unless asked otherwise), and saved
  // in the EAGLE format (bf16).
  DraftModel to_draft(DType dtype = DType::BF16) const;
  void save(const std::string& dir) const { to_draft().save(dir); }

 private:
  void init_params(uint64_t seed, const Tensor* lm_head_rows);
  // prepared: the products' precision and bf16 copies are already those of `o` and the weights.
  TttStats run(const TttSample& s, const TttOptions& o, float grad_scale, bool backward,
               std::vector<Tensor>* logits_out = nullptr, bool prepared = false) const;
  void prepare_linears(const TttOptions& o, bool backward) const;
  StepActs forward_step(const TttSample& s, int64_t k, int64_t lo, int64_t head, const Tensor& state, Tensor& kbuf,
                        Tensor& vbuf) const;
  double score_step(const Tensor& z, const StepTeacher& te, int64_t head, int64_t& correct) const;
  Tensor backward_step(StepActs& a, const StepTeacher& te, int64_t k, int64_t lo, int64_t head, float wk,
                       const Tensor& dnext, int64_t next_lo, const Tensor& kbuf, const Tensor& vbuf, Tensor& dkbuf,
                       Tensor& dvbuf) const;

  DraftConfig cfg_;
  VocabMap vocab_;
  DraftTarget target_;
  ParamStore store_;
  Param *fc_, *embed_norm_, *hidden_norm_, *q_, *k_, *v_, *o_, *post_norm_, *gate_, *up_, *down_, *final_norm_,
      *lm_head_;
  Tensor inv_freq_;
  mutable TttLinears linears_;  // the bf16 copies of the weights, remade by every run() but evaluate(data)'s
};

}  // namespace updraft::train
