// What the weight link (messaging/weight_link.h) must refuse: versions announced incomplete or
// (when asked to hash) altered, transfers of files or manifests altered after the announcement
// and of versions no longer served (they fail without leaving anything behind), crafted
// requests, subscribers not on the CURVE allow list, and non-loopback binds without CURVE.
// Delivery itself is tested in weight_link_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "kernels/io/weight_version.h"
#include "messaging/control.h"
#include "messaging/weight_link.h"
#include "messaging/weight_wire.h"
#include "tests/messaging/test_util.h"
#include "tests/messaging/weight_link_fixture.h"

namespace updraft::messaging {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::TempDir;
using testing_weight_link::Delivered;
using testing_weight_link::inproc_publisher;
using testing_weight_link::publish;
using testing_weight_link::read;
using testing_weight_link::same_files;
using testing_weight_link::subscriber_for;
using testing_weight_link::write;

TEST(WeightLink, AnnounceChecksCompletenessAlwaysAndHashesOnlyWhenAsked) {
  TempDir root;
  ZmqContext ctx;
  WeightPublisher quick(inproc_publisher(ctx.get(), "wl-quick"));
  auto ho = inproc_publisher(ctx.get(), "wl-hash");
  ho.hash_on_announce = true;
  WeightPublisher hashing(ho);
  auto alter = [](const WeightVersion& v, size_t at) {  // same size, one byte changed
    std::string bytes = read(fs::path(v.dir) / "model.safetensors");
    bytes[at] ^= 0x10;
    write(fs::path(v.dir) / "model.safetensors", bytes);
  };
  const WeightVersion v1 = publish(root.path(), 1);
  alter(v1, 77);
  EXPECT_THROW(hashing.announce(v1.dir, WeightKind::kDrafter), Error);  // reads every byte
  EXPECT_EQ(quick.announce(v1.dir, WeightKind::kDrafter).version, 1u);  // consumers will refuse it
  const WeightVersion v2 = publish(root.path(), 2);
  write(fs::path(v2.dir) / "model.safetensors", "short");
  EXPECT_THROW(quick.announce(v2.dir, WeightKind::kDrafter), Error);  // size differs
  const WeightVersion v3 = publish(root.path(), 3);
  write(fs::path(v3.dir) / "stray.bin", "x");
  EXPECT_THROW(quick.announce(v3.dir, WeightKind::kDrafter), Error);  // unlisted file
  const WeightVersion v4 = publish(root.path(), 4);
  const Announcement by_hash = hashing.announce(v4.dir, WeightKind::kDrafter);
  const Announcement by_size = quick.announce(v4.dir, WeightKind::kDrafter);
  EXPECT_EQ(by_hash.sha256, by_size.sha256);
  EXPECT_EQ(by_hash.size_bytes, by_size.size_bytes);
  EXPECT_EQ(by_hash.chunk_count, by_size.chunk_count);
}

TEST(WeightLink, AlteredFilesAndVersionsNoLongerServedFailWithoutLeavingAnything) {
  TempDir root, local;
  ZmqContext ctx;
  auto po = inproc_publisher(ctx.get(), "wl3");
  po.keep_versions = 1;
  WeightPublisher pub(po);
  Delivered d;
  auto so = subscriber_for(pub, ctx.get(), d);
  so.prefer_transfer = true;
  so.local_root = local.path();

  // 1. A file altered after the announcement: the chunks are consistent, the copy is not.
  const WeightVersion v1 = publish(root.path(), 1);
  pub.announce(v1.dir, WeightKind::kDrafter);
  {
    std::string bytes = read(fs::path(v1.dir) / "model.safetensors");
    bytes[1234] ^= 0x40;
    write(fs::path(v1.dir) / "model.safetensors", bytes);
  }
  {
    WeightSubscriber sub(so);
    ASSERT_TRUE(testing::wait_for([&] { return sub.stats().failures >= 1; }, 10s));
    EXPECT_NE(sub.stats().last_failure.find("verification"), std::string::npos) << sub.stats().last_failure;
    EXPECT_EQ(sub.stats().delivered, 0u);
    // Polled every 200 ms, the failed version is fetched again only after its backoff (1 s,
    // then 2 s): at most one more failure in the next 1.5 s, not one per poll.
    std::this_thread::sleep_for(1500ms);
    EXPECT_LE(sub.stats().failures, 2u);
  }
  // 2. An altered manifest: its hash no longer matches the announcement.
  const WeightVersion v2 = publish(root.path(), 2);
  pub.announce(v2.dir, WeightKind::kDrafter);
  {
    std::string m = read(fs::path(v2.dir) / "manifest.json");  // same size, one byte changed
    m[m.size() - 2] = m[m.size() - 2] == ' ' ? '\t' : ' ';
    write(fs::path(v2.dir) / "manifest.json", m);
  }
  {
    WeightSubscriber sub(so);
    ASSERT_TRUE(testing::wait_for([&] { return sub.stats().failures >= 1; }, 10s));
    EXPECT_NE(sub.stats().last_failure.find("manifest sha256"), std::string::npos) << sub.stats().last_failure;
    EXPECT_EQ(sub.stats().delivered, 0u);
  }
  EXPECT_TRUE(d.snapshot().empty());
  EXPECT_TRUE(fs::is_empty(local.path()));  // no partial or unverified copy left behind

  // 3. Version 3 is current; a request for version 2 (no longer kept) is answered "not served".
  const WeightVersion v3 = publish(root.path(), 3);
  pub.announce(v3.dir, WeightKind::kDrafter);
  ZmqSocket peer(ctx.get(), ZMQ_DEALER);
  peer.connect(pub.request_endpoint());
  ASSERT_TRUE(send_framed(peer.get(), MessageKind::kChunkRequest, encode_chunk_request({2, WeightKind::kDrafter, 0})));
  std::vector<ZmqMessage> frames;
  size_t total = 0;
  ASSERT_TRUE(testing::wait_for([&] { return recv_multipart(peer.get(), frames, &total, 2); }, 5s));
  ASSERT_EQ(total, 2u);
  const auto c = decode_weight_chunk(frames[1].data(), frames[1].size(), nullptr);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->count, 0u);
  // Crafted requests are counted and the publisher keeps serving.
  const auto before = pub.stats().rejected;
  const std::string junk = "not a message";
  ASSERT_TRUE(send_copy(peer.get(), junk.data(), junk.size(), false));
  const auto hdr = make_header(MessageKind::kChunkRequest);
  ASSERT_TRUE(send_copy(peer.get(), hdr.data(), hdr.size(), true));
  ASSERT_TRUE(send_copy(peer.get(), junk.data(), junk.size(), false));
  ASSERT_TRUE(testing::wait_for([&] { return pub.stats().rejected >= before + 2; }, 5s));
  WeightSubscriber sub(so);
  ASSERT_TRUE(sub.wait_delivered(WeightKind::kDrafter, 3, 10s)) << sub.stats().last_failure;
  EXPECT_TRUE(same_files(v3.dir, d.snapshot().back().second));
}

TEST(WeightLink, CurveAdmitsOnlyAllowListedSubscribers) {
  TempDir root, local1, local2;
  const CurveKeyPair server = make_curve_keypair(), good = make_curve_keypair(), other = make_curve_keypair();
  WeightPublisherOptions po;
  po.pub_endpoint = "tcp://127.0.0.1:0";
  po.request_endpoint = "tcp://127.0.0.1:0";
  po.curve = CurveServer{server.public_key, server.secret_key, {good.public_key}};
  WeightPublisher pub(po);
  pub.announce(publish(root.path(), 1).dir, WeightKind::kDrafter);
  auto client = [&](const CurveKeyPair& me, const std::string& local, Delivered& d) {
    WeightSubscriberOptions so;
    so.pub_endpoint = pub.pub_endpoint();
    so.request_endpoint = pub.request_endpoint();
    so.kinds = {WeightKind::kDrafter};
    so.prefer_transfer = true;
    so.local_root = local;
    so.curve = CurveClient{server.public_key, me.public_key, me.secret_key};
    so.on_version = d.fn();
    return so;
  };
  Delivered dg, dx;
  WeightSubscriber admitted(client(good, local1.path(), dg));
  WeightSubscriber refused(client(other, local2.path(), dx));
  ASSERT_TRUE(admitted.wait_delivered(WeightKind::kDrafter, 1, 10s)) << admitted.stats().last_failure;
  EXPECT_FALSE(refused.wait_delivered(WeightKind::kDrafter, 1, 1s));
  EXPECT_TRUE(dx.snapshot().empty());
  EXPECT_EQ(refused.stats().announcements, 0u);
}

TEST(WeightLink, PublisherBindsLoopbackOnlyWithoutCurve) {
  WeightPublisherOptions o;
  o.pub_endpoint = "tcp://0.0.0.0:0";
  o.request_endpoint = "tcp://127.0.0.1:0";
  EXPECT_THROW(WeightPublisher{o}, Error);
  o.pub_endpoint = "tcp://127.0.0.1:0";
  o.chunk_bytes = kMaxChunkBytes + 1;
  EXPECT_THROW(WeightPublisher{o}, Error);
}

}  // namespace
}  // namespace updraft::messaging
