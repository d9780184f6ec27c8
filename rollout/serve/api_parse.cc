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

http::Response error(int status, const std::string& why) { return json_response(status, {{"error", reason(why)}}); }

void check_keys(const json& obj, const std::set<std::string>& allowed, const std::string& where) {
  UPD_REQUIRE(obj.is_object()) << where << " must be a JSON object";
  for (const auto& [k, v] : obj.items())
    UPD_REQUIRE(allowed.count(k)) << where << "." << k << " is not supported (refused rather than ignored)";
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

bool is_id_list(const json& a) { return a.is_array() && (a.empty() || a[0].is_number()); }

SamplingParams sglang_params(const json& sp, bool* skip_special) {
  static const std::set<std::string> allowed = {
      "temperature", "top_p", "top_k", "max_new_tokens", "stop_token_ids", "ignore_eos", "sampling_seed", "seed",
      "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim"};
  SamplingParams p;
  p.max_new_tokens = 128;
  *skip_special = true;
  if (sp.is_null())
    return p;
  check_keys(sp, allowed, "sampling_params");
  if (sp.contains("temperature"))
    p.temperature = sp["temperature"].get<float>();
  if (sp.contains("top_p"))
    p.top_p = sp["top_p"].get<float>();
  if (sp.contains("top_k")) {
    const int64_t k = sp["top_k"].get<int64_t>();
    UPD_REQUIRE(k >= -1 && k <= INT32_MAX) << "sampling_params.top_k must be -1, 0 (off) or positive";
    p.top_k = static_cast<int32_t>(std::max<int64_t>(k, 0));
  }
  if (sp.contains("max_new_tokens"))
    p.max_new_tokens = sp["max_new_tokens"].get<int64_t>();
  if (sp.contains("stop_token_ids") && !sp["stop_token_ids"].is_null())
    p.stop_token_ids = ids_of(sp["stop_token_ids"], "sampling_params.stop_token_ids");
  if (sp.contains("ignore_eos"))
    p.ignore_eos = sp["ignore_eos"].get<bool>();
  for (const char* k : {"sampling_seed", "seed"})
    if (sp.contains(k) && !sp[k].is_null()) {
      p.has_seed = true;
      p.seed = sp[k].get<uint64_t>();
    }
  if (sp.contains("skip_special_tokens"))
    *skip_special = sp["skip_special_tokens"].get<bool>();
  return p;
}

std::vector<std::string> rids_of(const json& body, size_t n, bool batch) {
  std::vector<std::string> rids(n);
  if (!body.contains("rid") || body["rid"].is_null())
    return rids;
  const json& rid = body["rid"];
  if (rid.is_string()) {
    for (size_t i = 0; i < n; ++i)
      rids[i] = batch ? rid.get<std::string>() + "-" + std::to_string(i) : rid.get<std::string>();
    return rids;
  }
  UPD_REQUIRE(rid.is_array() && rid.size() == n) << "rid must be a string or a list of one string per prompt (" << n
                                                  << ")";
  for (size_t i = 0; i < n; ++i) {
    UPD_REQUIRE(rid[i].is_string()) << "rid[" << i << "] must be a string";
    rids[i] = rid[i].get<std::string>();
  }
  return rids;
}

}  // namespace updraft::api
