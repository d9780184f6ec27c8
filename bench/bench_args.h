// Small command-line helpers shared by the benchmark programs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace updraft::bench {

// "2,3,5" -> {2, 3, 5}; std::stoll's exceptions for anything that is not a number.
inline std::vector<int64_t> parse_int_list(const std::string& list) {
  std::vector<int64_t> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t end = std::min(list.find(',', at), list.size());
    out.push_back(std::stoll(list.substr(at, end - at)));
    at = end + 1;
  }
  return out;
}

}  // namespace updraft::bench
