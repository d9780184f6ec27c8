// Small helpers shared by the benchmark programs: command-line lists, the clock, medians.
#pragma once

#include <algorithm>
#include <chrono>
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

// Seconds on the steady clock.
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The median of `v` (the upper one of an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty())
    return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace updraft::bench
