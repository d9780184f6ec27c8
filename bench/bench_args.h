// Small helpers shared by the benchmark programs: command-line bounds, the clock, medians.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace updraft::bench {

// The upper bound the programs' CLI11 checks give counts (reps, tokens, batch sizes): with a range
// check CLI11 refuses a word as well as a number out of range, by the option's name.
constexpr int kMost = 1 << 24;

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
