// Framing and the small control messages of the record transport.
//
// Every ZeroMQ message on the record link is [header][body] (a ROUTER adds the peer's
// routing id in front). The header is 8 bytes: "UPD" magic, wire version 1, the kind, and
// three zero bytes. The body is one flat Cap'n Proto message of the kind's struct
// (docs/messaging.md). Decoders here are for untrusted input: they return std::nullopt
// with a reason instead of throwing.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "messaging/codec.h"

namespace updraft::messaging {

// 1-4: the record link (docs/messaging.md); 5-8: the weight link (messaging/weight_link.h).
enum class MessageKind : uint8_t {
  kRecord = 1,
  kHello = 2,
  kHelloReply = 3,
  kAck = 4,
  kAnnouncement = 5,
  kVersionRequest = 6,
  kChunkRequest = 7,
  kWeightChunk = 8,
};

constexpr size_t kHeaderBytes = 8;
std::array<uint8_t, kHeaderBytes> make_header(MessageKind kind);
// nullopt when the frame is not a valid header of a known kind.
std::optional<MessageKind> parse_header(const void* data, size_t size);

struct Hello {
  uint32_t worker = 0;
  uint64_t incarnation = 0;
  RecordModel model;  // undeclared (all 0) from senders that do not say
};

struct HelloReply {
  uint64_t next_seq = 0;
  uint64_t buffer_instance = 0;
};

struct Ack {
  std::vector<uint64_t> acked;
  std::vector<uint64_t> rejected;
  std::string reject_reason;
  uint64_t buffer_instance = 0;
};

EncodedMessage encode_hello(const Hello& m);
EncodedMessage encode_hello_reply(const HelloReply& m);
EncodedMessage encode_ack(const Ack& m);

// Control messages are small: decoding caps them at kMaxControlBytes.
constexpr size_t kMaxControlBytes = size_t{1} << 20;
std::optional<Hello> decode_hello(const void* data, size_t size, Reject* why);
std::optional<HelloReply> decode_hello_reply(const void* data, size_t size, Reject* why);
std::optional<Ack> decode_ack(const void* data, size_t size, Reject* why);

}  // namespace updraft::messaging
