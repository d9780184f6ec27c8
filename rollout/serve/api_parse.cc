#include "rollout/serve/api_parse.h"

#include <algorithm>
#include <climits>

#include "kernels/core/error.h"

namespace updraft::api {

using nlohmann::json;

http::Response json_response(int status, const json& j) {
  http::Response r;
  r.status = status;
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

std::string reason(const std::string& what) {
  const size_t sep = what.find(": ");
  if (sep == std::string::npos)
    return what;
  const std::string head = what.substr(0, sep);
  const size_t colon = head.rfind(':');
  if (colon == std::string::npos || colon + 1 == head.size() || head.find(' ') != std::string::npos)
    return what;
  for (size_t i = colon + 1; i < head.size(); ++i)
    if (head[i] < '0' || head[i] > '9')
      return what;
  return what.substr(sep + 2);
}

http::Response error(int status, const std::string& why) {
  return json_response(status,
                       {{"error", {{"message", reason(why)}, {"type", http::error_type(status)}, {"code", status}}}});
}

void check_keys(const json& obj, const std::set<std::string>& allowed, const std::string& where) {
  UPD_REQUIRE(obj.is_object()) << where << " must be a JSON object";
  for (const auto& [k, v] : obj.items())
    UPD_REQUIRE(allowed.count(k)) << where << "." << k << " is not supported (refused rather than ignored)";
}

namespace {

bool neutral(const json& v, Neutral n) {
  if (v.is_null() || n == Neutral::kAny)
    return true;
  if (v.is_array() && n != Neutral::kEmpty)  // one value per prompt
    return std::all_of(v.begin(), v.end(), [n](const json& e) { return !e.is_array() && neutral(e, n); });
  switch (n) {
    case Neutral::kFalse:
      return v.is_boolean() && !v.get<bool>();
    case Neutral::kTrue:
      return v.is_boolean() && v.get<bool>();
    case Neutral::kZero:
      return v.is_number() && v.get<double>() == 0;
    case Neutral::kOne:
      return v.is_number() && v.get<double>() == 1;
    case Neutral::kMinusOne:
      return v.is_number() && v.get<double>() == -1;
    case Neutral::kEmpty:
      return v.is_string() ? v.get_ref<const std::string&>().empty() : v.is_structured() && v.empty();
    default:
      return false;
  }
}

const char* neutral_text(Neutral n) {
  switch (n) {
    case Neutral::kFalse:
      return "false or null";
    case Neutral::kTrue:
      return "true or null";
    case Neutral::kZero:
      return "0 or null";
    case Neutral::kOne:
      return "1 or null";
    case Neutral::kMinusOne:
      return "-1 or null";
    case Neutral::kEmpty:
      return "null or empty";
    default:
      return "null";
  }
}

}  // namespace

void check_fields(const json& obj, const std::set<std::string>& implemented, const FieldRules& rules,
                  const std::string& where) {
  UPD_REQUIRE(obj.is_object()) << where << " must be a JSON object";
  for (const auto& [k, v] : obj.items()) {
    if (implemented.count(k))
      continue;
    const auto rule = rules.find(k);
    UPD_REQUIRE(rule != rules.end()) << where << "." << k << " is not supported (refused rather than ignored)";
    std::string shown = v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (shown.size() > 40)
      shown = shown.substr(0, 40) + "...";
    UPD_REQUIRE(neutral(v, rule->second)) << where << "." << k << " is not supported at " << shown
                                          << " (accepted only as " << neutral_text(rule->second) << ")";
  }
}

bool has(const json& obj, const char* key) {
  return obj.contains(key) && !obj[key].is_null();
}

bool parse_body(const std::string& body, json* out, std::string* why) {
  struct TooLarge {
    std::string what;
  };
  size_t containers = 0, values = 0;
  const json::parser_callback_t bound = [&](int depth, json::parse_event_t event, json&) {
    if (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) {
      if (depth >= kMaxJsonDepth)
        throw TooLarge{"nested deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
      if (++containers > kMaxJsonContainers)
        throw TooLarge{"more than " + std::to_string(kMaxJsonContainers) + " arrays and objects"};
    } else if (event == json::parse_event_t::value && ++values > kMaxJsonValues) {
      throw TooLarge{"more than " + std::to_string(kMaxJsonValues) + " values"};
    }
    return true;
  };
  try {
    *out = json::parse(body, bound, false);
  } catch (const TooLarge& e) {
    *why = "the body is too large in structure: " + e.what;
    return false;
  }
  if (out->is_discarded()) {
    *why = "the body must be a JSON object";
    return false;
  }
  return true;
}

int64_t int_value(const json& v, int64_t lo, int64_t hi, const std::string& name) {
  bool ok = v.is_number_integer();
  if (ok && v.is_number_unsigned())  // beyond int64's range: out of every range we take
    ok = v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX);
  const int64_t x = ok ? v.get<int64_t>() : 0;
  UPD_REQUIRE(ok && x >= lo && x <= hi) << name << " must be an integer in [" << lo << ", " << hi << "] (got "
                                        << v.dump() << ")";
  return x;
}

int64_t int_of(const json& obj, const char* key, int64_t lo, int64_t hi, const std::string& where) {
  return int_value(obj.at(key), lo, hi, where + "." + key);
}

uint64_t seed_of(const json& obj, const char* key, const std::string& where) {
  const json& v = obj.at(key);
  UPD_REQUIRE(v.is_number_integer()) << where << "." << key << " must be an integer (got " << v.dump() << ")";
  return v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
}

double number_of(const json& obj, const char* key, const std::string& where) {
  const json& v = obj.at(key);
  UPD_REQUIRE(v.is_number()) << where << "." << key << " must be a number (got " << v.dump() << ")";
  return v.get<double>();
}

bool bool_or(const json& obj, const char* key, bool def) {
  if (!has(obj, key))
    return def;
  UPD_REQUIRE(obj[key].is_boolean()) << key << " must be true or false (got " << obj[key].dump() << ")";
  return obj[key].get<bool>();
}

std::string string_or(const json& obj, const char* key, const std::string& def) {
  if (!has(obj, key))
    return def;
  UPD_REQUIRE(obj[key].is_string()) << key << " must be a string (got " << obj[key].dump() << ")";
  return obj[key].get<std::string>();
}

const FieldRules& generate_rules() {
  using N = Neutral;
  static const FieldRules rules = {// Bookkeeping SGLang's router and frameworks send; none changes the tokens.
                                   {"model", N::kAny},
                                   {"log_metrics", N::kAny},
                                   {"no_logs", N::kAny},
                                   {"custom_labels", N::kAny},
                                   {"return_hidden_states", N::kFalse},
                                   {"return_routed_experts", N::kFalse},
                                   {"background", N::kFalse},
                                   {"return_bytes", N::kFalse},
                                   {"return_entropy", N::kFalse},
                                   {"return_prompt_token_ids", N::kFalse},
                                   {"token_ids_logprob", N::kEmpty},
                                   {"session_id", N::kNull},
                                   {"session_params", N::kNull},
                                   {"input_embeds", N::kNull},
                                   {"image_data", N::kNull},
                                   {"video_data", N::kNull},
                                   {"audio_data", N::kNull},
                                   {"modalities", N::kNull},
                                   {"lora_path", N::kNull},
                                   {"lora_id", N::kNull},
                                   {"custom_logit_processor", N::kNull},
                                   {"bootstrap_host", N::kNull},
                                   {"bootstrap_port", N::kNull},
                                   {"bootstrap_room", N::kNull},
                                   {"bootstrap_pair_key", N::kNull},
                                   {"routed_dp_rank", N::kNull},
                                   {"data_parallel_rank", N::kNull},
                                   {"extra_key", N::kNull},
                                   {"cache_salt", N::kNull},
                                   {"priority", N::kNull}};
  return rules;
}

const FieldRules& sampling_rules() {
  using N = Neutral;
  static const FieldRules rules = {{"stop_regex", N::kEmpty},
                                   {"logit_bias", N::kEmpty},
                                   {"json_schema", N::kNull},
                                   {"regex", N::kNull},
                                   {"ebnf", N::kNull},
                                   {"structural_tag", N::kNull},
                                   {"custom_params", N::kNull},
                                   {"stream_interval", N::kAny}};  // how often a stream sends; ours sends every engine step
  return rules;
}

const FieldRules& completions_rules() {
  using N = Neutral;
  static const FieldRules rules = {{"model", N::kAny},
                                   {"user", N::kAny},
                                   {"best_of", N::kOne},
                                   {"echo", N::kFalse},
                                   {"suffix", N::kEmpty},
                                   {"logit_bias", N::kEmpty}};
  return rules;
}

const FieldRules& chat_rules() {
  using N = Neutral;
  static const FieldRules rules = {{"model", N::kAny},
                                   {"user", N::kAny},
                                   {"metadata", N::kAny},
                                   {"service_tier", N::kAny},
                                   {"parallel_tool_calls", N::kAny},  // meaningful with tools only
                                   {"store", N::kFalse},
                                   {"logit_bias", N::kEmpty},
                                   {"tools", N::kEmpty},
                                   {"tool_choice", N::kNull},
                                   {"functions", N::kEmpty},
                                   {"function_call", N::kNull},
                                   {"response_format", N::kNull},
                                   {"audio", N::kNull},
                                   {"modalities", N::kNull},
                                   {"prediction", N::kNull},
                                   {"reasoning_effort", N::kNull},
                                   {"web_search_options", N::kNull},
                                   {"echo", N::kFalse},
                                   {"continue_final_message", N::kFalse},
                                   {"chat_template_kwargs", N::kNull},
                                   {"ignore_eos", N::kFalse},
                                   {"min_tokens", N::kZero},
                                   {"stop_token_ids", N::kEmpty},
                                   {"skip_special_tokens", N::kTrue}};
  return rules;
}

std::vector<int32_t> ids_of(const json& a, const std::string& where) {
  UPD_REQUIRE(a.is_array()) << where << " must be a list of token ids";
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (const json& v : a) {
    UPD_REQUIRE(v.is_number_integer() && v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX)
        << where << " must hold integer token ids";
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

bool is_id_list(const json& a) {
  return a.is_array() && (a.empty() || a[0].is_number());
}

SamplingParams sglang_params(const json& sp, TextOptions* text) {
  static const std::set<std::string> implemented = {
      "temperature", "top_p",         "top_k", "max_new_tokens",      "stop_token_ids",
      "ignore_eos",  "sampling_seed", "seed",  "skip_special_tokens", "spaces_between_special_tokens",
      "no_stop_trim", "stop", "min_new_tokens", "min_p", "frequency_penalty", "presence_penalty",
      "repetition_penalty", "n"};
  SamplingParams p;
  p.max_new_tokens = 128;
  *text = TextOptions{};
  if (sp.is_null())
    return p;
  check_fields(sp, implemented, sampling_rules(), "sampling_params");
  const std::string where = "sampling_params";
  if (has(sp, "temperature"))
    p.temperature = static_cast<float>(number_of(sp, "temperature", where));
  if (has(sp, "top_p"))
    p.top_p = static_cast<float>(number_of(sp, "top_p", where));
  if (has(sp, "top_k"))  // -1 and 0: off
    p.top_k = static_cast<int32_t>(std::max<int64_t>(int_of(sp, "top_k", -1, INT32_MAX, where), 0));
  if (has(sp, "max_new_tokens"))
    p.max_new_tokens = int_of(sp, "max_new_tokens", 1, INT64_MAX, where);
  if (has(sp, "stop_token_ids"))
    p.stop_token_ids = ids_of(sp["stop_token_ids"], "sampling_params.stop_token_ids");
  if (has(sp, "min_new_tokens"))
    p.min_new_tokens = int_of(sp, "min_new_tokens", 0, INT64_MAX, where);
  if (has(sp, "min_p"))
    p.min_p = static_cast<float>(number_of(sp, "min_p", where));
  if (has(sp, "frequency_penalty"))
    p.frequency_penalty = static_cast<float>(number_of(sp, "frequency_penalty", where));
  if (has(sp, "presence_penalty"))
    p.presence_penalty = static_cast<float>(number_of(sp, "presence_penalty", where));
  if (has(sp, "repetition_penalty"))
    p.repetition_penalty = static_cast<float>(number_of(sp, "repetition_penalty", where));
  text->stop = stop_strings_of(sp, where, 64);
  if (has(sp, "n"))
    text->n = int_of(sp, "n", 1, kMaxN, where);
  if (has(sp, "ignore_eos"))
    p.ignore_eos = sp["ignore_eos"].get<bool>();
  for (const char* k : {"sampling_seed", "seed"})
    if (has(sp, k)) {
      p.has_seed = true;
      p.seed = seed_of(sp, k, where);
    }
  if (has(sp, "skip_special_tokens"))
    text->skip_special = sp["skip_special_tokens"].get<bool>();
  if (has(sp, "no_stop_trim"))
    text->no_stop_trim = sp["no_stop_trim"].get<bool>();
  if (has(sp, "spaces_between_special_tokens"))
    (void)sp["spaces_between_special_tokens"].get<bool>();  // checked: a fast tokenizer's decode ignores it too
  return p;
}

std::vector<std::string> stop_strings_of(const json& obj, const std::string& where, size_t max) {
  if (!has(obj, "stop"))
    return {};
  const json& v = obj["stop"];
  if (v.is_string())  // "" is the neutral value
    return v.get<std::string>().empty() ? std::vector<std::string>{} : std::vector<std::string>{v.get<std::string>()};
  UPD_REQUIRE(v.is_array() && v.size() <= max)
      << where << ".stop must be a string or a list of at most " << max << " strings";
  std::vector<std::string> out;
  for (const json& s : v) {
    UPD_REQUIRE(s.is_string() && !s.get<std::string>().empty()) << where << ".stop must hold non-empty strings";
    out.push_back(s.get<std::string>());
  }
  return out;
}

std::vector<std::string> rids_of(const json& body, size_t n, bool batch, std::string* group) {
  std::vector<std::string> rids(n);
  group->clear();
  if (!has(body, "rid"))
    return rids;
  const json& rid = body["rid"];
  if (rid.is_string()) {
    if (batch)
      *group = rid.get<std::string>();
    for (size_t i = 0; i < n; ++i)
      rids[i] = batch ? rid.get<std::string>() + "-" + std::to_string(i) : rid.get<std::string>();
    return rids;
  }
  UPD_REQUIRE(rid.is_array() && rid.size() == n)
      << "rid must be a string or a list of one string per prompt (" << n << ")";
  for (size_t i = 0; i < n; ++i) {
    UPD_REQUIRE(rid[i].is_string()) << "rid[" << i << "] must be a string";
    rids[i] = rid[i].get<std::string>();
  }
  return rids;
}

bool include_usage(const json& body) {
  if (!has(body, "stream_options"))
    return false;
  const json& o = body["stream_options"];
  UPD_REQUIRE(o.is_object()) << "stream_options must be an object";
  check_keys(o, {"include_usage", "continuous_usage_stats"}, "stream_options");
  UPD_REQUIRE(!bool_or(o, "continuous_usage_stats", false)) << "stream_options.continuous_usage_stats is not supported";
  UPD_REQUIRE(bool_or(body, "stream", false) || !bool_or(o, "include_usage", false))
      << "stream_options needs stream: true";
  return bool_or(o, "include_usage", false);
}

}  // namespace updraft::api
