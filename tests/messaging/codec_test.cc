// Record codec: round trip, checksum, and crafted hostile frames (design.md §10, anchors.md
// fault test 4). Every refusal must name its reason; nothing may crash.
#include "messaging/codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/core/error.h"
#include "messaging/control.h"
#include "messaging/crc32c.h"
#include "tests/messaging/test_util.h"

namespace updraft::messaging {
namespace {

using testing::int32_list_ptr;
using testing::make_record;
using testing::raw_message;
using testing::struct_ptr;

std::vector<uint8_t> bytes_of(const EncodedMessage& m) {
  return {m.data(), m.data() + m.size()};
}

TEST(Crc32c, KnownValueAndPortableAgreement) {
  const char* s = "123456789";
  EXPECT_EQ(crc32c(s, 9), 0xE3069283u);
  EXPECT_EQ(crc32c_extend_portable(0, s, 9), 0xE3069283u);
  EXPECT_EQ(crc32c_extend(crc32c(s, 4), s + 4, 5), 0xE3069283u);
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(4099);
  for (auto& b : buf)
    b = static_cast<uint8_t>(rng());
  for (size_t off : {0, 1, 3, 7})
    for (size_t len : {0, 1, 8, 15, 100, 4000})
      EXPECT_EQ(crc32c(buf.data() + off, len), crc32c_extend_portable(0, buf.data() + off, len)) << off << " " << len;
}

TEST(Codec, RoundTripKeepsEveryField) {
  RecordData r = make_record(3, 17, 42, 32, 16, 4);
  r.seq = 99;
  r.incarnation = 0xABCDEF;
  const EncodedMessage m = encode_record(r);
  const RecordData d = decode_record(m.data(), m.size());
  EXPECT_EQ(d.worker, 3u);
  EXPECT_EQ(d.seq, 99u);
  EXPECT_EQ(d.incarnation, 0xABCDEFu);
  EXPECT_EQ(d.policy_version, 17u);
  EXPECT_EQ(d.drafter_version, r.drafter_version);
  EXPECT_EQ(d.prompt_length, r.prompt_length);
  EXPECT_EQ(d.tokens, r.tokens);
  EXPECT_EQ(d.aux.dtype, DType::kBF16);
  EXPECT_EQ(d.aux.shape, r.aux.shape);
  EXPECT_EQ(d.aux.bytes, r.aux.bytes);
  EXPECT_EQ(d.teacher_k, 4u);
  EXPECT_EQ(d.teacher_ids, r.teacher_ids);
  EXPECT_EQ(d.teacher_logprobs, r.teacher_logprobs);
  ASSERT_EQ(d.rounds.size(), 3u);
  EXPECT_EQ(d.rounds[1].accepted, 4u);
  EXPECT_EQ(d.checksum, record_checksum(r));
  // The rounds' suffix-source counts.
  r.rounds[1].accepted_group = 1;
  r.rounds[1].accepted_history = 2;
  const EncodedMessage ms = encode_record(r);
  const RecordData ds = decode_record(ms.data(), ms.size());
  EXPECT_EQ(ds.rounds[1].accepted_group, 1u);
  EXPECT_EQ(ds.rounds[1].accepted_history, 2u);
  EXPECT_EQ(ds.rounds[0].accepted_group + ds.rounds[0].accepted_history, 0u);
  EXPECT_TRUE(ds.rejected.empty());
  // The positions the speculation was rejected at (response indices, 24 of them here).
  r.rejected = {0, 5, 23};
  const EncodedMessage mr = encode_record(r);
  const RecordData dr = decode_record(mr.data(), mr.size());
  EXPECT_EQ(dr.rejected, r.rejected);
  EXPECT_EQ(dr.checksum, record_checksum(r));
  const Verdict v = validate_record(m.data(), m.size());
  ASSERT_TRUE(v.ok()) << v.detail;
  EXPECT_EQ(v.header.seq, 99u);
  EXPECT_EQ(v.header.num_tokens, 32u);
}

TEST(Codec, ChecksumCoversEveryField) {
  const RecordData base = make_record(1, 2, 3);
  const uint32_t c = record_checksum(base);
  auto differs = [&](auto mutate) {
    RecordData r = base;
    mutate(r);
    return record_checksum(r) != c;
  };
  EXPECT_TRUE(differs([](RecordData& r) { r.seq++; }));
  EXPECT_TRUE(differs([](RecordData& r) { r.policy_version++; }));
  EXPECT_TRUE(differs([](RecordData& r) { r.prompt_length++; }));
  EXPECT_TRUE(differs([](RecordData& r) { r.tokens[5]++; }));
  EXPECT_TRUE(differs([](RecordData& r) { r.aux.bytes.back() ^= 1; }));
  EXPECT_TRUE(differs([](RecordData& r) { r.aux.shape[2] = 9; }));
  EXPECT_TRUE(differs([](RecordData& r) { r.teacher_logprobs[0] -= 1; }));
  EXPECT_TRUE(differs([](RecordData& r) { r.rounds[0].accepted = 1; }));
  EXPECT_TRUE(differs([](RecordData& r) { r.rounds[1].accepted_group = 1; }));
  EXPECT_TRUE(differs([](RecordData& r) { r.rounds[1].accepted_history = 1; }));
  EXPECT_TRUE(differs([](RecordData& r) { r.rejected = {3}; }));
  RecordData marked = base;
  marked.rejected = {3};
  const uint32_t cm = record_checksum(marked);
  marked.rejected = {4};
  EXPECT_NE(record_checksum(marked), cm);
}

// Rounds without suffix-source counts checksum as before the fields existed (docs/messaging.md:
// u32 drafted, u32 accepted per round and nothing more), so stored records still verify.
TEST(Codec, ChecksumOfRoundsWithoutSourcesIsTheFirstVersions) {
  const RecordData r = make_record(1, 2, 3);
  std::vector<uint8_t> bytes;
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  };
  auto u64 = [&](uint64_t v) { put(&v, 8); };
  put(&r.worker, 4);
  u64(r.seq);
  u64(r.incarnation);
  u64(r.policy_version);
  u64(r.drafter_version);
  put(&r.prompt_length, 4);
  u64(r.tokens.size());
  put(r.tokens.data(), r.tokens.size() * 4);
  const auto dtype = static_cast<uint8_t>(r.aux.dtype);
  put(&dtype, 1);
  u64(r.aux.shape.size());
  put(r.aux.shape.data(), r.aux.shape.size() * 4);
  u64(r.aux.bytes.size());
  put(r.aux.bytes.data(), r.aux.bytes.size());
  put(&r.teacher_k, 4);
  u64(r.teacher_ids.size());
  put(r.teacher_ids.data(), r.teacher_ids.size() * 4);
  u64(r.teacher_logprobs.size());
  put(r.teacher_logprobs.data(), r.teacher_logprobs.size() * 4);
  u64(r.rounds.size());
  for (const RoundStats& x : r.rounds) {
    put(&x.drafted, 4);
    put(&x.accepted, 4);
  }
  EXPECT_EQ(record_checksum(r), crc32c(bytes.data(), bytes.size()));
}

TEST(Codec, MisalignedInputIsCopiedAndDecoded) {
  const EncodedMessage m = encode_record(make_record(1, 1, 1));
  std::vector<uint8_t> buf(m.size() + 8);
  for (size_t off = 1; off < 8; ++off) {
    std::memcpy(buf.data() + off, m.data(), m.size());
    const Verdict v = validate_record(buf.data() + off, m.size());
    EXPECT_TRUE(v.ok()) << "offset " << off << ": " << v.detail;
  }
}

TEST(Codec, CorruptedPayloadFailsChecksum) {
  const RecordData r = make_record(1, 1, 1);
  auto bytes = bytes_of(encode_record(r));
  // The aux bytes are the largest run in the message; flip one inside them.
  auto at = std::search(bytes.begin(), bytes.end(), r.aux.bytes.begin(), r.aux.bytes.begin() + 16);
  ASSERT_NE(at, bytes.end());
  *(at + 20) ^= 0x40;
  const Verdict v = validate_record(bytes.data(), bytes.size());
  EXPECT_EQ(v.reason, Reject::kBadChecksum) << v.detail;
  EXPECT_THROW(decode_record(bytes.data(), bytes.size()), Error);
}

TEST(Codec, TruncatedAndBadLengths) {
  auto bytes = bytes_of(encode_record(make_record(1, 1, 1)));
  EXPECT_EQ(validate_record(bytes.data(), bytes.size() - 8).reason, Reject::kTruncated);
  EXPECT_EQ(validate_record(bytes.data(), bytes.size() - 3).reason, Reject::kMisalignedSize);
  EXPECT_EQ(validate_record(bytes.data(), 8).reason, Reject::kTruncated);
  EXPECT_EQ(validate_record(bytes.data(), 0).reason, Reject::kBadSegmentTable);
  auto longer = bytes;
  longer.resize(bytes.size() + 16, 0);
  EXPECT_EQ(validate_record(longer.data(), longer.size()).reason, Reject::kBadSegmentTable);
  auto many = bytes;
  const uint32_t segs = 999;
  std::memcpy(many.data(), &segs, 4);
  EXPECT_EQ(validate_record(many.data(), many.size()).reason, Reject::kBadSegmentTable);
}

TEST(Codec, OversizeIsRefusedBeforeReading) {
  auto bytes = bytes_of(encode_record(make_record(1, 1, 1)));
  DecodeLimits l;
  l.max_message_bytes = bytes.size() - 8;
  EXPECT_EQ(validate_record(bytes.data(), bytes.size(), l).reason, Reject::kOversize);
  l.max_message_bytes = bytes.size();
  EXPECT_TRUE(validate_record(bytes.data(), bytes.size(), l).ok());
  // Encoding refuses to produce what the other side would refuse.
  l.max_message_bytes = 64;
  EXPECT_THROW(encode_record(make_record(1, 1, 1), l), Error);
}

TEST(Codec, DeepNestingIsRefused) {
  // A chain of 100 structs, each pointing to the next through the aux slot.
  std::vector<uint64_t> w{struct_ptr(0, 0, 5)};
  for (int i = 0; i < 100; ++i) {
    const bool last = i == 99;
    w.push_back(0);
    w.push_back(last ? 0 : struct_ptr(3, 0, 5));
    w.push_back(0);
    w.push_back(0);
    w.push_back(0);
  }
  auto msg = raw_message(w);
  const Verdict v = validate_record(msg.data(), msg.size());
  EXPECT_EQ(v.reason, Reject::kNestingLimit) << v.detail;
}

TEST(Codec, PointerCycleIsRefused) {
  // The root struct's aux pointer points back at the root itself.
  auto msg = raw_message({struct_ptr(0, 0, 5), 0, struct_ptr(-2, 0, 5), 0, 0, 0});
  const Verdict v = validate_record(msg.data(), msg.size());
  EXPECT_EQ(v.reason, Reject::kNestingLimit) << v.detail;
}

TEST(Codec, AmplificationIsRefused) {
  // Five pointers to the same 1000-element list: a reader would walk 5x the message.
  std::vector<uint64_t> w{struct_ptr(0, 0, 5)};
  for (int slot = 0; slot < 5; ++slot)
    w.push_back(int32_list_ptr(4 - slot, 1000));
  w.resize(w.size() + 500, 0);
  auto msg = raw_message(w);
  const Verdict v = validate_record(msg.data(), msg.size());
  EXPECT_TRUE(v.reason == Reject::kTraversalLimit || v.reason == Reject::kMalformed) << reject_name(v.reason);
  EXPECT_FALSE(v.ok());
}

TEST(Codec, WrongPointerKindIsMalformed) {
  // tokens slot holds a struct pointer where a list is expected.
  auto msg = raw_message({struct_ptr(0, 6, 5), 0, 0, 0, 0, 0, 0, struct_ptr(4, 0, 0), 0, 0, 0, 0});
  const Verdict v = validate_record(msg.data(), msg.size());
  EXPECT_EQ(v.reason, Reject::kMalformed) << v.detail;
}

TEST(Codec, ContractViolationsAreInvalidFields) {
  auto expect_invalid = [](auto mutate, const char* what) {
    RecordData r = make_record(1, 1, 1);
    mutate(r);
    EXPECT_THROW(encode_record(r), Error) << what;
  };
  expect_invalid([](RecordData& r) { r.prompt_length = 1000; }, "prompt longer than tokens");
  expect_invalid([](RecordData& r) { r.tokens[2] = -5; }, "negative token");
  expect_invalid([](RecordData& r) { r.aux.bytes.pop_back(); }, "aux size vs shape");
  expect_invalid([](RecordData& r) { r.aux.shape = {1, 1, 1, 1, 1}; }, "rank 5");
  expect_invalid([](RecordData& r) { r.teacher_ids.pop_back(); }, "teacher ids count");
  expect_invalid([](RecordData& r) { r.teacher_logprobs[0] = 0.5f; }, "positive logprob");
  expect_invalid([](RecordData& r) { r.rounds[0] = {1, 2}; }, "accepted > drafted");
  expect_invalid([](RecordData& r) { r.rounds[0] = {3, 2, 1, 2}; }, "suffix-source accepted > accepted");
  expect_invalid([](RecordData& r) { r.rejected = {12}; }, "rejected past the response (12 tokens)");
  expect_invalid([](RecordData& r) { r.rejected = {4, 4}; }, "rejected repeated");
  expect_invalid([](RecordData& r) { r.rejected = {5, 2}; }, "rejected descending");
  DecodeLimits l;
  l.max_token_id = 10;
  EXPECT_THROW(encode_record(make_record(1, 1, 1), l), Error);
}

TEST(Codec, DecoderEnforcesContractOnWireInput) {
  // Produce a wire message whose checksum is right but whose prompt_length is too large by
  // encoding a valid record and patching the field: the decoder must say invalid_field (it
  // checks fields before the checksum).
  RecordData r = make_record(1, 1, 1, 16, 8, 0);
  r.prompt_length = 7;  // a distinctive value to find
  auto bytes = bytes_of(encode_record(r));
  // promptLength is the high half of the root struct's first data word (word 2 of the message).
  uint32_t pl;
  std::memcpy(&pl, bytes.data() + 16 + 4, 4);
  ASSERT_EQ(pl, 7u);
  pl = 17;
  std::memcpy(bytes.data() + 16 + 4, &pl, 4);
  const Verdict v = validate_record(bytes.data(), bytes.size());
  EXPECT_EQ(v.reason, Reject::kInvalidField) << v.detail;
}

TEST(Codec, RandomBytesNeverCrash) {
  std::mt19937_64 rng(1);
  const auto good = bytes_of(encode_record(make_record(1, 1, 1)));
  for (int i = 0; i < 3000; ++i) {
    auto b = good;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f)
      b[rng() % b.size()] = static_cast<uint8_t>(rng());
    const Verdict v = validate_record(b.data(), b.size());
    if (v.ok()) {
      EXPECT_EQ(record_checksum(decode_record(b.data(), b.size())), v.header.checksum);
    }
  }
}

TEST(Control, HeaderAndMessagesRoundTrip) {
  const auto h = make_header(MessageKind::kAck);
  EXPECT_EQ(parse_header(h.data(), h.size()), MessageKind::kAck);
  auto bad = h;
  bad[0] = 'X';
  EXPECT_FALSE(parse_header(bad.data(), bad.size()).has_value());
  bad = h;
  bad[4] = 77;
  EXPECT_FALSE(parse_header(bad.data(), bad.size()).has_value());
  EXPECT_FALSE(parse_header(h.data(), 7).has_value());

  const auto hello = encode_hello({5, 77});
  auto dh = decode_hello(hello.data(), hello.size(), nullptr);
  ASSERT_TRUE(dh);
  EXPECT_EQ(dh->worker, 5u);
  EXPECT_EQ(dh->incarnation, 77u);
  Ack a;
  a.acked = {1, 2, 3};
  a.rejected = {9};
  a.reject_reason = "bad_checksum";
  a.buffer_instance = 11;
  const auto ack = encode_ack(a);
  auto da = decode_ack(ack.data(), ack.size(), nullptr);
  ASSERT_TRUE(da);
  EXPECT_EQ(da->acked, a.acked);
  EXPECT_EQ(da->rejected, a.rejected);
  EXPECT_EQ(da->reject_reason, "bad_checksum");
  Reject why = Reject::kNone;
  EXPECT_FALSE(decode_ack(ack.data(), ack.size() - 8, &why));
  EXPECT_EQ(why, Reject::kTruncated);
}

}  // namespace
}  // namespace updraft::messaging
