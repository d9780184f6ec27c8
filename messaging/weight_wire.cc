#include "messaging/weight_wire.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>

#include "messaging/control.h"
#include "messaging/crc32c.h"
#include "messaging/safe_reader.h"
#include "updraft.capnp.h"

namespace updraft::messaging {

namespace {

constexpr size_t kMaxPathBytes = 4096;
constexpr size_t kMaxMetricNameBytes = 128;
constexpr size_t kMaxFileNameBytes = 255;

DecodeLimits small_limits() {
  DecodeLimits l;
  l.max_message_bytes = kMaxControlBytes;
  l.max_segments = 4;
  return l;
}

wire::WeightKind to_wire(WeightKind k) {
  return k == WeightKind::kPolicy ? wire::WeightKind::POLICY : wire::WeightKind::DRAFTER;
}

// nullopt for an enumerant this build does not know (a newer writer's).
std::optional<WeightKind> from_wire(wire::WeightKind k) {
  switch (k) {
    case wire::WeightKind::POLICY:
      return WeightKind::kPolicy;
    case wire::WeightKind::DRAFTER:
      return WeightKind::kDrafter;
  }
  return std::nullopt;
}

kj::ArrayPtr<const kj::byte> bytes_of(const std::string& s) {
  return kj::arrayPtr(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

}  // namespace

const char* weight_kind_name(WeightKind k) { return k == WeightKind::kPolicy ? "policy" : "drafter"; }

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name.size() <= kMaxFileNameBytes && name != "." && name != ".." &&
         name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
}

EncodedMessage encode_announcement(const Announcement& m) {
  capnp::MallocMessageBuilder b;
  auto a = b.initRoot<wire::Announcement>();
  a.setVersion(m.version);
  a.setKind(to_wire(m.kind));
  a.setPath(m.path);
  a.setSizeBytes(m.size_bytes);
  a.setSha256(kj::arrayPtr(m.sha256.data(), m.sha256.size()));
  auto metrics = a.initMetrics(static_cast<unsigned>(m.metrics.size()));
  for (size_t i = 0; i < m.metrics.size(); ++i) {
    metrics[static_cast<unsigned>(i)].setName(m.metrics[i].first);
    metrics[static_cast<unsigned>(i)].setValue(m.metrics[i].second);
  }
  a.setChunkCount(m.chunk_count);
  return EncodedMessage(capnp::messageToFlatArray(b));
}

EncodedMessage encode_version_request(const VersionRequest& m) {
  capnp::MallocMessageBuilder b;
  b.initRoot<wire::CurrentVersionRequest>().setKind(to_wire(m.kind));
  return EncodedMessage(capnp::messageToFlatArray(b));
}

EncodedMessage encode_chunk_request(const ChunkRequest& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<wire::ChunkRequest>();
  r.setVersion(m.version);
  r.setKind(to_wire(m.kind));
  r.setIndex(m.index);
  return EncodedMessage(capnp::messageToFlatArray(b));
}

EncodedMessage encode_weight_chunk(const WeightChunk& m) {
  capnp::MallocMessageBuilder b;
  auto c = b.initRoot<wire::WeightChunk>();
  c.setVersion(m.version);
  c.setKind(to_wire(m.kind));
  c.setIndex(m.index);
  c.setCount(m.count);
  c.setOffset(m.offset);
  c.setData(bytes_of(m.data));
  c.setCrc32c(crc32c(m.data.data(), m.data.size()));
  c.setFile(m.file);
  return EncodedMessage(capnp::messageToFlatArray(b));
}

std::optional<Announcement> decode_announcement(const void* data, size_t size, Reject* why) {
  return decode_flat<wire::Announcement, Announcement>(
      data, size, small_limits(), why, [](wire::Announcement::Reader r, Reject&) -> std::optional<Announcement> {
        Announcement a;
        const auto kind = from_wire(r.getKind());
        const auto sha = r.getSha256();
        if (!kind || sha.size() != a.sha256.size() || r.getPath().size() > kMaxPathBytes ||
            r.getMetrics().size() > kMaxAnnouncementMetrics)
          return std::nullopt;
        a.version = r.getVersion();
        a.kind = *kind;
        a.path = r.getPath().cStr();
        a.size_bytes = r.getSizeBytes();
        std::memcpy(a.sha256.data(), sha.begin(), sha.size());
        for (auto m : r.getMetrics()) {
          if (m.getName().size() > kMaxMetricNameBytes)
            return std::nullopt;
          a.metrics.emplace_back(m.getName().cStr(), m.getValue());
        }
        a.chunk_count = r.getChunkCount();
        return a;
      });
}

std::optional<VersionRequest> decode_version_request(const void* data, size_t size, Reject* why) {
  return decode_flat<wire::CurrentVersionRequest, VersionRequest>(
      data, size, small_limits(), why,
      [](wire::CurrentVersionRequest::Reader r, Reject&) -> std::optional<VersionRequest> {
        const auto kind = from_wire(r.getKind());
        if (!kind)
          return std::nullopt;
        return VersionRequest{*kind};
      });
}

std::optional<ChunkRequest> decode_chunk_request(const void* data, size_t size, Reject* why) {
  return decode_flat<wire::ChunkRequest, ChunkRequest>(
      data, size, small_limits(), why, [](wire::ChunkRequest::Reader r, Reject&) -> std::optional<ChunkRequest> {
        const auto kind = from_wire(r.getKind());
        if (!kind)
          return std::nullopt;
        return ChunkRequest{r.getVersion(), *kind, r.getIndex()};
      });
}

std::optional<WeightChunk> decode_weight_chunk(const void* data, size_t size, Reject* why, size_t max_chunk_bytes) {
  DecodeLimits l;
  l.max_message_bytes = max_chunk_bytes + kMaxControlBytes;  // the data plus its fields
  l.max_segments = 4;
  return decode_flat<wire::WeightChunk, WeightChunk>(
      data, size, l, why, [&](wire::WeightChunk::Reader r, Reject& reason) -> std::optional<WeightChunk> {
        WeightChunk c;
        const auto kind = from_wire(r.getKind());
        const auto bytes = r.getData();
        if (!kind || bytes.size() > max_chunk_bytes)
          return std::nullopt;
        c.version = r.getVersion();
        c.kind = *kind;
        c.index = r.getIndex();
        c.count = r.getCount();
        c.offset = r.getOffset();
        c.crc32c = r.getCrc32c();
        if (c.count == 0)  // "not served": nothing else is meaningful
          return c;
        c.file = std::string(r.getFile().cStr(), r.getFile().size());
        if (c.index >= c.count || !is_plain_file_name(c.file) || c.offset > UINT64_MAX - bytes.size())
          return std::nullopt;
        if (crc32c(bytes.begin(), bytes.size()) != c.crc32c) {
          reason = Reject::kBadChecksum;
          return std::nullopt;
        }
        c.data.assign(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
        return c;
      });
}

}  // namespace updraft::messaging
