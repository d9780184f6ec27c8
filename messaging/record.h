// The in-memory form of a Record (schema/updraft.capnp) and the reasons a message is refused.
//
// RecordData is what the rollout engine fills and hands to RecordSender::submit, and what the
// store's read API returns. Plain value type: copyable, movable, no invariants enforced here;
// the codec checks them (see codec.h for the list).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace updraft::messaging {

enum class DType : uint8_t { kBF16 = 0, kF16 = 1, kF32 = 2 };

size_t dtype_size(DType d);
const char* dtype_name(DType d);

// A dense row-major tensor as little-endian bytes; bytes.size() == prod(shape) * dtype_size.
struct AuxTensor {
  DType dtype = DType::kBF16;
  std::vector<uint32_t> shape;
  std::vector<uint8_t> bytes;
};

struct RoundStats {
  uint32_t drafted = 0;
  uint32_t accepted = 0;
  // Of `accepted`, those a suffix source proposed (sibling rollouts, recent completions); the
  // rest were the drafter's. accepted_group + accepted_history <= accepted.
  uint32_t accepted_group = 0;
  uint32_t accepted_history = 0;
};

struct RecordData {
  uint32_t worker = 0;
  uint64_t seq = 0;          // assigned by RecordSender; ignored on submit
  uint64_t incarnation = 0;  // assigned by RecordSender; ignored on submit
  uint64_t policy_version = 0;
  uint64_t drafter_version = 0;
  uint32_t prompt_length = 0;
  std::vector<int32_t> tokens;
  AuxTensor aux;
  uint32_t teacher_k = 0;               // 0: no teacher data
  std::vector<int32_t> teacher_ids;     // [tokens.size() - prompt_length, teacher_k]
  std::vector<float> teacher_logprobs;  // same shape as teacher_ids
  std::vector<RoundStats> rounds;
  // Response indices, ascending, where the serving speculation was rejected (TttSample::rejected).
  std::vector<uint32_t> rejected;
  uint32_t checksum = 0;  // set by encode and by decode; ignored on submit

  // Bytes of payload held by this object (what the sender's queue bound counts).
  size_t payload_bytes() const;
};

// Why a message was refused. Every refusal is counted under reject_name(reason).
enum class Reject : uint8_t {
  kNone = 0,
  kOversize,          // larger than the configured cap
  kMisalignedSize,    // length is not a whole number of 8-byte words
  kTruncated,         // shorter than its segment table says
  kBadSegmentTable,   // too many segments, trailing bytes, empty
  kTraversalLimit,    // Cap'n Proto traversal limit hit (amplification)
  kNestingLimit,      // Cap'n Proto nesting limit hit (deep nesting or cycles)
  kMalformed,         // any other Cap'n Proto decoding failure
  kInvalidField,      // decodes, but a field breaks the Record contract
  kBadChecksum,       // payload does not match its CRC32C
  kBadFraming,        // wrong number of ZeroMQ frames
  kBadHeader,         // header frame: wrong magic, version or kind
  kWrongWorker,       // record's worker differs from the connection's Hello
  kStaleIncarnation,  // from a sender process that a newer one of the same worker replaced
  kModelMismatch,     // inconsistent with the model its connection's Hello declared (RecordModel)
  kCount
};

const char* reject_name(Reject r);

// The model a worker's records come from, declared in its Hello. With vocab > 0 a record must
// have every token and teacher id in [0, vocab), aux [tokens, aux_width] of finite values, and
// teacher rows teacher_k wide, their logprobs finite and non-increasing (a top-k, best first).
struct RecordModel {
  uint32_t vocab = 0;  // 0: not declared
  uint32_t aux_width = 0;
  uint32_t teacher_k = 0;
  bool declared() const { return vocab > 0; }
};

}  // namespace updraft::messaging
