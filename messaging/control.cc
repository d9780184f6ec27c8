#include "messaging/control.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include "messaging/safe_reader.h"
#include "updraft.capnp.h"

namespace updraft::messaging {

namespace {

constexpr uint8_t kMagic[3] = {'U', 'P', 'D'};
constexpr uint8_t kWireVersion = 1;

DecodeLimits control_limits() {
  DecodeLimits l;
  l.max_message_bytes = kMaxControlBytes;
  l.max_segments = 4;
  return l;
}

template <typename T, typename Out, typename Fn>
std::optional<Out> decode_as(const void* data, size_t size, Reject* why, Fn&& fn) {
  return decode_flat<T, Out>(data, size, control_limits(), why, [&](typename T::Reader r, Reject&) { return fn(r); });
}

}  // namespace

std::array<uint8_t, kHeaderBytes> make_header(MessageKind kind) {
  return {kMagic[0], kMagic[1], kMagic[2], kWireVersion, static_cast<uint8_t>(kind), 0, 0, 0};
}

std::optional<MessageKind> parse_header(const void* data, size_t size) {
  if (size != kHeaderBytes)
    return std::nullopt;
  const auto* b = static_cast<const uint8_t*>(data);
  if (b[0] != kMagic[0] || b[1] != kMagic[1] || b[2] != kMagic[2] || b[3] != kWireVersion)
    return std::nullopt;
  if (b[5] != 0 || b[6] != 0 || b[7] != 0)
    return std::nullopt;
  if (b[4] < static_cast<uint8_t>(MessageKind::kRecord) || b[4] > static_cast<uint8_t>(MessageKind::kWeightChunk))
    return std::nullopt;
  return static_cast<MessageKind>(b[4]);
}

EncodedMessage encode_hello(const Hello& m) {
  capnp::MallocMessageBuilder b;
  auto h = b.initRoot<wire::Hello>();
  h.setWorker(m.worker);
  h.setIncarnation(m.incarnation);
  h.setVocab(m.model.vocab);
  h.setAuxWidth(m.model.aux_width);
  h.setTeacherK(m.model.teacher_k);
  return EncodedMessage(capnp::messageToFlatArray(b));
}

EncodedMessage encode_hello_reply(const HelloReply& m) {
  capnp::MallocMessageBuilder b;
  auto h = b.initRoot<wire::HelloReply>();
  h.setNextSeq(m.next_seq);
  h.setBufferInstance(m.buffer_instance);
  return EncodedMessage(capnp::messageToFlatArray(b));
}

EncodedMessage encode_ack(const Ack& m) {
  capnp::MallocMessageBuilder b;
  auto a = b.initRoot<wire::Ack>();
  a.setAcked(kj::arrayPtr(m.acked.data(), m.acked.size()));
  a.setRejected(kj::arrayPtr(m.rejected.data(), m.rejected.size()));
  a.setRejectReason(m.reject_reason);
  a.setBufferInstance(m.buffer_instance);
  return EncodedMessage(capnp::messageToFlatArray(b));
}

std::optional<Hello> decode_hello(const void* data, size_t size, Reject* why) {
  return decode_as<wire::Hello, Hello>(data, size, why, [](wire::Hello::Reader r) {
    return std::optional<Hello>(
        Hello{r.getWorker(), r.getIncarnation(), RecordModel{r.getVocab(), r.getAuxWidth(), r.getTeacherK()}});
  });
}

std::optional<HelloReply> decode_hello_reply(const void* data, size_t size, Reject* why) {
  return decode_as<wire::HelloReply, HelloReply>(data, size, why, [](wire::HelloReply::Reader r) {
    return std::optional<HelloReply>(HelloReply{r.getNextSeq(), r.getBufferInstance()});
  });
}

std::optional<Ack> decode_ack(const void* data, size_t size, Reject* why) {
  return decode_as<wire::Ack, Ack>(data, size, why, [](wire::Ack::Reader r) {
    Ack a;
    for (uint64_t s : r.getAcked())
      a.acked.push_back(s);
    for (uint64_t s : r.getRejected())
      a.rejected.push_back(s);
    a.reject_reason = r.getRejectReason().cStr();
    a.buffer_instance = r.getBufferInstance();
    return std::optional<Ack>(std::move(a));
  });
}

}  // namespace updraft::messaging
