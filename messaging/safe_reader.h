// Opens an untrusted flat Cap'n Proto message safely (used by the record and control codecs).
//
// open() caps the size, copies misaligned input to aligned memory, checks the segment table
// (count <= limits.max_segments, total length exact), then builds a reader with a traversal
// limit of 4x the message's words and limits.nesting_limit. Cap'n Proto exceptions raised
// later by getters are mapped to a reason with classify(). Not copyable (owns the copy).
#pragma once

#include <capnp/serialize.h>
#include <kj/exception.h>

#include <optional>
#include <string>

#include "messaging/codec.h"

namespace updraft::messaging {

class SafeReader {
 public:
  SafeReader() = default;
  SafeReader(const SafeReader&) = delete;
  SafeReader& operator=(const SafeReader&) = delete;

  // Returns kNone on success (then reader() is usable); otherwise the reason, with detail.
  Reject open(const void* data, size_t size, const DecodeLimits& limits, std::string* detail);
  capnp::MessageReader& reader() { return *reader_; }
  size_t words() const { return words_; }

 private:
  kj::Array<capnp::word> copy_;
  std::optional<capnp::FlatArrayMessageReader> reader_;
  size_t words_ = 0;
};

// Maps a Cap'n Proto decoding exception to a reason.
Reject classify(const kj::Exception& e);

// Opens an untrusted message as a T and hands its reader to fn(reader, reason), which returns
// the decoded value, or nullopt after setting reason (kInvalidField when it sets none). Any
// failure becomes *why (when given) and nullopt; nothing is thrown for bad input.
template <typename T, typename Out, typename Fn>
std::optional<Out> decode_flat(const void* data, size_t size, const DecodeLimits& limits, Reject* why, Fn&& fn) {
  SafeReader sr;
  std::string detail;
  Reject r = sr.open(data, size, limits, &detail);
  if (r == Reject::kNone) {
    try {
      auto root = sr.reader().template getRoot<T>();
      if (root.totalSize().wordCount > sr.words()) {
        r = Reject::kMalformed;
      } else {
        std::optional<Out> out = fn(root, r);
        if (out)
          return out;
        if (r == Reject::kNone)
          r = Reject::kInvalidField;
      }
    } catch (const kj::Exception& e) {
      r = classify(e);
    }
  }
  if (why != nullptr)
    *why = r;
  return std::nullopt;
}

}  // namespace updraft::messaging
