// Record transport: sender <-> buffer server over inproc:// and tcp:// (loopback), acks,
// resends, dedup, shed policy, restarts, crafted frames and CURVE.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "messaging/buffer_server.h"
#include "messaging/control.h"
#include "messaging/record_sender.h"
#include "messaging/zmq_util.h"
#include "tests/messaging/test_util.h"

namespace updraft::messaging {
namespace {

using namespace std::chrono_literals;
using testing::make_record;
using testing::TempDir;

std::shared_ptr<RecordStore> open_store(const std::string& path) {
  StoreOptions o;
  o.path = path;
  o.write_buffer_bytes = 4 << 20;
  o.sync = SyncPolicy::kOsBuffered;
  return RecordStore::open(o);
}

// Collects on_ack calls.
struct AckLog {
  std::mutex mu;
  std::map<uint64_t, uint32_t> acked;
  std::function<void(uint64_t, uint32_t)> fn() {
    return [this](uint64_t seq, uint32_t crc) {
      std::lock_guard<std::mutex> l(mu);
      EXPECT_TRUE(acked.emplace(seq, crc).second) << "seq " << seq << " acknowledged twice";
    };
  }
};

// Every acked record is in the store with the acked checksum; seqs of the worker are 0..n-1.
void expect_stored_exactly(RecordStore& store, uint32_t worker, AckLog& log, size_t n) {
  std::lock_guard<std::mutex> l(log.mu);
  EXPECT_EQ(log.acked.size(), n);
  std::set<uint64_t> seqs;
  for (const auto& k : store.keys())
    if (k.worker == worker)
      seqs.insert(k.seq);
  EXPECT_EQ(seqs.size(), n);
  if (!seqs.empty()) {
    EXPECT_EQ(*seqs.begin(), 0u);
    EXPECT_EQ(*seqs.rbegin(), n - 1) << "gaps in the seqs of worker " << worker;
  }
  for (const auto& [seq, crc] : log.acked) {
    bool found = false;
    for (const auto& k : store.keys()) {
      if (k.worker == worker && k.seq == seq) {
        auto r = store.get(k);
        ASSERT_TRUE(r);
        EXPECT_EQ(r->checksum, crc);
        found = true;
      }
    }
    EXPECT_TRUE(found) << "acknowledged seq " << seq << " not stored";
  }
}

TEST(Transport, InprocDeliversAndAcknowledgesEverything) {
  TempDir dir;
  ZmqContext ctx;
  auto store = open_store(dir.path());
  BufferServerOptions so;
  so.endpoints = {"inproc://buffer"};
  so.zmq_context = ctx.get();
  BufferServer server(so, store);
  AckLog log;
  SenderOptions o;
  o.endpoint = "inproc://buffer";
  o.worker = 3;
  o.zmq_context = ctx.get();
  o.on_ack = log.fn();
  RecordSender sender(o);
  for (uint64_t i = 0; i < 50; ++i)
    ASSERT_TRUE(sender.submit(make_record(99, 1, i)));
  ASSERT_TRUE(sender.flush(10s));
  EXPECT_EQ(sender.metrics().records_acked, 50u);
  EXPECT_EQ(sender.metrics().queue_bytes, 0u);
  EXPECT_EQ(server.metrics().records_stored, 50u);
  expect_stored_exactly(*store, 3, log, 50);
  const std::string prom = render_prometheus(server.metrics(), "");
  EXPECT_NE(prom.find("\nupdraft_buffer_records_stored_total 50\n"), std::string::npos) << prom;
  EXPECT_NE(prom.find("updraft_buffer_records_rejected_total{reason=\"bad_checksum\"} 0"), std::string::npos);
  EXPECT_NE(render_prometheus(sender.metrics(), "worker=\"3\"").find("updraft_records_acked_total{worker=\"3\"} 50"),
            std::string::npos);
  // The sender sets worker, seq and incarnation itself.
  auto r = store->get({1, 3, 7});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->tokens[0], 7);
  EXPECT_EQ(r->incarnation, sender.incarnation());
}

TEST(Transport, TcpLoopbackAndRestartedSenderContinuesSeq) {
  TempDir dir;
  auto store = open_store(dir.path());
  BufferServerOptions so;
  so.endpoints = {"tcp://127.0.0.1:*"};
  BufferServer server(so, store);
  const std::string ep = server.endpoints().at(0);
  AckLog log;
  {
    SenderOptions o;
    o.endpoint = ep;
    o.worker = 1;
    o.on_ack = log.fn();
    RecordSender s(o);
    for (uint64_t i = 0; i < 10; ++i)
      s.submit(make_record(1, 2, i));
    ASSERT_TRUE(s.flush(10s));
  }
  {
    SenderOptions o;
    o.endpoint = ep;
    o.worker = 1;
    o.on_ack = log.fn();
    RecordSender s(o);
    for (uint64_t i = 10; i < 15; ++i)
      s.submit(make_record(1, 2, i));
    ASSERT_TRUE(s.flush(10s));
  }
  expect_stored_exactly(*store, 1, log, 15);
  EXPECT_EQ(store->get({2, 1, 12})->tokens[0], 12);
}

std::string free_tcp_endpoint() {
  ZmqContext ctx;
  ZmqSocket s(ctx.get(), ZMQ_ROUTER);
  s.bind("tcp://127.0.0.1:*");
  return s.last_endpoint();
}

TEST(Transport, SenderStartsBeforeBufferAndSurvivesBufferRestart) {
  TempDir dir;
  const std::string ep = free_tcp_endpoint();
  AckLog log;
  SenderOptions o;
  o.endpoint = ep;
  o.worker = 5;
  o.ack_timeout = 300ms;
  o.on_ack = log.fn();
  RecordSender sender(o);
  for (uint64_t i = 0; i < 20; ++i)
    ASSERT_TRUE(sender.submit(make_record(5, 1, i)));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(sender.metrics().records_sent, 0u) << "nothing can be sent before the buffer answers Hello";
  {
    BufferServerOptions so;
    so.endpoints = {ep};
    BufferServer server(so, open_store(dir.path()));
    for (uint64_t i = 20; i < 40; ++i)
      sender.submit(make_record(5, 1, i));
    // Stop the buffer while records may still be unacknowledged.
    std::this_thread::sleep_for(5ms);
  }
  for (uint64_t i = 40; i < 60; ++i)
    sender.submit(make_record(5, 1, i));
  auto store = open_store(dir.path());
  {
    BufferServerOptions so;
    so.endpoints = {ep};
    BufferServer server(so, store);
    ASSERT_TRUE(sender.flush(20s));
  }
  expect_stored_exactly(*store, 5, log, 60);
  std::set<int32_t> ids;
  for (const auto& k : store->keys())
    ids.insert(store->get(k)->tokens[0]);
  EXPECT_EQ(ids.size(), 60u) << "each submitted record stored once";
}

TEST(Transport, ShedPolicies) {
  for (ShedPolicy policy : {ShedPolicy::kDropOldest, ShedPolicy::kDropNewest}) {
    TempDir dir;
    const std::string ep = free_tcp_endpoint();
    const size_t one = make_record(1, 1, 0).payload_bytes();
    SenderOptions o;
    o.endpoint = ep;
    o.worker = 2;
    o.max_queue_bytes = 5 * one;
    o.max_inflight_bytes = 2 * one;
    o.shed = policy;
    RecordSender sender(o);
    const auto t0 = std::chrono::steady_clock::now();
    int accepted = 0;
    for (uint64_t i = 0; i < 20; ++i)
      accepted += sender.submit(make_record(2, 1, i)) ? 1 : 0;
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_LT(took, 200ms) << "submit must not wait for the absent buffer";
    EXPECT_EQ(sender.metrics().records_shed, 15u);
    EXPECT_LE(sender.metrics().queue_bytes, o.max_queue_bytes);
    EXPECT_EQ(accepted, policy == ShedPolicy::kDropOldest ? 20 : 5);
    auto store = open_store(dir.path());
    BufferServerOptions so;
    so.endpoints = {ep};
    BufferServer server(so, store);
    ASSERT_TRUE(sender.flush(10s));
    std::set<int32_t> ids;
    for (const auto& k : store->keys())
      ids.insert(store->get(k)->tokens[0]);
    const std::set<int32_t> want =
        policy == ShedPolicy::kDropOldest ? std::set<int32_t>{15, 16, 17, 18, 19} : std::set<int32_t>{0, 1, 2, 3, 4};
    EXPECT_EQ(ids, want);
  }
}

// Sends raw frames through a DEALER, as a hostile or broken peer would.
class RawPeer {
 public:
  RawPeer(void* ctx, const std::string& ep, const std::string& id) : s_(ctx, ZMQ_DEALER) {
    s_.set(ZMQ_ROUTING_ID, id);
    s_.connect(ep);
  }
  void send(const std::vector<std::vector<uint8_t>>& frames) {
    for (size_t i = 0; i < frames.size(); ++i)
      ASSERT_TRUE(send_copy(s_.get(), frames[i].data(), frames[i].size(), i + 1 < frames.size()));
  }
  static std::vector<uint8_t> header(MessageKind k) {
    auto h = make_header(k);
    return {h.begin(), h.end()};
  }
  static std::vector<uint8_t> bytes(const EncodedMessage& m) { return {m.data(), m.data() + m.size()}; }
  void* get() { return s_.get(); }

 private:
  ZmqSocket s_;
};

TEST(Transport, CraftedFramesAreRefusedByReasonAndNothingIsStored) {
  TempDir dir;
  ZmqContext ctx;
  auto store = open_store(dir.path());
  BufferServerOptions so;
  so.endpoints = {"inproc://hostile"};
  so.zmq_context = ctx.get();
  so.limits.max_message_bytes = 64 << 10;
  BufferServer server(so, store);
  RawPeer peer(ctx.get(), "inproc://hostile", "evil");
  const auto rec = [](uint32_t worker, uint64_t seq, uint64_t inc) {
    RecordData r = make_record(worker, 1, seq);
    r.seq = seq;
    r.incarnation = inc;
    return RawPeer::bytes(encode_record(r));
  };
  const auto H = RawPeer::header(MessageKind::kRecord);
  auto good = rec(8, 0, 1);

  peer.send({good});  // one frame: no header
  peer.send({H, good, good});
  auto bad_header = H;
  bad_header[0] = 'X';
  peer.send({bad_header, good});
  peer.send({RawPeer::header(MessageKind::kAck), good});  // a kind the buffer never accepts
  peer.send({H, std::vector<uint8_t>(good.begin(), good.end() - 8)});
  peer.send({H, std::vector<uint8_t>(good.begin(), good.end() - 5)});
  auto corrupt = good;
  corrupt[corrupt.size() - 40] ^= 1;
  peer.send({H, corrupt});
  RecordData big = make_record(8, 1, 1, 512, 64);
  peer.send({H, RawPeer::bytes(encode_record(big))});  // over the server's 64 KiB cap
  // Hand-built messages: a chain of 100 nested structs, a pointer cycle, five pointers to one
  // list (amplification). (Where a frame lands in memory is the receiver's business: the
  // server copies every frame to aligned memory, Codec.MisalignedInputIsCopiedAndDecoded.)
  std::vector<uint64_t> chain{testing::struct_ptr(0, 0, 5)};
  for (int i = 0; i < 100; ++i)
    for (uint64_t x : {uint64_t{0}, i == 99 ? uint64_t{0} : testing::struct_ptr(3, 0, 5), uint64_t{0}, uint64_t{0},
                       uint64_t{0}})
      chain.push_back(x);
  std::vector<uint64_t> amplified{testing::struct_ptr(0, 0, 5)};
  for (int slot = 0; slot < 5; ++slot)
    amplified.push_back(testing::int32_list_ptr(4 - slot, 1000));
  amplified.resize(amplified.size() + 500, 0);
  peer.send({H, testing::raw_message(chain)});
  peer.send({H, testing::raw_message({testing::struct_ptr(0, 0, 5), 0, testing::struct_ptr(-2, 0, 5), 0, 0, 0})});
  peer.send({H, testing::raw_message(amplified)});
  ASSERT_TRUE(testing::wait_for([&] { return server.metrics().rejected_total() >= 11; }, 5s));
  EXPECT_EQ(server.metrics().rejected_count(Reject::kNestingLimit), 2u);
  EXPECT_EQ(server.metrics().rejected_count(Reject::kTraversalLimit) +
                server.metrics().rejected_count(Reject::kMalformed),
            1u);
  EXPECT_EQ(server.metrics().rejected_count(Reject::kBadFraming), 2u);
  EXPECT_EQ(server.metrics().rejected_count(Reject::kBadHeader), 2u);
  EXPECT_EQ(server.metrics().rejected_count(Reject::kTruncated), 1u);
  EXPECT_EQ(server.metrics().rejected_count(Reject::kMisalignedSize), 1u);
  EXPECT_EQ(server.metrics().rejected_count(Reject::kBadChecksum), 1u);
  EXPECT_EQ(server.metrics().rejected_count(Reject::kOversize), 1u);
  EXPECT_EQ(store->stats().records, 0u);

  // Wrong key: the connection said Hello as worker 8, then sends a record of worker 9.
  peer.send({RawPeer::header(MessageKind::kHello), RawPeer::bytes(encode_hello({8, 1}))});
  peer.send({H, rec(9, 0, 1)});
  ASSERT_TRUE(testing::wait_for([&] { return server.metrics().rejected_count(Reject::kWrongWorker) == 1; }, 5s));
  // A newer incarnation of worker 8 said Hello on another connection: the old one is stale.
  RawPeer newer(ctx.get(), "inproc://hostile", "newer");
  newer.send({RawPeer::header(MessageKind::kHello), RawPeer::bytes(encode_hello({8, 2}))});
  ASSERT_TRUE(testing::wait_for([&] {
    std::vector<ZmqMessage> f;
    return recv_multipart(newer.get(), f, nullptr);  // the HelloReply
  }, 5s));
  peer.send({H, rec(8, 0, 1)});
  ASSERT_TRUE(testing::wait_for([&] { return server.metrics().rejected_count(Reject::kStaleIncarnation) == 1; }, 5s));
  EXPECT_EQ(store->stats().records, 0u);
  // The server keeps serving: a good record from the current incarnation is stored.
  newer.send({H, rec(8, 0, 2)});
  ASSERT_TRUE(testing::wait_for([&] { return store->stats().records == 1; }, 5s));
  EXPECT_EQ(server.metrics().records_stored, 1u);
}

TEST(Transport, RefusesNonLoopbackBindWithoutCurve) {
  TempDir dir;
  BufferServerOptions so;
  so.endpoints = {"tcp://0.0.0.0:*"};
  EXPECT_THROW(BufferServer(so, open_store(dir.path())), Error);
}

TEST(Transport, CurveAllowListAdmitsOnlyKnownClients) {
  TempDir dir;
  const CurveKeyPair server_keys = make_curve_keypair();
  const CurveKeyPair good = make_curve_keypair();
  const CurveKeyPair other = make_curve_keypair();
  auto store = open_store(dir.path());
  BufferServerOptions so;
  so.endpoints = {"tcp://127.0.0.1:*"};
  so.curve = CurveServer{server_keys.public_key, server_keys.secret_key, {good.public_key}};
  BufferServer server(so, store);
  SenderOptions bad_o;
  bad_o.endpoint = server.endpoints().at(0);
  bad_o.worker = 2;
  bad_o.curve = CurveClient{server_keys.public_key, other.public_key, other.secret_key};
  RecordSender intruder(bad_o);
  intruder.submit(make_record(2, 1, 0));
  SenderOptions o = bad_o;
  o.worker = 1;
  o.curve = CurveClient{server_keys.public_key, good.public_key, good.secret_key};
  RecordSender sender(o);
  for (uint64_t i = 0; i < 5; ++i)
    sender.submit(make_record(1, 1, i));
  ASSERT_TRUE(sender.flush(10s));
  EXPECT_TRUE(testing::wait_for([&] { return server.auth_denied() > 0; }, 5s));
  EXPECT_FALSE(intruder.flush(300ms));
  for (const auto& k : store->keys())
    EXPECT_EQ(k.worker, 1u) << "a record from a client outside the allow-list was stored";
  EXPECT_EQ(store->stats().records, 5u);
}

}  // namespace
}  // namespace updraft::messaging
