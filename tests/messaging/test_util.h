// Helpers shared by the messaging tests: deterministic records and temporary directories.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "messaging/record.h"

namespace updraft::messaging::testing {

// A record whose content is a pure function of (worker, policy_version, id): tokens[0] holds
// id so tests can tell records apart without relying on seq.
inline RecordData make_record(uint32_t worker, uint64_t policy_version, uint64_t id, uint32_t tokens = 16,
                              uint32_t hidden = 8, uint32_t teacher_k = 2) {
  std::mt19937_64 rng(worker * 1000003ull + policy_version * 7919ull + id);
  RecordData r;
  r.worker = worker;
  r.policy_version = policy_version;
  r.drafter_version = policy_version / 2;
  r.prompt_length = tokens / 4;
  r.tokens.resize(tokens);
  r.tokens[0] = static_cast<int32_t>(id & 0x7FFFFFFF);
  for (uint32_t i = 1; i < tokens; ++i)
    r.tokens[i] = static_cast<int32_t>(rng() % 32000);
  r.aux.dtype = DType::kBF16;
  r.aux.shape = {tokens, 3, hidden};
  r.aux.bytes.resize(size_t{tokens} * 3 * hidden * 2);
  for (auto& b : r.aux.bytes)
    b = static_cast<uint8_t>(rng());
  r.teacher_k = teacher_k;
  const size_t n = size_t{tokens - r.prompt_length} * teacher_k;
  r.teacher_ids.resize(n);
  r.teacher_logprobs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    r.teacher_ids[i] = static_cast<int32_t>(rng() % 32000);
    r.teacher_logprobs[i] = -static_cast<float>(rng() % 1000) / 100.0f;
  }
  r.rounds = {{4, 2}, {4, 4}, {3, 0}};
  return r;
}

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "updraft-msg-XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    if (p == nullptr)
      throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Polls cond every 5 ms until it holds or limit passes; returns its last value.
inline bool wait_for(const std::function<bool()>& cond, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (cond())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

// Hand-built Cap'n Proto messages for hostile-input tests. A single-segment message from raw words (the segment table is prepended).
inline std::vector<uint8_t> raw_message(const std::vector<uint64_t>& words) {
  std::vector<uint64_t> all;
  all.push_back(uint64_t{words.size()} << 32);
  all.insert(all.end(), words.begin(), words.end());
  std::vector<uint8_t> out(all.size() * 8);
  std::memcpy(out.data(), all.data(), out.size());
  return out;
}

inline uint64_t struct_ptr(int32_t offset, uint16_t data_words, uint16_t ptrs) {
  const uint32_t lo = static_cast<uint32_t>(offset) << 2;  // 30-bit signed offset, tag 0
  return uint64_t{lo} | (uint64_t{data_words} << 32) | (uint64_t{ptrs} << 48);
}

inline uint64_t int32_list_ptr(int32_t offset, uint32_t count) {
  const uint32_t lo = (static_cast<uint32_t>(offset) << 2) | 1u;  // tag 1: list
  return uint64_t{lo} | (uint64_t{4} << 32) | (uint64_t{count} << 35);
}

}  // namespace updraft::messaging::testing
