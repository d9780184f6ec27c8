// Counting the threads that OpenMP teams add to a test's process (kernels/core/cpu_team.h).
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace updraft::cpu_team_util {

inline std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Threads of this process that carry its own name: the main thread, the threads it starts
// without naming them (workers, the trainer) and OpenMP's helpers. RocksDB's and ZeroMQ's
// background threads name themselves, so their coming and going does not count.
inline int own_threads() {
  const std::string name = read_line("/proc/self/comm");
  int n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task"))
    n += read_line(task.path().string() + "/comm") == name;
  return n;
}

// Polls own_threads() for up to `seconds` until it equals `want`; the last count.
inline int wait_for_own_threads(int want, double seconds = 10) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int n = own_threads();
  while (n != want && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    n = own_threads();
  }
  return n;
}

}  // namespace updraft::cpu_team_util
