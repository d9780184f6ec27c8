// Request parsing and response helpers shared by the rollout service's routes
// (rollout/serve/rollout_service.h): SGLang's and OpenAI's JSON fields to GenRequests, error
// bodies, and reasons without our source locations.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "rollout/engine/request.h"
#include "rollout/serve/http.h"

namespace updraft::api {

http::Response json_response(int status, const nlohmann::json& j);
// An Error's message without the source location the error macros put first ("x.cc:12: "): an
// API client needs the reason, not our file names.
std::string reason(const std::string& what);
// {"error": {"message": why, "type": ..., "code": status}}: OpenAI's error shape, which SGLang's
// routes share, so both APIs' clients show the reason.
http::Response error(int status, const std::string& why);

// A request body as JSON, bounded in structure as well as in bytes (the HTTP limits cap the
// bytes; a body small in bytes can still be huge in structure, e.g. millions of empty lists):
// at most kMaxJsonDepth levels, kMaxJsonContainers arrays and objects and kMaxJsonValues
// scalars, which bounds the parsed value to about 16 B per scalar and 80 B per container beyond
// the body itself (~200 MiB at the limits; docs/serving.md). The parse stops at the first
// limit passed. False with *why when the body is not JSON or passes a limit.
inline constexpr int kMaxJsonDepth = 64;
inline constexpr size_t kMaxJsonContainers = size_t{1} << 20;
inline constexpr size_t kMaxJsonValues = size_t{8} << 20;
bool parse_body(const std::string& body, nlohmann::json* out, std::string* why);

// Every key of `obj` must be in `allowed` (Error naming `where.key` otherwise).
void check_keys(const nlohmann::json& obj, const std::set<std::string>& allowed, const std::string& where);

// A field of SGLang's or OpenAI's API that we do not implement is accepted at its neutral value
// only (what leaves the output unchanged); any other value is refused by name. kAny: bookkeeping
// that never changes the output (the router's "model", "log_metrics", ...). A list whose every
// element is neutral (one value per prompt) is neutral too.
enum class Neutral { kAny, kNull, kFalse, kTrue, kZero, kOne, kMinusOne, kEmpty };
using FieldRules = std::map<std::string, Neutral>;
// Every key of `obj` is implemented, or a rule's field at a neutral value (Error naming
// `where.key` and the value otherwise).
void check_fields(const nlohmann::json& obj, const std::set<std::string>& implemented, const FieldRules& rules,
                  const std::string& where);
// The rules of SGLang's /generate body, its sampling_params, and OpenAI's completions body.
const FieldRules& generate_rules();
const FieldRules& sampling_rules();
const FieldRules& completions_rules();
const FieldRules& chat_rules();  // OpenAI's chat completions body
// obj has key with a non-null value (null means "the default" in both APIs).
bool has(const nlohmann::json& obj, const char* key);
// Numeric fields, present and not null: Error naming `where.key` and the value as sent unless an
// integer in [lo, hi] (int_of), any integer (seed_of: a negative seed is taken modulo 2^64), or
// a number (number_of).
int64_t int_of(const nlohmann::json& obj, const char* key, int64_t lo, int64_t hi, const std::string& where);
int64_t int_value(const nlohmann::json& v, int64_t lo, int64_t hi, const std::string& name);  // `name` in errors
uint64_t seed_of(const nlohmann::json& obj, const char* key, const std::string& where);
double number_of(const nlohmann::json& obj, const char* key, const std::string& where);
// The value of a bool or string field; `def` when absent or null; Error naming it otherwise.
bool bool_or(const nlohmann::json& obj, const char* key, bool def);
std::string string_or(const nlohmann::json& obj, const char* key, const std::string& def);
std::vector<int32_t> ids_of(const nlohmann::json& a, const std::string& where);
bool is_id_list(const nlohmann::json& a);

// The API layer's per-prompt options: how a completion's "text" is decoded (special tokens
// skipped, and, as SGLang's detokenizer, a matched stop token trimmed unless no_stop_trim;
// output_ids always hold every token), its stop strings, and how many completions it asks for.
struct TextOptions {
  bool skip_special = true;
  bool no_stop_trim = false;
  std::vector<std::string> stop;  // stop strings (rollout/serve/stop_strings.h)
  int64_t n = 1;                  // completions of the prompt (siblings j = 0..n-1 draw from seed + j)
};
// The most completions one prompt may ask for (n).
inline constexpr int64_t kMaxN = 64;
// A "stop" field: null, a string, or a list of strings (at most `max`); Error naming it otherwise.
std::vector<std::string> stop_strings_of(const nlohmann::json& obj, const std::string& where, size_t max);
// SGLang's sampling_params -> ours (null values: the defaults); *text (out) the decode settings.
SamplingParams sglang_params(const nlohmann::json& sp, TextOptions* text);

// OpenAI's stream_options: {"include_usage": bool} (a final chunk with the usage), only with
// stream: true; whether the usage is asked for.
bool include_usage(const nlohmann::json& body);

// The request ids of a /generate call with n prompts: "rid" as a string (one prompt: itself;
// a batch: rid-0, rid-1, ..., and *group (out) the string itself, which names the whole batch),
// a list of n strings, or absent (empty strings).
std::vector<std::string> rids_of(const nlohmann::json& body, size_t n, bool batch, std::string* group);

}  // namespace updraft::api
