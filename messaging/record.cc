#include "messaging/record.h"

namespace updraft::messaging {

size_t dtype_size(DType d) {
  switch (d) {
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kF32:
      return 4;
  }
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kF32:
      return "f32";
  }
  return "unknown";
}

size_t RecordData::payload_bytes() const {
  return sizeof(RecordData) + tokens.size() * 4 + aux.shape.size() * 4 + aux.bytes.size() + teacher_ids.size() * 4 +
         teacher_logprobs.size() * 4 + rounds.size() * sizeof(RoundStats) + rejected.size() * 4;
}

const char* reject_name(Reject r) {
  switch (r) {
    case Reject::kNone:
      return "none";
    case Reject::kOversize:
      return "oversize";
    case Reject::kMisalignedSize:
      return "misaligned_size";
    case Reject::kTruncated:
      return "truncated";
    case Reject::kBadSegmentTable:
      return "bad_segment_table";
    case Reject::kTraversalLimit:
      return "traversal_limit";
    case Reject::kNestingLimit:
      return "nesting_limit";
    case Reject::kMalformed:
      return "malformed";
    case Reject::kInvalidField:
      return "invalid_field";
    case Reject::kBadChecksum:
      return "bad_checksum";
    case Reject::kBadFraming:
      return "bad_framing";
    case Reject::kBadHeader:
      return "bad_header";
    case Reject::kWrongWorker:
      return "wrong_worker";
    case Reject::kModelMismatch:
      return "model_mismatch";
    case Reject::kStaleIncarnation:
      return "stale_incarnation";
    case Reject::kCount:
      break;
  }
  return "unknown";
}

}  // namespace updraft::messaging
