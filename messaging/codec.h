// Encoding and validating Records (Cap'n Proto, schema/updraft.capnp) for untrusted input.
//
// Decoding never trusts its input:
//   * the size is capped before anything is read (DecodeLimits::max_message_bytes);
//   * input that is not 8-byte aligned is copied to aligned memory first (Cap'n Proto
//     rejects unaligned input); aligned input is read in place;
//   * the segment table is checked (count, exact total length) before Cap'n Proto sees it;
//   * Cap'n Proto reads with a traversal limit proportional to the message size and a small
//     nesting limit, and the whole message must account for no more words than it has;
//   * every field is checked against the Record contract (below) and the CRC32C checksum of
//     the canonical payload (docs/messaging.md) must match.
// A refused message yields a Reject reason and a message; nothing is thrown for bad input.
//
// Record contract: prompt_length <= tokens.size(); tokens in [0, max_token_id]; aux dtype
// known, rank <= 4, bytes == prod(shape) * dtype size; teacher_k <= 1024 and, when non-zero,
// ids and logprobs each hold (tokens.size() - prompt_length) * teacher_k values, logprobs not
// NaN and <= 0 (small rounding allowed); each round accepted <= drafted.
//
// Thread-safe: all functions are pure.
#pragma once

#include <capnp/common.h>
#include <kj/array.h>

#include <memory>
#include <string>

#include "messaging/record.h"

namespace updraft::messaging {

struct DecodeLimits {
  size_t max_message_bytes = size_t{64} << 20;
  uint32_t max_segments = 16;
  int nesting_limit = 8;
  int32_t max_token_id = INT32_MAX;
};

// One encoded message: a flat, 8-byte aligned Cap'n Proto message (segment table first).
// Immutable and cheap to share (the sender keeps it for resends while ZeroMQ sends it).
class EncodedMessage {
 public:
  EncodedMessage() = default;
  explicit EncodedMessage(kj::Array<capnp::word>&& words);
  const uint8_t* data() const;
  size_t size() const;
  // Keeps the bytes alive for as long as the returned pointer lives.
  std::shared_ptr<const kj::Array<capnp::word>> share() const { return words_; }

 private:
  std::shared_ptr<const kj::Array<capnp::word>> words_;
};

// The header fields of a record, available without copying its payload.
struct RecordHeader {
  uint32_t worker = 0;
  uint64_t seq = 0;
  uint64_t incarnation = 0;
  uint64_t policy_version = 0;
  uint64_t drafter_version = 0;
  uint32_t num_tokens = 0;
  uint32_t checksum = 0;
  uint32_t response_tokens = 0;  // num_tokens - promptLength (0 if the prompt length exceeds it)
};

struct Verdict {
  Reject reason = Reject::kNone;
  std::string detail;
  RecordHeader header;
  bool ok() const { return reason == Reject::kNone; }
};

// Canonical CRC32C of the payload (every field but the checksum).
uint32_t record_checksum(const RecordData& r);

// Encodes r with its checksum computed here (r.checksum is ignored); the checksum is also
// stored in *checksum when given. Throws updraft::Error if r breaks the Record contract
// (the same checks as decoding) or encodes to more than limits.max_message_bytes.
EncodedMessage encode_record(const RecordData& r, const DecodeLimits& limits = {}, uint32_t* checksum = nullptr);

// Validates an untrusted message; on success fills header. Never throws for bad input.
// With a declared model (RecordModel, record.h) the record must also be consistent with it
// (Reject::kModelMismatch otherwise; the header is filled, so the refusal can name the seq).
Verdict validate_record(const void* data, size_t size, const DecodeLimits& limits = {},
                        const RecordModel& model = {});

// Validates and copies the record out. Throws updraft::Error naming the reason when invalid.
RecordData decode_record(const void* data, size_t size, const DecodeLimits& limits = {});

}  // namespace updraft::messaging
