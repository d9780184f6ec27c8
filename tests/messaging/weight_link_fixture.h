// Shared by the weight link tests (weight_link_test.cc, weight_link_refusal_test.cc): seeded
// random bytes, whole-file reads and writes, a published drafter version with a multi-chunk file,
// a small one and an empty one, a comparison of two versions' files, a recorder of delivered
// versions, and publisher and subscriber options over inproc endpoints with short timeouts.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/io/weight_version.h"
#include "messaging/weight_link.h"

namespace updraft::messaging::testing_weight_link {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

inline std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s)
    c = static_cast<char>(rng());
  return s;
}

inline void write(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out << bytes;
}

inline std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A published drafter version with a multi-chunk file, a small one and an empty one.
inline WeightVersion publish(const fs::path& root, uint64_t version, size_t big = 50000) {
  return publish_version(root.string(), "drafter", version, [&](const std::string& d) {
    write(fs::path(d) / "model.safetensors", random_bytes(big, version));
    write(fs::path(d) / "config.json", "{\"v\": " + std::to_string(version) + "}\n");
    write(fs::path(d) / "empty.bin", "");
  });
}

inline bool same_files(const fs::path& a, const fs::path& b) {
  for (const char* f : {"model.safetensors", "config.json", "empty.bin", "manifest.json"})
    if (!fs::exists(b / f) || read(a / f) != read(b / f))
      return false;
  return true;
}

struct Delivered {
  std::mutex mu;
  std::vector<std::pair<uint64_t, std::string>> got;
  std::function<void(WeightKind, uint64_t, const std::string&)> fn() {
    return [this](WeightKind, uint64_t v, const std::string& dir) {
      std::lock_guard<std::mutex> lock(mu);
      got.emplace_back(v, dir);
    };
  }
  std::vector<std::pair<uint64_t, std::string>> snapshot() {
    std::lock_guard<std::mutex> lock(mu);
    return got;
  }
};

inline WeightPublisherOptions inproc_publisher(void* ctx, const std::string& name) {
  WeightPublisherOptions o;
  o.zmq_context = ctx;
  o.pub_endpoint = "inproc://" + name + "-pub";
  o.request_endpoint = "inproc://" + name + "-req";
  o.chunk_bytes = 4096;
  return o;
}

inline WeightSubscriberOptions subscriber_for(const WeightPublisher& p, void* ctx, Delivered& d) {
  WeightSubscriberOptions o;
  o.zmq_context = ctx;
  o.pub_endpoint = p.pub_endpoint();
  o.request_endpoint = p.request_endpoint();
  o.kinds = {WeightKind::kDrafter};
  o.poll_interval = 200ms;
  o.request_timeout = 500ms;
  o.on_version = d.fn();
  return o;
}

}  // namespace updraft::messaging::testing_weight_link
