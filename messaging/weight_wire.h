// The weight link's messages (schema/updraft.capnp): announcements of new weight versions,
// current-version requests from late joiners, and chunked transfer of a version's files for
// workers without a shared filesystem. Framing is the record link's (messaging/control.h):
// [8-byte header of the kind][one flat Cap'n Proto body].
//
// Decoders are for untrusted input: they never throw for bad bytes, return std::nullopt with a
// Reject reason, and check the contract of each message:
//   * Announcement: sha256 exactly 32 bytes; path at most 4096 bytes; at most 64 metrics with
//     names of at most 128 bytes; the kind known.
//   * WeightChunk: count = 0 (version not served) or index < count; the file name is a plain
//     name (non-empty, at most 255 bytes, no '/', not "." or ".."); crc32c matches the data; the
//     data at most max_chunk_bytes; offset + size does not overflow.
// Thread-safe: all functions are pure.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "messaging/codec.h"

namespace updraft::messaging {

enum class WeightKind : uint8_t { kPolicy = 0, kDrafter = 1 };
const char* weight_kind_name(WeightKind k);  // "policy" / "drafter" (the version directory's kind)

struct Announcement {
  uint64_t version = 0;  // 0: nothing published yet (a reply to a late joiner)
  WeightKind kind = WeightKind::kDrafter;
  std::string path;          // the version directory on the publisher's filesystem
  uint64_t size_bytes = 0;   // all files of the version, manifest included
  std::array<uint8_t, 32> sha256{};  // of the version's manifest.json, which pins every file
  std::vector<std::pair<std::string, double>> metrics;
  uint32_t chunk_count = 0;  // > 0 when the publisher serves the files as chunks
};

struct VersionRequest {
  WeightKind kind = WeightKind::kDrafter;
};

struct ChunkRequest {
  uint64_t version = 0;
  WeightKind kind = WeightKind::kDrafter;
  uint32_t index = 0;
};

struct WeightChunk {
  uint64_t version = 0;
  WeightKind kind = WeightKind::kDrafter;
  uint32_t index = 0, count = 0;  // count 0: the version is not served
  std::string file;
  uint64_t offset = 0;  // within file
  std::string data;
  uint32_t crc32c = 0;  // of data; encode_weight_chunk computes it
};

// The largest chunk a decoder accepts by default; publishers must cut chunks no larger.
constexpr size_t kMaxChunkBytes = size_t{64} << 20;
constexpr size_t kMaxAnnouncementMetrics = 64;

EncodedMessage encode_announcement(const Announcement& m);
EncodedMessage encode_version_request(const VersionRequest& m);
EncodedMessage encode_chunk_request(const ChunkRequest& m);
EncodedMessage encode_weight_chunk(const WeightChunk& m);  // sets the crc32c of m.data

std::optional<Announcement> decode_announcement(const void* data, size_t size, Reject* why);
std::optional<VersionRequest> decode_version_request(const void* data, size_t size, Reject* why);
std::optional<ChunkRequest> decode_chunk_request(const void* data, size_t size, Reject* why);
std::optional<WeightChunk> decode_weight_chunk(const void* data, size_t size, Reject* why,
                                               size_t max_chunk_bytes = kMaxChunkBytes);

// True for a file name a chunk may carry (see above).
bool is_plain_file_name(const std::string& name);

}  // namespace updraft::messaging
