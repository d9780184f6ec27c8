#include "rollout/policy_config.h"

#include <fstream>
#include <sstream>

#include "kernels/io/hf_config.h"

namespace updraft {
using hf::Json;

const char* arch_name(PolicyArch a) {
  switch (a) {
    case PolicyArch::Llama:
      return "LlamaForCausalLM";
    case PolicyArch::Qwen2:
      return "Qwen2ForCausalLM";
    case PolicyArch::Qwen3:
      return "Qwen3ForCausalLM";
  }
  return "?";
}

PolicyConfig PolicyConfig::from_json_text(const std::string& text, const std::string& where) {
  const Json j = hf::parse_object(text, where);
  const hf::JsonReader r{j, where};
  PolicyConfig c;
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch = j["architectures"][0].get<std::string>();
  else
    arch = r.opt<std::string>("model_type", "");
  if (arch == "LlamaForCausalLM" || arch == "llama")
    c.arch = PolicyArch::Llama;
  else if (arch == "Qwen2ForCausalLM" || arch == "qwen2")
    c.arch = PolicyArch::Qwen2;
  else if (arch == "Qwen3ForCausalLM" || arch == "qwen3")
    c.arch = PolicyArch::Qwen3;
  else
    UPD_FAIL() << where << ": architecture \"" << arch
               << "\" is not supported (supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)";

  c.vocab_size = r.req<int64_t>("vocab_size");
  c.hidden_size = r.req<int64_t>("hidden_size");
  c.intermediate_size = r.req<int64_t>("intermediate_size");
  c.num_layers = r.req<int64_t>("num_hidden_layers");
  c.num_heads = r.req<int64_t>("num_attention_heads");
  c.num_kv_heads = r.opt<int64_t>("num_key_value_heads", c.num_heads);
  UPD_REQUIRE(c.num_heads > 0) << where << ": num_attention_heads must be positive";
  c.head_dim = r.opt<int64_t>("head_dim", c.hidden_size / c.num_heads);
  c.max_position_embeddings = r.req<int64_t>("max_position_embeddings");
  c.rms_norm_eps = static_cast<float>(r.opt<double>("rms_norm_eps", 1e-6));
  c.tie_word_embeddings = r.opt<bool>("tie_word_embeddings", false);
  c.qk_norm = c.arch == PolicyArch::Qwen3;
  c.attention_bias = c.arch == PolicyArch::Qwen2 ? true : r.opt<bool>("attention_bias", false);
  UPD_REQUIRE(c.vocab_size > 0 && c.hidden_size > 0 && c.intermediate_size > 0 && c.num_layers > 0 &&
              c.num_kv_heads > 0 && c.head_dim > 0 && c.max_position_embeddings > 0)
      << where << ": sizes must be positive";
  UPD_REQUIRE(c.num_heads % c.num_kv_heads == 0) << where << ": num_attention_heads " << c.num_heads
                                                 << " is not a multiple of num_key_value_heads " << c.num_kv_heads;
  UPD_REQUIRE(c.head_dim % 2 == 0) << where << ": head_dim " << c.head_dim << " must be even for RoPE";
  UPD_REQUIRE(c.rms_norm_eps > 0) << where << ": rms_norm_eps must be positive";
  const std::string act = r.opt<std::string>("hidden_act", "silu");
  UPD_REQUIRE(act == "silu") << where << ": hidden_act \"" << act << "\" is not supported (silu only)";
  UPD_REQUIRE(!r.opt<bool>("mlp_bias", false)) << where << ": mlp_bias is not supported";
  UPD_REQUIRE(!r.opt<bool>("use_sliding_window", false)) << where << ": sliding-window attention is not supported";
  c.rope = hf::read_rope(j, where);
  c.eos_token_ids = hf::token_ids(j.value("eos_token_id", Json()), where, "eos_token_id");
  auto bos = hf::token_ids(j.value("bos_token_id", Json()), where, "bos_token_id");
  c.bos_token_id = bos.empty() ? -1 : bos[0];
  std::string dt = r.opt<std::string>("torch_dtype", r.opt<std::string>("dtype", "bfloat16"));
  if (dt == "float32")
    c.dtype = DType::F32;
  else if (dt == "float16")
    c.dtype = DType::F16;
  else if (dt == "bfloat16")
    c.dtype = DType::BF16;
  else
    UPD_FAIL() << where << ": torch_dtype \"" << dt << "\" is not supported (float32, bfloat16, float16)";
  for (int32_t e : c.eos_token_ids)
    UPD_REQUIRE(e >= 0 && e < c.vocab_size) << where << ": eos_token_id " << e << " outside the vocabulary";
  return c;
}

PolicyConfig PolicyConfig::from_file(const std::string& path) {
  const Json j = hf::read_object_file(path);
  return from_json_text(j.dump(), path);
}

std::string PolicyConfig::to_json() const {
  Json j;
  j["architectures"] = {arch_name(arch)};
  j["model_type"] = arch == PolicyArch::Llama ? "llama" : arch == PolicyArch::Qwen2 ? "qwen2" : "qwen3";
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_layers;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  hf::write_rope(j, rope);
  j["tie_word_embeddings"] = tie_word_embeddings;
  if (arch == PolicyArch::Llama)
    j["attention_bias"] = attention_bias;
  j["hidden_act"] = "silu";
  if (!eos_token_ids.empty())
    j["eos_token_id"] = eos_token_ids.size() == 1 ? Json(eos_token_ids[0]) : Json(eos_token_ids);
  if (bos_token_id >= 0)
    j["bos_token_id"] = bos_token_id;
  j["torch_dtype"] = dtype == DType::F32 ? "float32" : dtype == DType::F16 ? "float16" : "bfloat16";
  return j.dump(2);
}

std::vector<int64_t> PolicyConfig::default_aux_layers() const {
  return {2, num_layers / 2, num_layers - 3};
}

int64_t PolicyConfig::weight_bytes(DType wd) const {
  const int64_t H = hidden_size, I = intermediate_size, qd = num_heads * head_dim, kvd = num_kv_heads * head_dim;
  int64_t per_layer = H * qd * 2 + H * kvd * 2 + 3 * H * I + 2 * H;
  if (qk_norm)
    per_layer += 2 * head_dim;
  if (attention_bias)
    per_layer += qd + 2 * kvd;
  const int64_t total = num_layers * per_layer + vocab_size * H * (tie_word_embeddings ? 1 : 2) + H;
  return total * static_cast<int64_t>(dtype_size(wd));
}

void check_successor(const PolicyConfig& next, const PolicyConfig& serving) {
  auto same = [](const char* what, int64_t a, int64_t b) {
    UPD_REQUIRE(a == b) << "policy: its " << what << " " << a << " differs from the serving policy's " << b
                        << " (a new architecture needs a new worker and drafter)";
  };
  same("hidden size", next.hidden_size, serving.hidden_size);
  same("vocabulary", next.vocab_size, serving.vocab_size);
  same("layer count", next.num_layers, serving.num_layers);
}

}  // namespace updraft
