// The record checksum: CRC32C over the canonical payload (docs/messaging.md), computed the same
// way from the in-memory form (encode) and from a wire reader (decode).
#include <bit>
#include <vector>

#include "messaging/codec.h"
#include "messaging/codec_detail.h"
#include "messaging/crc32c.h"

static_assert(std::endian::native == std::endian::little, "the checksum assumes little-endian");

namespace updraft::messaging {
namespace {

// Feeds the canonical payload into a CRC32C.
class PayloadCrc {
 public:
  template <typename T>
  void scalar(T v) {
    crc_ = crc32c_extend(crc_, &v, sizeof(T));
  }
  void bytes(const void* p, size_t n) { crc_ = crc32c_extend(crc_, p, n); }
  // A capnp primitive list, element by element, in chunks.
  template <typename T, typename List>
  void list(const List& l) {
    scalar<uint64_t>(l.size());
    T buf[512];
    size_t n = 0;
    for (auto v : l) {
      buf[n++] = v;
      if (n == 512) {
        bytes(buf, sizeof(buf));
        n = 0;
      }
    }
    bytes(buf, n * sizeof(T));
  }
  template <typename T>
  void vec(const std::vector<T>& v) {
    scalar<uint64_t>(v.size());
    bytes(v.data(), v.size() * sizeof(T));
  }
  // A round's suffix-source counts, added to the schema after the first version: they enter
  // only when set, so a record written before they existed keeps its checksum.
  void round_sources(uint32_t group, uint32_t history) {
    if (group != 0 || history != 0) {
      scalar<uint32_t>(group);
      scalar<uint32_t>(history);
    }
  }
  // The rejected positions, added later still: they enter only when there are any, after the
  // rounds, so older records keep their checksums too.
  template <typename List>
  void rejected(const List& l) {
    if (l.size() > 0)
      list<uint32_t>(l);
  }
  uint32_t value() const { return crc_; }

 private:
  uint32_t crc_ = 0;
};

}  // namespace

namespace detail {

uint32_t checksum_of(wire::Record::Reader r) {
  PayloadCrc c;
  c.scalar<uint32_t>(r.getWorker());
  c.scalar<uint64_t>(r.getSeq());
  c.scalar<uint64_t>(r.getIncarnation());
  c.scalar<uint64_t>(r.getPolicyVersion());
  c.scalar<uint64_t>(r.getDrafterVersion());
  c.scalar<uint32_t>(r.getPromptLength());
  c.list<int32_t>(r.getTokens());
  auto aux = r.getAux();
  c.scalar<uint8_t>(static_cast<uint8_t>(aux.getDtype()));
  c.list<uint32_t>(aux.getShape());
  auto data = aux.getData();
  c.scalar<uint64_t>(data.size());
  c.bytes(data.begin(), data.size());
  c.scalar<uint32_t>(r.getTeacherK());
  c.list<int32_t>(r.getTeacherIds());
  c.list<float>(r.getTeacherLogprobs());
  auto rounds = r.getRounds();
  c.scalar<uint64_t>(rounds.size());
  for (auto s : rounds) {
    c.scalar<uint32_t>(s.getDrafted());
    c.scalar<uint32_t>(s.getAccepted());
    c.round_sources(s.getAcceptedGroup(), s.getAcceptedHistory());
  }
  c.rejected(r.getRejected());
  return c.value();
}

}  // namespace detail

uint32_t record_checksum(const RecordData& r) {
  PayloadCrc c;
  c.scalar<uint32_t>(r.worker);
  c.scalar<uint64_t>(r.seq);
  c.scalar<uint64_t>(r.incarnation);
  c.scalar<uint64_t>(r.policy_version);
  c.scalar<uint64_t>(r.drafter_version);
  c.scalar<uint32_t>(r.prompt_length);
  c.vec(r.tokens);
  c.scalar<uint8_t>(static_cast<uint8_t>(r.aux.dtype));
  c.vec(r.aux.shape);
  c.scalar<uint64_t>(r.aux.bytes.size());
  c.bytes(r.aux.bytes.data(), r.aux.bytes.size());
  c.scalar<uint32_t>(r.teacher_k);
  c.vec(r.teacher_ids);
  c.vec(r.teacher_logprobs);
  c.scalar<uint64_t>(r.rounds.size());
  for (const auto& s : r.rounds) {
    c.scalar<uint32_t>(s.drafted);
    c.scalar<uint32_t>(s.accepted);
    c.round_sources(s.accepted_group, s.accepted_history);
  }
  c.rejected(r.rejected);
  return c.value();
}

}  // namespace updraft::messaging
