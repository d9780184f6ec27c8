// Request parsing and response helpers shared by the rollout service's routes
// (rollout/serve/rollout_service.h): SGLang's and OpenAI's JSON fields to GenRequests, error
// bodies, and reasons without our source locations.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rollout/engine/request.h"
#include "rollout/serve/http.h"

namespace updraft::api {

http::Response json_response(int status, const nlohmann::json& j);
// An Error's message without the source location the error macros put first ("x.cc:12: "): an
// API client needs the reason, not our file names.
std::string reason(const std::string& what);
http::Response error(int status, const std::string& why);

// Every key of `obj` must be in `allowed` (Error naming `where.key` otherwise).
void check_keys(const nlohmann::json& obj, const std::set<std::string>& allowed, const std::string& where);
std::vector<int32_t> ids_of(const nlohmann::json& a, const std::string& where);
bool is_id_list(const nlohmann::json& a);

// SGLang's sampling_params -> ours; skip_special (out) is the decode setting for "text".
SamplingParams sglang_params(const nlohmann::json& sp, bool* skip_special);

// The request ids of a /generate call with n prompts: "rid" as a string (one prompt: itself;
// a batch: rid-0, rid-1, ...), a list of n strings, or absent (empty strings).
std::vector<std::string> rids_of(const nlohmann::json& body, size_t n, bool batch);

}  // namespace updraft::api
