// A trainable Llama-style decoder (the built-in policy): f32 master weights on the CPU, an
// explicit forward that keeps the activations the backward needs, and the backward itself
// (kernels/ops/backward.h). Architecture: Llama (no biases, no q/k norm), SiLU-gated MLP,
// RMSNorm, NeoX RoPE from the config, tied or untied embeddings.
//
// forward_backward() takes B sequences of T+1 tokens (row-major [B, T+1]); position t of each
// sequence predicts token t+1. Attention is causal within each sequence. `target_mask`
// (optional, [B, T], 1 = in the loss) drops targets such as prompt tokens or padding. The
// loss is the mean next-token cross-entropy over the kept targets; its gradient, times
// `grad_scale` (1/micro-batches for accumulation), is ADDED to the parameters' grads.
//
// hf_tensors() gives the weights under Hugging Face names in `dtype`, so the trained model is
// saved as a checkpoint the policy runtime (rollout/policy_model.h) and transformers load.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rollout/policy_config.h"
#include "trainer/init.h"
#include "trainer/params.h"

namespace updraft::train {

struct LmLoss {
  double loss = 0;      // mean cross-entropy (nats) over counted targets
  int64_t targets = 0;  // targets counted
  int64_t correct = 0;  // argmax == target among them
};

class TrainableLlama {
 public:
  // Fresh weights: linear ~ N(0, 0.02) (output projections / sqrt(2L)), embedding ~ N(0, 0.02),
  // norms 1; deterministic in seed. Requires arch Llama without biases or q/k norm.
  TrainableLlama(const PolicyConfig& cfg, uint64_t seed);

  // Continues from a Hugging Face directory (config.json + safetensors, any float dtype; the
  // f32 master weights are the stored values converted). Error when a tensor is missing, has
  // the wrong shape, or the checkpoint holds tensors this architecture does not use.
  static TrainableLlama load_hf(const std::string& dir);

  const PolicyConfig& config() const { return cfg_; }
  TrainableLlama(const TrainableLlama&) = delete;
  TrainableLlama& operator=(const TrainableLlama&) = delete;
  TrainableLlama(TrainableLlama&&) = default;

  ParamSet& params() { return store_.set(); }
  const ParamSet& params() const { return store_.set(); }

  LmLoss forward_backward(const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                          const std::vector<uint8_t>* target_mask, float grad_scale);
  // Policy-gradient form: the loss is Σ_r weights[r] · CE_r over the B*T targets (any sign; 0
  // drops a target), its gradient times grad_scale ADDED to the grads; no normalisation (the
  // caller's weights carry it). LmLoss reports the plain mean CE over targets with weight != 0.
  LmLoss weighted_backward(const std::vector<int32_t>& tokens, int64_t B, int64_t T, const std::vector<float>& weights,
                           float grad_scale);
  // Loss only (no activations kept, no gradients).
  LmLoss evaluate(const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                  const std::vector<uint8_t>* target_mask) const;

  std::map<std::string, Tensor> hf_tensors(DType dtype) const;
  // Writes config.json and model.safetensors (atomically, each file) into dir.
  void save_hf(const std::string& dir, DType dtype) const;

 private:
  struct Layer {
    Param *input_norm, *post_norm, *q, *k, *v, *o, *gate, *up, *down;
  };
  LmLoss run(const std::vector<int32_t>& tokens, int64_t B, int64_t T, const std::vector<uint8_t>* target_mask,
             const std::vector<float>* weights, float grad_scale, bool backward) const;

  PolicyConfig cfg_;
  ParamStore store_;
  Param *embed_ = nullptr, *final_norm_ = nullptr, *lm_head_ = nullptr;  // lm_head_ == embed_ when tied
  std::vector<Layer> layers_;
  Tensor inv_freq_;
};

}  // namespace updraft::train
