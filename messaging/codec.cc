#include "messaging/codec.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/core/error.h"
#include "messaging/codec_detail.h"
#include "messaging/safe_reader.h"
#include "updraft.capnp.h"

static_assert(std::endian::native == std::endian::little, "the wire format and checksum assume little-endian");

namespace updraft::messaging {

namespace {

// Record contract shared by encode and decode; returns an empty string when it holds.
template <typename Tokens, typename Shape, typename Ids, typename Logprobs, typename Rounds, typename Rejected>
std::string contract_violation(uint32_t prompt_length, const Tokens& tokens, uint16_t dtype, const Shape& shape,
                               size_t aux_bytes, uint32_t teacher_k, const Ids& ids, const Logprobs& logprobs,
                               const Rounds& rounds, const Rejected& rejected, const DecodeLimits& limits) {
  if (prompt_length > tokens.size())
    return "prompt_length " + std::to_string(prompt_length) + " > tokens " + std::to_string(tokens.size());
  for (int32_t t : tokens)
    if (t < 0 || t > limits.max_token_id)
      return "token id " + std::to_string(t) + " out of range";
  if (dtype > static_cast<uint16_t>(DType::kF32))
    return "unknown aux dtype " + std::to_string(dtype);
  if (shape.size() > 4)
    return "aux rank " + std::to_string(shape.size()) + " > 4";
  uint64_t elems = shape.size() == 0 ? 0 : 1;
  bool overflow = false;
  for (uint32_t d : shape)
    overflow |= __builtin_mul_overflow(elems, uint64_t{d}, &elems);
  uint64_t want_bytes = 0;
  overflow |= __builtin_mul_overflow(elems, uint64_t{dtype_size(static_cast<DType>(dtype))}, &want_bytes);
  if (overflow || want_bytes != aux_bytes)
    return "aux holds " + std::to_string(aux_bytes) + " bytes, shape and dtype say otherwise";
  if (teacher_k > 1024)
    return "teacher_k " + std::to_string(teacher_k) + " > 1024";
  const uint64_t want = teacher_k == 0 ? 0 : uint64_t{teacher_k} * (tokens.size() - prompt_length);
  if (ids.size() != want || logprobs.size() != want)
    return "teacher top-k holds " + std::to_string(ids.size()) + " ids / " + std::to_string(logprobs.size()) +
           " logprobs, expected " + std::to_string(want);
  for (float lp : logprobs)
    if (std::isnan(lp) || lp > 1e-3f)
      return "teacher logprob " + std::to_string(lp) + " is not a log-probability";
  for (const auto& s : rounds) {
    if (s.accepted > s.drafted)
      return "round accepted " + std::to_string(s.accepted) + " > drafted " + std::to_string(s.drafted);
    if (uint64_t{s.accepted_group} + s.accepted_history > s.accepted)
      return "round accepted from suffix sources " + std::to_string(uint64_t{s.accepted_group} + s.accepted_history) +
             " > accepted " + std::to_string(s.accepted);
  }
  uint64_t next = 0;  // the smallest index the next rejected position may take
  for (uint32_t x : rejected) {
    if (x < next || x >= tokens.size() - prompt_length)
      return "rejected position " + std::to_string(x) + " is not an ascending response index";
    next = uint64_t{x} + 1;
  }
  return {};
}

struct RoundView {
  uint32_t drafted, accepted, accepted_group, accepted_history;
};

template <typename Reader>
std::string reader_violation(wire::Record::Reader r, const Reader&, const DecodeLimits& limits) {
  std::vector<RoundView> rounds;
  rounds.reserve(r.getRounds().size());
  for (auto s : r.getRounds())
    rounds.push_back({s.getDrafted(), s.getAccepted(), s.getAcceptedGroup(), s.getAcceptedHistory()});
  auto aux = r.getAux();
  return contract_violation(r.getPromptLength(), r.getTokens(), static_cast<uint16_t>(aux.getDtype()), aux.getShape(),
                            aux.getData().size(), r.getTeacherK(), r.getTeacherIds(), r.getTeacherLogprobs(), rounds,
                            r.getRejected(), limits);
}

// The first aux element whose exponent bits are all ones (NaN or infinity), or -1.
int64_t first_non_finite(const uint8_t* p, size_t bytes, DType dtype) {
  if (dtype == DType::kF32) {
    for (size_t i = 0; i + 4 <= bytes; i += 4) {
      uint32_t u;
      std::memcpy(&u, p + i, 4);
      if ((u & 0x7f800000u) == 0x7f800000u)
        return static_cast<int64_t>(i / 4);
    }
    return -1;
  }
  const uint16_t mask = dtype == DType::kBF16 ? 0x7f80u : 0x7c00u;
  for (size_t i = 0; i + 2 <= bytes; i += 2) {
    uint16_t u;
    std::memcpy(&u, p + i, 2);
    if ((u & mask) == mask)
      return static_cast<int64_t>(i / 2);
  }
  return -1;
}

std::string model_violation(wire::Record::Reader r, const RecordModel& m) {
  const auto tokens = r.getTokens();
  for (int32_t t : tokens)
    if (t < 0 || static_cast<uint32_t>(t) >= m.vocab)
      return "token id " + std::to_string(t) + " outside the declared vocabulary [0, " + std::to_string(m.vocab) + ")";
  const auto aux = r.getAux();
  const auto shape = aux.getShape();
  if (shape.size() != 2 || shape[0] != tokens.size() || shape[1] != m.aux_width)
    return "aux is not [" + std::to_string(tokens.size()) + ", " + std::to_string(m.aux_width) +
           "] (the declared aux width)";
  const auto data = aux.getData();
  const int64_t bad = first_non_finite(data.begin(), data.size(), static_cast<DType>(aux.getDtype()));
  if (bad >= 0)
    return "aux element " + std::to_string(bad) + " is not finite";
  if (r.getTeacherK() != m.teacher_k)
    return "teacher_k " + std::to_string(r.getTeacherK()) + " != the declared " + std::to_string(m.teacher_k);
  for (int32_t t : r.getTeacherIds())
    if (t < 0 || static_cast<uint32_t>(t) >= m.vocab)
      return "teacher id " + std::to_string(t) + " outside the declared vocabulary [0, " + std::to_string(m.vocab) + ")";
  const auto lp = r.getTeacherLogprobs();
  for (uint32_t i = 0; i < lp.size(); ++i) {
    if (!std::isfinite(lp[i]))
      return "teacher logprob " + std::to_string(lp[i]) + " is not finite";
    if (i % m.teacher_k != 0 && lp[i] > lp[i - 1])
      return "teacher row " + std::to_string(i / m.teacher_k) + " is not sorted best first";
  }
  return {};
}

}  // namespace

// ---- encode ----------------------------------------------------------------------------

EncodedMessage::EncodedMessage(kj::Array<capnp::word>&& words)
    : words_(std::make_shared<const kj::Array<capnp::word>>(std::move(words))) {}

const uint8_t* EncodedMessage::data() const {
  return words_ ? reinterpret_cast<const uint8_t*>(words_->begin()) : nullptr;
}

size_t EncodedMessage::size() const {
  return words_ ? words_->size() * sizeof(capnp::word) : 0;
}

EncodedMessage encode_record(const RecordData& r, const DecodeLimits& limits, uint32_t* checksum) {
  const std::string bad =
      contract_violation(r.prompt_length, r.tokens, static_cast<uint16_t>(r.aux.dtype), r.aux.shape, r.aux.bytes.size(),
                         r.teacher_k, r.teacher_ids, r.teacher_logprobs, r.rounds, r.rejected, limits);
  UPD_REQUIRE(bad.empty()) << "record (worker " << r.worker << ") breaks the Record contract: " << bad;
  // One first segment big enough for everything, so the message is a single segment.
  const size_t words = (r.payload_bytes() + 7) / 8 + 64;
  capnp::MallocMessageBuilder builder(static_cast<unsigned>(std::min<size_t>(words, 1u << 28)));
  auto m = builder.initRoot<wire::Record>();
  m.setWorker(r.worker);
  m.setSeq(r.seq);
  m.setIncarnation(r.incarnation);
  m.setPolicyVersion(r.policy_version);
  m.setDrafterVersion(r.drafter_version);
  m.setPromptLength(r.prompt_length);
  m.setTokens(kj::arrayPtr(r.tokens.data(), r.tokens.size()));
  auto aux = m.initAux();
  aux.setDtype(static_cast<wire::DType>(r.aux.dtype));
  aux.setShape(kj::arrayPtr(r.aux.shape.data(), r.aux.shape.size()));
  aux.setData(kj::arrayPtr(r.aux.bytes.data(), r.aux.bytes.size()));
  m.setTeacherK(r.teacher_k);
  m.setTeacherIds(kj::arrayPtr(r.teacher_ids.data(), r.teacher_ids.size()));
  m.setTeacherLogprobs(kj::arrayPtr(r.teacher_logprobs.data(), r.teacher_logprobs.size()));
  auto rounds = m.initRounds(static_cast<unsigned>(r.rounds.size()));
  for (size_t i = 0; i < r.rounds.size(); ++i) {
    rounds[i].setDrafted(r.rounds[i].drafted);
    rounds[i].setAccepted(r.rounds[i].accepted);
    rounds[i].setAcceptedGroup(r.rounds[i].accepted_group);
    rounds[i].setAcceptedHistory(r.rounds[i].accepted_history);
  }
  if (!r.rejected.empty())
    m.setRejected(kj::arrayPtr(r.rejected.data(), r.rejected.size()));
  const uint32_t crc = record_checksum(r);
  m.setChecksum(crc);
  if (checksum != nullptr)
    *checksum = crc;
  EncodedMessage out(capnp::messageToFlatArray(builder));
  UPD_REQUIRE(out.size() <= limits.max_message_bytes) << "record (worker " << r.worker << ") encodes to " << out.size()
                                                      << " bytes, over the cap of " << limits.max_message_bytes;
  return out;
}

// ---- decode ----------------------------------------------------------------------------

namespace {

template <typename T, typename List>
std::vector<T> to_vector(const List& l) {
  std::vector<T> v;
  v.reserve(l.size());
  for (auto x : l)
    v.push_back(x);
  return v;
}

// Validates inside an open reader; fills v. Returns the record reader through fn on success.
template <typename Fn>
Verdict validate_in(SafeReader& sr, const DecodeLimits& limits, const RecordModel& model, Fn&& on_valid) {
  Verdict v;
  try {
    auto root = sr.reader().getRoot<wire::Record>();
    const auto total = root.totalSize().wordCount;
    if (total > sr.words()) {
      v.reason = Reject::kMalformed;
      v.detail = "message reaches " + std::to_string(total) + " words but holds " + std::to_string(sr.words());
      return v;
    }
    const std::string bad = reader_violation(root, sr, limits);
    if (!bad.empty()) {
      v.reason = Reject::kInvalidField;
      v.detail = bad;
      return v;
    }
    const uint32_t crc = detail::checksum_of(root);
    if (crc != root.getChecksum()) {
      v.reason = Reject::kBadChecksum;
      v.detail = "payload CRC32C " + std::to_string(crc) + " != stored " + std::to_string(root.getChecksum());
      return v;
    }
    v.header = {root.getWorker(),
                root.getSeq(),
                root.getIncarnation(),
                root.getPolicyVersion(),
                root.getDrafterVersion(),
                root.getTokens().size(),
                crc};
    const uint32_t n = root.getTokens().size(), prompt = root.getPromptLength();
    v.header.response_tokens = prompt < n ? n - prompt : 0;
    if (model.declared()) {  // after the header: a refusal names the record's seq
      v.detail = model_violation(root, model);
      if (!v.detail.empty()) {
        v.reason = Reject::kModelMismatch;
        return v;
      }
    }
    on_valid(root);
  } catch (const kj::Exception& e) {
    v.reason = classify(e);
    v.detail = e.getDescription().cStr();
  }
  return v;
}

}  // namespace

Verdict validate_record(const void* data, size_t size, const DecodeLimits& limits, const RecordModel& model) {
  SafeReader sr;
  Verdict v;
  v.reason = sr.open(data, size, limits, &v.detail);
  if (!v.ok())
    return v;
  return validate_in(sr, limits, model, [](wire::Record::Reader) {});
}

RecordData decode_record(const void* data, size_t size, const DecodeLimits& limits) {
  SafeReader sr;
  Verdict v;
  v.reason = sr.open(data, size, limits, &v.detail);
  RecordData out;
  if (v.ok()) {
    v = validate_in(sr, limits, RecordModel{}, [&](wire::Record::Reader r) {
      out.worker = r.getWorker();
      out.seq = r.getSeq();
      out.incarnation = r.getIncarnation();
      out.policy_version = r.getPolicyVersion();
      out.drafter_version = r.getDrafterVersion();
      out.prompt_length = r.getPromptLength();
      out.tokens = to_vector<int32_t>(r.getTokens());
      auto aux = r.getAux();
      out.aux.dtype = static_cast<DType>(aux.getDtype());
      out.aux.shape = to_vector<uint32_t>(aux.getShape());
      out.aux.bytes.assign(aux.getData().begin(), aux.getData().end());
      out.teacher_k = r.getTeacherK();
      out.teacher_ids = to_vector<int32_t>(r.getTeacherIds());
      out.teacher_logprobs = to_vector<float>(r.getTeacherLogprobs());
      for (auto s : r.getRounds())
        out.rounds.push_back({s.getDrafted(), s.getAccepted(), s.getAcceptedGroup(), s.getAcceptedHistory()});
      out.rejected = to_vector<uint32_t>(r.getRejected());
      out.checksum = r.getChecksum();
    });
  }
  UPD_REQUIRE(v.ok()) << "record rejected (" << reject_name(v.reason) << "): " << v.detail;
  return out;
}

}  // namespace updraft::messaging
