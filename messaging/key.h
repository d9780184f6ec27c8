// The buffer's record key: (policy_version, worker, seq), 20 bytes, big-endian, so that
// RocksDB's bytewise order is the numeric order of the triple (docs/messaging.md).
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace updraft::messaging {

struct RecordKey {
  uint64_t policy_version = 0;
  uint32_t worker = 0;
  uint64_t seq = 0;
  auto operator<=>(const RecordKey&) const = default;
};

constexpr size_t kKeyBytes = 20;

std::string encode_key(const RecordKey& k);
// nullopt unless s is exactly kKeyBytes long.
std::optional<RecordKey> decode_key(std::string_view s);
std::string to_string(const RecordKey& k);
// "policy_version/worker/seq", how the command line and logs name a key, and back (nullopt
// unless s is exactly that).
std::string key_text(const RecordKey& k);
std::optional<RecordKey> parse_key_text(const std::string& s);

}  // namespace updraft::messaging
