#include "messaging/key.h"

#include <cstdio>

namespace updraft::messaging {

namespace {

void put_be(std::string& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}

uint64_t get_be(std::string_view s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

}  // namespace

std::string encode_key(const RecordKey& k) {
  std::string out;
  out.reserve(kKeyBytes);
  put_be(out, k.policy_version, 8);
  put_be(out, k.worker, 4);
  put_be(out, k.seq, 8);
  return out;
}

std::optional<RecordKey> decode_key(std::string_view s) {
  if (s.size() != kKeyBytes)
    return std::nullopt;
  return RecordKey{get_be(s, 0, 8), static_cast<uint32_t>(get_be(s, 8, 4)), get_be(s, 12, 8)};
}

std::string key_text(const RecordKey& k) {
  return std::to_string(k.policy_version) + "/" + std::to_string(k.worker) + "/" + std::to_string(k.seq);
}

std::optional<RecordKey> parse_key_text(const std::string& s) {
  unsigned long long pv = 0, seq = 0;
  unsigned w = 0;
  char tail = 0;
  if (std::sscanf(s.c_str(), "%llu/%u/%llu%c", &pv, &w, &seq, &tail) != 3)
    return std::nullopt;
  return RecordKey{pv, w, seq};
}

std::string to_string(const RecordKey& k) {
  return "(policy_version " + std::to_string(k.policy_version) + ", worker " + std::to_string(k.worker) + ", seq " +
         std::to_string(k.seq) + ")";
}

}  // namespace updraft::messaging
