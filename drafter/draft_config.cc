#include "drafter/draft_config.h"

#include "kernels/io/hf_config.h"

namespace updraft {
namespace {

using hf::Json;

DType torch_dtype(const hf::JsonReader& r) {
  const std::string dt = r.opt<std::string>("torch_dtype", r.opt<std::string>("dtype", "bfloat16"));
  if (dt == "float32")
    return DType::F32;
  if (dt == "float16")
    return DType::F16;
  UPD_REQUIRE(dt == "bfloat16") << r.where << ": torch_dtype \"" << dt
                                << "\" is not supported (float32, bfloat16, float16)";
  return DType::BF16;
}

// The Llama layer settings common to both formats, read from `layer` (the top level of a native
// config, or transformer_layer_config).
void read_layer(const Json& layer, const std::string& where, DraftConfig& c) {
  const hf::JsonReader r{layer, where};
  const std::string mt = r.opt<std::string>("model_type", "llama");
  UPD_REQUIRE(mt == "llama") << where << ": draft layer model_type \"" << mt
                             << "\" is not supported (llama-style draft layers only)";
  c.hidden_size = r.req<int64_t>("hidden_size");
  c.intermediate_size = r.req<int64_t>("intermediate_size");
  c.num_heads = r.req<int64_t>("num_attention_heads");
  c.num_kv_heads = r.opt<int64_t>("num_key_value_heads", c.num_heads);
  UPD_REQUIRE(c.num_heads > 0 && c.num_kv_heads > 0) << where << ": head counts must be positive";
  c.head_dim = r.opt<int64_t>("head_dim", c.hidden_size / c.num_heads);
  c.vocab_size = r.req<int64_t>("vocab_size");
  c.max_position_embeddings = r.opt<int64_t>("max_position_embeddings", 2048);
  c.rms_norm_eps = static_cast<float>(r.opt<double>("rms_norm_eps", 1e-6));
  c.rope = hf::read_rope(layer, where, 10000.0);
  const int64_t layers = r.opt<int64_t>("num_hidden_layers", 1);
  UPD_REQUIRE(layers == 1) << where << ": num_hidden_layers " << layers << " (only single-layer drafts are supported)";
  const std::string act = r.opt<std::string>("hidden_act", "silu");
  UPD_REQUIRE(act == "silu") << where << ": hidden_act \"" << act << "\" is not supported (silu only)";
  UPD_REQUIRE(!r.opt<bool>("attention_bias", false)) << where << ": attention_bias is not supported in drafts";
  UPD_REQUIRE(!r.opt<bool>("mlp_bias", false)) << where << ": mlp_bias is not supported in drafts";
  if (r.has("draft_vocab_size"))
    c.draft_vocab_size = r.get<int64_t>("draft_vocab_size");
  if (r.has("target_hidden_size"))
    c.target_hidden_size = r.get<int64_t>("target_hidden_size");
  c.dtype = torch_dtype(r);
}

std::vector<int64_t> layer_ids(const Json& v, const std::string& where, int64_t shift) {
  UPD_REQUIRE(v.is_array() && !v.empty()) << where << ": eagle_aux_hidden_state_layer_ids must be a list of ids";
  std::vector<int64_t> out;
  for (const auto& e : v) {
    UPD_REQUIRE(e.is_number_integer()) << where << ": eagle_aux_hidden_state_layer_ids must hold integers";
    out.push_back(e.get<int64_t>() + shift);
    UPD_REQUIRE(out.back() >= 0 && (out.size() == 1 || out.back() > out[out.size() - 2]))
        << where << ": eagle_aux_hidden_state_layer_ids must be ascending and non-negative";
  }
  return out;
}

void read_flags(const hf::JsonReader& r, DraftConfig& c, bool speculators) {
  c.norm_before_residual = r.opt<bool>("norm_before_residual", speculators);  // vLLM's default per format
  c.norm_before_fc = r.opt<bool>("norm_before_fc", false);
  c.fc_norm = r.opt<bool>("fc_norm", false);
  UPD_REQUIRE(!(c.norm_before_fc && c.fc_norm)) << r.where << ": norm_before_fc and fc_norm exclude each other";
  if (speculators) {
    c.feed_back_normed = r.opt<bool>("norm_output", false);
  } else {
    UPD_REQUIRE(r.opt<bool>("norm_output", true))
        << r.where << ": norm_output false (lm_head without the final norm) is not supported";
    c.feed_back_normed = r.opt<bool>("feed_back_normed_state", false);
  }
}

}  // namespace

DraftConfig DraftConfig::from_json_text(const std::string& text, const std::string& where) {
  const Json j = hf::parse_object(text, where);
  const hf::JsonReader r{j, where};
  DraftConfig c;
  if (r.has("speculators_model_type")) {
    const std::string t = r.get<std::string>("speculators_model_type");
    UPD_REQUIRE(t == "eagle3") << where << ": speculators_model_type \"" << t << "\" is not eagle3";
    c.format = DraftFormat::Speculators;
    UPD_REQUIRE(j.contains("transformer_layer_config") && j["transformer_layer_config"].is_object())
        << where << ": missing \"transformer_layer_config\"";
    read_layer(j["transformer_layer_config"], where + " (transformer_layer_config)", c);
    if (r.has("torch_dtype") || r.has("dtype"))
      c.dtype = torch_dtype(r);
    if (r.has("draft_vocab_size"))
      c.draft_vocab_size = r.get<int64_t>("draft_vocab_size");
    else if (c.draft_vocab_size == 0)
      c.draft_vocab_size = 32000;  // the format's default
    if (r.has("target_hidden_size"))
      c.target_hidden_size = r.get<int64_t>("target_hidden_size");
    if (r.has("eagle_aux_hidden_state_layer_ids"))
      c.aux_layers = layer_ids(j["eagle_aux_hidden_state_layer_ids"], where, 0);
    read_flags(r, c, /*speculators=*/true);
    if (j.contains("speculators_config") && j["speculators_config"].is_object()) {
      const Json& sc = j["speculators_config"];
      if (sc.contains("proposal_methods") && sc["proposal_methods"].is_array() && !sc["proposal_methods"].empty() &&
          sc["proposal_methods"][0].is_object())
        c.speculative_tokens = sc["proposal_methods"][0].value("speculative_tokens", int64_t{0});
    }
  } else {
    c.format = DraftFormat::Eagle;
    read_layer(j, where, c);
    if (c.draft_vocab_size == 0)
      c.draft_vocab_size = c.vocab_size;  // as vLLM: no draft vocabulary means the full one
    read_flags(r, c, /*speculators=*/false);
    if (j.contains("eagle_config") && j["eagle_config"].is_object()) {
      const Json& ec = j["eagle_config"];
      UPD_REQUIRE(ec.value("use_aux_hidden_state", true))
          << where << ": eagle_config.use_aux_hidden_state false (EAGLE-1 style heads) is not supported";
      if (ec.contains("eagle_aux_hidden_state_layer_ids"))
        c.aux_layers = layer_ids(ec["eagle_aux_hidden_state_layer_ids"], where, 1);
    }
  }
  if (c.target_hidden_size == 0)
    c.target_hidden_size = c.hidden_size;
  UPD_REQUIRE(c.hidden_size > 0 && c.intermediate_size > 0 && c.head_dim > 0 && c.vocab_size > 0 &&
              c.draft_vocab_size > 0 && c.target_hidden_size > 0 && c.max_position_embeddings > 0)
      << where << ": sizes must be positive";
  UPD_REQUIRE(c.draft_vocab_size <= c.vocab_size)
      << where << ": draft_vocab_size " << c.draft_vocab_size << " exceeds vocab_size " << c.vocab_size;
  UPD_REQUIRE(c.num_heads % c.num_kv_heads == 0) << where << ": num_attention_heads " << c.num_heads
                                                 << " is not a multiple of num_key_value_heads " << c.num_kv_heads;
  UPD_REQUIRE(c.head_dim % 2 == 0) << where << ": head_dim " << c.head_dim << " must be even for RoPE";
  UPD_REQUIRE(c.rms_norm_eps > 0) << where << ": rms_norm_eps must be positive";
  UPD_REQUIRE(c.aux_layers.empty() || c.aux_layers.size() == 3)
      << where << ": eagle_aux_hidden_state_layer_ids must name 3 layers (got " << c.aux_layers.size() << ")";
  return c;
}

DraftConfig DraftConfig::from_file(const std::string& path) {
  return from_json_text(hf::read_object_file(path).dump(), path);
}

std::string DraftConfig::to_eagle_json(int64_t target_layers) const {
  Json j;
  j["architectures"] = {"LlamaForCausalLMEagle3"};
  j["model_type"] = "llama";
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["num_hidden_layers"] = 1;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = rms_norm_eps;
  j["max_position_embeddings"] = max_position_embeddings;
  hf::write_rope(j, rope);
  j["vocab_size"] = vocab_size;
  j["draft_vocab_size"] = draft_vocab_size;
  j["target_hidden_size"] = target_hidden_size;
  j["tie_word_embeddings"] = false;
  j["attention_bias"] = false;
  j["torch_dtype"] = dtype == DType::F32 ? "float32" : dtype == DType::F16 ? "float16" : "bfloat16";
  if (norm_before_residual)
    j["norm_before_residual"] = true;
  if (norm_before_fc)
    j["norm_before_fc"] = true;
  if (fc_norm)
    j["fc_norm"] = true;
  if (feed_back_normed)
    j["feed_back_normed_state"] = true;
  const std::vector<int64_t> dflt = {2, target_layers / 2, target_layers - 3};
  if (!aux_layers.empty() && aux_layers != dflt) {
    std::vector<int64_t> ids;
    for (int64_t l : aux_layers)
      ids.push_back(l - 1);  // SGLang: "output of layer id" = hidden_states index id + 1
    j["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", ids}, {"use_aux_hidden_state", true}};
  }
  return j.dump(2);
}

}  // namespace updraft
