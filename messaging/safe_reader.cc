#include "messaging/safe_reader.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>

namespace updraft::messaging {

Reject classify(const kj::Exception& e) {
  const std::string d = e.getDescription().cStr();
  if (d.find("traversal limit") != std::string::npos)
    return Reject::kTraversalLimit;
  if (d.find("deeply-nested") != std::string::npos)
    return Reject::kNestingLimit;
  return Reject::kMalformed;
}

Reject SafeReader::open(const void* data, size_t size, const DecodeLimits& limits, std::string* detail) {
  if (size > limits.max_message_bytes) {
    *detail =
        "message of " + std::to_string(size) + " bytes exceeds the cap of " + std::to_string(limits.max_message_bytes);
    return Reject::kOversize;
  }
  if (size == 0) {
    *detail = "empty message";
    return Reject::kBadSegmentTable;
  }
  if (size % sizeof(capnp::word) != 0) {
    *detail = "length " + std::to_string(size) + " is not a multiple of 8";
    return Reject::kMisalignedSize;
  }
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint32_t first;
  std::memcpy(&first, bytes, 4);
  const uint64_t segments = uint64_t{first} + 1;
  if (segments > limits.max_segments) {
    *detail = "segment table claims " + std::to_string(segments) + " segments (max " +
              std::to_string(limits.max_segments) + ")";
    return Reject::kBadSegmentTable;
  }
  const uint64_t table_bytes = ((4 + 4 * segments) + 7) / 8 * 8;
  if (table_bytes > size) {
    *detail = "segment table longer than the message";
    return Reject::kTruncated;
  }
  uint64_t body_words = 0;
  for (uint64_t i = 0; i < segments; ++i) {
    uint32_t s;
    std::memcpy(&s, bytes + 4 + 4 * i, 4);
    body_words += s;
  }
  const uint64_t want = table_bytes + body_words * 8;
  if (want > size) {
    *detail = "segments need " + std::to_string(want) + " bytes, message has " + std::to_string(size);
    return Reject::kTruncated;
  }
  if (want < size) {
    *detail = std::to_string(size - want) + " bytes after the last segment";
    return Reject::kBadSegmentTable;
  }
  words_ = size / sizeof(capnp::word);
  kj::ArrayPtr<const capnp::word> view;
  if (reinterpret_cast<uintptr_t>(data) % alignof(capnp::word) == 0) {
    view = kj::arrayPtr(static_cast<const capnp::word*>(data), words_);
  } else {
    copy_ = kj::heapArray<capnp::word>(words_);
    std::memcpy(copy_.begin(), data, size);
    view = copy_.asPtr();
  }
  capnp::ReaderOptions options;
  options.traversalLimitInWords = 4 * words_ + 64;
  options.nestingLimit = limits.nesting_limit;
  try {
    reader_.emplace(view, options);
  } catch (const kj::Exception& e) {
    *detail = e.getDescription().cStr();
    return classify(e);
  }
  return Reject::kNone;
}

}  // namespace updraft::messaging
