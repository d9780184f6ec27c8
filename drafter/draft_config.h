// The EAGLE-3 drafter's architecture, read from a checkpoint's config.json in either format
// (eagle3.md B.1, B.3):
//
//   EAGLE / SpecForge / SGLang ("native"): a Llama config of the single draft layer, plus
//     draft_vocab_size, optional target_hidden_size, eagle_config.eagle_aux_hidden_state_layer_ids
//     (SGLang semantics: "output of layer i", so the Hugging Face hidden_states index is i + 1),
//     and the variant flags norm_before_residual / norm_before_fc / fc_norm (default false).
//     A missing rope_theta means 10000 (the official Llama-3.1 draft config has none).
//   speculators ("speculators_model_type": "eagle3"): transformer_layer_config holds the layer's
//     Llama config; draft_vocab_size, target_hidden_size, eagle_aux_hidden_state_layer_ids
//     (Hugging Face hidden_states indices, used as they are), and the flags, with vLLM's
//     defaults for this format when absent: norm_before_residual true, the others false.
//
// norm_output means different things in the two worlds (eagle3.md F.7): in speculators it feeds
// back the post-norm state (lm_head then applies to it without a second norm), which updraft
// supports as `feed_back_normed`; in SpecForge it only says the final norm precedes lm_head
// (default true), so a native config with norm_output false is refused. updraft's native
// configs spell the speculators behaviour "feed_back_normed_state".
//
// Only Llama-style single-layer drafts with SiLU MLPs are supported; multi-layer drafts,
// Qwen3-style draft layers, attention biases and use_aux_hidden_state=false are refused with an
// Error naming the file and key, never guessed.
#pragma once

#include <string>
#include <vector>

#include "kernels/core/dtype.h"
#include "kernels/ops/rope.h"

namespace updraft {

enum class DraftFormat { Eagle, Speculators };

struct DraftConfig {
  DraftFormat format = DraftFormat::Eagle;
  int64_t hidden_size = 0, target_hidden_size = 0, intermediate_size = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t vocab_size = 0;        // the target's vocabulary (embedding rows)
  int64_t draft_vocab_size = 0;  // lm_head rows
  int64_t max_position_embeddings = 2048;
  float rms_norm_eps = 1e-6f;
  ops::RopeParams rope;
  // Aux layers as Hugging Face hidden_states indices (ascending); empty: the target's default.
  std::vector<int64_t> aux_layers;
  bool norm_before_residual = false;  // residual taken after hidden_norm
  bool norm_before_fc = false;        // one RMSNorm over the 3*Ht features (input_norm.weight)
  bool fc_norm = false;               // three RMSNorms, one per Ht chunk (fc_norm.{0,1,2}.weight)
  bool feed_back_normed = false;      // the next step reads RMSNorm_final(h2), not h2
  int64_t speculative_tokens = 0;     // speculators' proposal length, 0 when unset
  DType dtype = DType::BF16;          // torch_dtype of the checkpoint

  static DraftConfig from_json_text(const std::string& text, const std::string& where);
  static DraftConfig from_file(const std::string& path);
  // The EAGLE/SpecForge config.json that SGLang and vLLM load (architecture
  // LlamaForCausalLMEagle3). Aux layers are written only when they differ from the target's
  // default {2, L/2, L-3} (`target_layers` = L), since the engines read explicit ids
  // differently (eagle3.md F.1); then in SGLang's semantics.
  std::string to_eagle_json(int64_t target_layers) const;
  int64_t fc_in() const { return 3 * target_hidden_size; }
};

}  // namespace updraft
