// The EAGLE-3 draft model (eagle3.md A): one Llama-style decoder layer whose q/k/v read the 2H
// concatenation [RMSNorm_in(embedding(token)) | RMSNorm_hid(hidden)], over a paged KV cache of
// its own (one layer).
//
// forward() takes, per row, a token (target id) and a hidden input:
//   - target features [T, 3*Ht] = the policy's aux states [low | mid | high] at position p, paired
//     with the token x_{p+1}: fc (after input_norm / fc_norm when configured) makes them H wide;
//   - or the draft's own fed-back states [T, H] (the pre-norm output of an earlier step).
// Then res = hidden (or RMSNorm_hid(hidden) with norm_before_residual); h1 = res + o(attn);
// h2 = h1 + mlp(RMSNorm_post(h1)). It returns for every row the state fed back at the next step
// (h2, or RMSNorm_final(h2) with feed_back_normed) and, for the rows asked, the draft-vocabulary
// logits lm_head(RMSNorm_final(h2)) in f32. With states_at_logit_rows, where every sequence's
// logit rows are its last rows and no step has a tree mask, only those rows go past the KV writes
// (attention, o, the MLP): the pass that absorbs committed pairs needs every row's keys and values
// but only the last row's state, and its other rows' MLP was most of its cost. out.state is then
// [R, H], in the logits' order; each row's values are bitwise those of the full pass (every op
// computes a row the same whatever rows are beside it). Otherwise the flag changes nothing.
// Draft id j stands for target id vocab().to_target(j). The token embedding is the policy's
// table, shared and never modified. RoPE comes from the draft config; the caller gives each row
// its position (pair (h_p, x_{p+1}) at p, draft step k at p + k).
//
// Loading checks the draft against the policy it serves (hidden sizes, vocabulary, aux layers,
// d2t range and order) and every tensor's name, dtype and shape; a mismatch is an Error that
// names the file and the value. Both checkpoint formats load (drafter/draft_config.h); save()
// writes the EAGLE/SpecForge format (config.json, model.safetensors with fc, midlayer.*, norm,
// lm_head, d2t, t2d), each file written to a temporary name, fsynced and renamed.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "drafter/draft_config.h"
#include "drafter/vocab_map.h"
#include "kernels/nn/llama_layer.h"
#include "kernels/nn/paged_batch.h"

namespace updraft {

// The precision of every drafter's serving weights in this process, set once at startup before
// any drafter is built (`updraft --draft-weights`): kAsStored computes with the checkpoint's
// weights (bf16 products; AMX panels where the CPU kernel is AMX); kInt8 quantizes each linear
// layer's weights per row (ops::prepare_linear_int8: half the bytes a draft step streams,
// products within about 1% of the bf16 ones; CPU only: building a CUDA drafter then fails);
// kAuto (the CLI's default) is kInt8 for a drafter on a CPU with AMX-INT8 tiles or AVX512-VNNI
// (ops::cpu_has_int8_tiles() / cpu_has_int8_vectors(): both measured faster than bf16 there,
// docs/benchmarks.md "Session 36"), else kAsStored. The library's default is kAsStored.
// Speculation stays lossless either way: the drafter only proposes.
enum class DraftWeights { kAsStored, kInt8, kAuto };
void set_draft_weights(DraftWeights w);
DraftWeights draft_weights();
const char* draft_weights_name(DraftWeights w);             // "bf16" (as stored), "int8", "auto": the CLI's values
// Those names; Error for another, or for int8 on a CPU with neither AMX-INT8 tiles nor AVX512-VNNI.
DraftWeights parse_draft_weights(const std::string& name);
// What a drafter built now for a policy on `d` computes with: kAsStored or kInt8.
DraftWeights resolved_draft_weights(Device d);

// What the drafter needs from the policy it serves.
struct DraftTarget {
  int64_t hidden_size = 0, vocab_size = 0, num_layers = 0;
  Tensor embedding;  // [V, H], the policy's own table (its device and dtype)
  DType act_dtype = DType::F32;
  Device device = Device::CPU;
};

struct DraftOut {
  Tensor state;   // [T, H] act dtype: the state each row feeds back
  Tensor logits;  // f32 [R, Vd] at the asked rows, in sequence order
};

class DraftModel {
 public:
  static DraftModel load(const std::string& dir, const DraftTarget& target);
  // From named tensors (either format's names); `names` lists all available ones.
  static DraftModel build(const DraftConfig& cfg, const std::vector<std::string>& names,
                          const std::function<Tensor(const std::string&)>& get, const DraftTarget& target,
                          const std::string& where);
  void save(const std::string& dir) const;
  // The same weights serving another version of the policy (its embedding table, device and
  // activation dtype): what a worker does when RL replaces the policy under a drafter. Error
  // when the new policy's sizes do not fit the draft. When only the embedding table differs (same
  // sizes, device, activation dtype and weight precision) the prepared weights are shared with
  // this drafter, not prepared again; otherwise they are rebuilt from tensors().
  DraftModel rebind(const DraftTarget& target) const;
  // Whether this drafter's prepared weights and tables are the same memory as o's (what rebind
  // shares; a build makes its own, even where its weights alias the stored tensors).
  bool shares_prepared_weights(const DraftModel& o) const;

  const DraftConfig& config() const { return cfg_; }
  // The precision its linear layers were prepared in: kAsStored or kInt8 (draft_weights() when it
  // was built, resolved).
  DraftWeights weights() const { return weights_; }
  const VocabMap& vocab() const { return vocab_; }
  // The policy's aux layers (HF hidden_states indices) this draft reads.
  const std::vector<int64_t>& aux_layers() const { return aux_layers_; }
  Device device() const { return target_.device; }
  DType act_dtype() const { return target_.act_dtype; }
  KvCacheShape kv_shape() const { return {1, cfg_.num_kv_heads, cfg_.head_dim, target_.act_dtype, target_.device}; }
  // The EAGLE-format tensors, as stored (checkpoint dtype, CPU) — what save() writes.
  const std::vector<std::pair<std::string, Tensor>>& tensors() const { return stored_; }

  DraftOut forward(KvCache& cache, std::vector<SeqStep>& steps, const Tensor& hidden,
                   bool states_at_logit_rows = false) const;

 private:
  DraftConfig cfg_;
  DraftWeights weights_ = DraftWeights::kAsStored;
  DraftTarget target_;
  VocabMap vocab_;
  std::vector<int64_t> aux_layers_;
  std::vector<std::pair<std::string, Tensor>> stored_;
  ops::LinearWeight fc_;  // [H, 3Ht], input norm weights folded into its columns when configured
  Tensor unit_fc_norm;  // ones for the folded norms ([3Ht] or [Ht]), undefined without them
  Tensor embed_norm_, hidden_norm_, final_norm_, inv_freq_;
  ops::LinearWeight lm_head_;
  nn::DecoderLayerWeights layer_;  // input_norm unused (embed_norm_/hidden_norm_ instead)

  // forward() from attention on, for the rows of q (every row of pb, or with `compact` only its
  // logit rows, in order), res their residual inputs: the states, and the logits at pb's logit rows.
  DraftOut rest_of_layer(const ops::PagedKv& kv, const nn::PagedBatch& pb, const Tensor& q, const Tensor& res,
                         const Tensor& q_start, bool compact) const;
};

}  // namespace updraft
