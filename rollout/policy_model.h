// The policy (target) model: a Llama-style decoder (Llama 3.x, Qwen2/2.5, Qwen3) running over a
// paged KV cache, with the EAGLE-3 aux hidden-state capture.
//
// Loading: load() reads a Hugging Face directory (config.json + model.safetensors or a sharded
// index); every tensor's name, dtype (f32/bf16/f16) and shape is checked against the config, a
// missing or unexpected tensor is an Error naming it. On the CPU weights stay memory-mapped in
// their stored dtype (math in f32); on CUDA they are converted to bf16 on the device.
//
// forward() runs one batched step over several sequences (SeqStep, kernels/nn/paged_batch.h:
// each appends its tokens' KV entries, with causal or tree-masked attention). It returns, in sequence order, the logits
// (f32) and optionally the final normed hidden state of the rows in `logit_rows`, and optionally the aux states: the
// residual stream entering each aux layer (Hugging Face hidden_states indices, default {2, L/2, L-3}) for every new
// token, aux [T, A, H] in the activation dtype (row-major, so [T, A*H] is the EAGLE-3 concatenation [low | mid |
// high]). The caller must have reserved KV blocks for kv->length + n entries; on return kv->length has advanced by n.
// Token ids outside the vocabulary are an Error raised before anything is written.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "drafter/draft_model.h"
#include "kernels/nn/llama_layer.h"
#include "kernels/nn/paged_batch.h"
#include "rollout/policy_config.h"

namespace updraft {

// Seconds a forward spends per part, added to when ForwardOptions::profile is set (the
// benchmarks' round anatomy; each part timed around its ops, their thread teams included).
struct ForwardProfile {
  double matmul_s = 0;     // q/k/v/o projections with RoPE, the MLP with SiLU, the LM head
  double attention_s = 0;  // KV-cache writes and paged attention
  double total_s = 0;      // the whole forward; the rest is embedding, norms, residuals, copies
  int64_t forwards = 0;
};

struct ForwardOptions {
  bool aux = false;                 // capture aux hidden states of every new token
  bool hidden = false;              // return the final normed hidden state at the logit rows
  std::vector<int64_t> aux_layers;  // which (HF hidden_states indices); empty: the model's
  ForwardProfile* profile = nullptr;
};

struct ForwardOut {
  Tensor logits;  // f32 [R, V]
  Tensor hidden;  // [R, H] (act dtype) when asked
  Tensor aux;     // [T, A, H] (act dtype) when asked
};

struct PolicyOptions {
  Device device = Device::CPU;
};

class PolicyModel {
 public:
  static PolicyModel load(const std::string& dir, const PolicyOptions& opts = {});
  // Builds from named tensors (Hugging Face names) that `get` returns (undefined when absent);
  // `names` lists every tensor available, so unexpected ones are reported.
  static PolicyModel build(const PolicyConfig& cfg, const std::vector<std::string>& names,
                           const std::function<Tensor(const std::string&)>& get, const PolicyOptions& opts,
                           const std::string& where);

  const PolicyConfig& config() const { return cfg_; }
  Device device() const { return device_; }
  DType act_dtype() const { return act_; }
  KvCacheShape kv_shape() const { return {cfg_.num_layers, cfg_.num_kv_heads, cfg_.head_dim, act_, device_}; }
  const std::vector<int64_t>& aux_layers() const { return aux_layers_; }
  // HF hidden_states indices in [0, L), ascending, distinct (Error otherwise).
  void set_aux_layers(const std::vector<int64_t>& layers);
  void check_aux_layers(const std::vector<int64_t>& layers) const;
  const Tensor& embedding_table() const { return embed_; }
  const Tensor& lm_head() const { return lm_head_.w; }
  // What an EAGLE-3 drafter needs to serve this policy (its embedding is shared).
  DraftTarget draft_target() const {
    return {cfg_.hidden_size, cfg_.vocab_size, cfg_.num_layers, embed_, act_, device_};
  }

  ForwardOut forward(KvCache& cache, std::vector<SeqStep>& seqs, const ForwardOptions& opts = {}) const;

 private:
  struct LayerScratch;
  void layer_forward(int64_t l, KvCache& cache, const nn::PagedBatch& pb, LayerScratch& s,
                     ForwardProfile* prof) const;

  PolicyConfig cfg_;
  Device device_ = Device::CPU;
  DType act_ = DType::F32;
  Tensor embed_, final_norm_, inv_freq_;
  ops::LinearWeight lm_head_;  // the embedding when tied
  std::vector<nn::DecoderLayerWeights> layers_;
  std::vector<int64_t> aux_layers_;
};

}  // namespace updraft
