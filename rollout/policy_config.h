// The policy's architecture, read from a Hugging Face config.json.
//
// Supported: LlamaForCausalLM (Llama 2/3.x, with "llama3" or "linear" RoPE scaling),
// Qwen2ForCausalLM (Qwen2/2.5: q/k/v biases), Qwen3ForCausalLM (per-head q/k RMSNorm). Any other
// architecture, or a feature we do not implement (sliding windows, MLP biases, activations other
// than SiLU, other RoPE scalings), is an Error naming the file and the value.
//
// Both spellings of the RoPE settings are accepted: top-level rope_theta/rope_scaling
// (transformers 4.x) and rope_parameters (transformers 5), where a missing theta is an error
// rather than a silent 10000 (eagle3.md F.4).
#pragma once

#include <string>
#include <vector>

#include "kernels/core/dtype.h"
#include "kernels/ops/rope.h"

namespace updraft {

enum class PolicyArch { Llama, Qwen2, Qwen3 };
const char* arch_name(PolicyArch a);

struct PolicyConfig {
  PolicyArch arch = PolicyArch::Llama;
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  ops::RopeParams rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v (and for Llama, o) biases
  bool qk_norm = false;         // Qwen3
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;
  DType dtype = DType::BF16;  // torch_dtype of the checkpoint

  static PolicyConfig from_json_text(const std::string& text, const std::string& where);
  static PolicyConfig from_file(const std::string& path);
  std::string to_json() const;  // round-trips through from_json_text (for built models)

  // EAGLE-3 default aux capture: HF hidden_states indices {2, L/2, L-3} (eagle3.md A.2).
  std::vector<int64_t> default_aux_layers() const;
  // Bytes of all weights at `weight_dtype`.
  int64_t weight_bytes(DType weight_dtype) const;
};

// A later version of a served policy (RL updates) must keep the sizes its drafters and caches
// were built for: hidden size, vocabulary and layer count. Error naming the first difference.
void check_successor(const PolicyConfig& next, const PolicyConfig& serving);

}  // namespace updraft
