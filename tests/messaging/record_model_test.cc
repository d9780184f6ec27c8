// Records checked against the model their worker declared in its Hello (RecordModel): ids in
// the vocabulary, aux [tokens, width] and finite, teacher rows of the declared width, finite and
// best first. Refused by reason over the real transport with nothing stored; an undeclared
// sender gets the contract's checks only.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>

#include "messaging/buffer_server.h"
#include "messaging/codec.h"
#include "messaging/control.h"
#include "messaging/record_sender.h"
#include "messaging/zmq_util.h"
#include "tests/messaging/test_util.h"

namespace updraft::messaging {
namespace {

using namespace std::chrono_literals;
using testing::TempDir;

const RecordModel kModel{100, 24, 2};

// A record consistent with kModel: 8 tokens (2 of prompt), aux [8, 24] bf16 of 1.0, teacher
// rows of 2, best first.
RecordData good_record(uint64_t id) {
  RecordData r;
  r.worker = 4;
  r.policy_version = 1;
  r.prompt_length = 2;
  for (int i = 0; i < 8; ++i)
    r.tokens.push_back(static_cast<int32_t>((id * 7 + i) % 100));
  r.aux.dtype = DType::kBF16;
  r.aux.shape = {8, 24};
  r.aux.bytes.resize(8 * 24 * 2);
  for (size_t i = 0; i < r.aux.bytes.size(); i += 2) {
    r.aux.bytes[i] = 0x80;  // bf16 1.0 = 0x3f80, little-endian
    r.aux.bytes[i + 1] = 0x3f;
  }
  r.teacher_k = 2;
  for (int row = 0; row < 6; ++row) {
    r.teacher_ids.insert(r.teacher_ids.end(), {row, row + 1});
    r.teacher_logprobs.insert(r.teacher_logprobs.end(), {-0.1f, -2.5f});
  }
  return r;
}

struct Poison {
  const char* says;
  std::function<void(RecordData&)> apply;
};

const std::vector<Poison>& poisons() {
  static const std::vector<Poison> p = {
      {"token id 100 outside the declared vocabulary", [](RecordData& r) { r.tokens[3] = 100; }},
      {"teacher id -5 outside the declared vocabulary", [](RecordData& r) { r.teacher_ids[4] = -5; }},
      {"aux is not [8, 24]",
       [](RecordData& r) {
         r.aux.shape = {8, 12};
         r.aux.bytes.resize(8 * 12 * 2);
       }},
      {"aux element 5 is not finite", [](RecordData& r) { r.aux.bytes[11] = 0x7f, r.aux.bytes[10] = 0xc0; }},
      {"teacher_k 1 != the declared 2",
       [](RecordData& r) {
         r.teacher_k = 1;
         r.teacher_ids.resize(6);
         r.teacher_logprobs.assign(6, -1.0f);
       }},
      {"teacher row 1 is not sorted best first", [](RecordData& r) { r.teacher_logprobs[3] = -0.01f; }},
      {"teacher logprob -inf is not finite",
       [](RecordData& r) { r.teacher_logprobs[1] = -std::numeric_limits<float>::infinity(); }},
  };
  return p;
}

TEST(RecordModel, ValidateRecordChecksTheDeclaredModel) {
  const EncodedMessage ok = encode_record(good_record(1));
  EXPECT_TRUE(validate_record(ok.data(), ok.size(), {}, kModel).ok());
  for (const Poison& p : poisons()) {
    RecordData r = good_record(1);
    r.seq = 9;
    p.apply(r);
    const EncodedMessage m = encode_record(r);
    EXPECT_TRUE(validate_record(m.data(), m.size()).ok()) << p.says << ": undeclared, the contract holds";
    const Verdict v = validate_record(m.data(), m.size(), {}, kModel);
    EXPECT_EQ(v.reason, Reject::kModelMismatch) << p.says;
    EXPECT_NE(v.detail.find(p.says), std::string::npos) << v.detail;
    EXPECT_EQ(v.header.seq, 9u) << "the refusal can name the record";
  }
}

TEST(RecordModel, HelloCarriesTheModel) {
  const EncodedMessage m = encode_hello({7, 42, kModel});
  Reject why = Reject::kNone;
  const auto h = decode_hello(m.data(), m.size(), &why);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->worker, 7u);
  EXPECT_EQ(h->model.vocab, 100u);
  EXPECT_EQ(h->model.aux_width, 24u);
  EXPECT_EQ(h->model.teacher_k, 2u);
}

// Over the real transport: the poisoned records are refused (the sender drops them, counted)
// and only the good ones are stored.
TEST(RecordModel, TheBufferRefusesRecordsInconsistentWithTheDeclaredModel) {
  TempDir dir;
  ZmqContext ctx;
  StoreOptions st;
  st.path = dir.path();
  st.sync = SyncPolicy::kOsBuffered;
  std::shared_ptr<RecordStore> store = RecordStore::open(st);
  BufferServerOptions so;
  so.endpoints = {"inproc://model-buffer"};
  so.zmq_context = ctx.get();
  BufferServer server(so, store);
  SenderOptions o;
  o.endpoint = "inproc://model-buffer";
  o.worker = 4;
  o.model = kModel;
  o.zmq_context = ctx.get();
  RecordSender sender(o);
  ASSERT_TRUE(sender.submit(good_record(0)));
  for (const Poison& p : poisons()) {
    RecordData r = good_record(1);
    p.apply(r);
    ASSERT_TRUE(sender.submit(std::move(r))) << p.says;
  }
  ASSERT_TRUE(sender.submit(good_record(2)));
  ASSERT_TRUE(sender.flush(10s));
  EXPECT_EQ(sender.metrics().records_acked.load(), 2u);
  EXPECT_EQ(sender.metrics().records_refused.load(), poisons().size());
  EXPECT_EQ(server.metrics().rejected_count(Reject::kModelMismatch), poisons().size());
  EXPECT_EQ(store->stats().records, 2u);
  const std::string prom = render_prometheus(server.metrics(), "");
  EXPECT_NE(prom.find("updraft_buffer_records_rejected_total{reason=\"model_mismatch\"} " +
                      std::to_string(poisons().size())),
            std::string::npos)
      << prom;
}

}  // namespace
}  // namespace updraft::messaging
