// The weight link (messaging/weight_link.h, weight_wire.h): message contracts for untrusted input,
// and delivery by shared path and by chunked transfer over inproc and tcp, leftovers of an earlier
// subscriber, late joiners and version order. What the link must refuse (incomplete or altered
// versions, versions no longer served, crafted requests, subscribers not allow-listed) is in
// weight_link_refusal_test.cc; the shared fixtures in weight_link_fixture.h.
#include "messaging/weight_link.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "kernels/io/sha256.h"
#include "kernels/io/weight_version.h"
#include "messaging/crc32c.h"
#include "messaging/weight_wire.h"
#include "tests/messaging/test_util.h"
#include "tests/messaging/weight_link_fixture.h"
#include "updraft.capnp.h"

namespace updraft::messaging {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::TempDir;
using testing_weight_link::Delivered;
using testing_weight_link::inproc_publisher;
using testing_weight_link::publish;
using testing_weight_link::random_bytes;
using testing_weight_link::read;
using testing_weight_link::same_files;
using testing_weight_link::subscriber_for;
using testing_weight_link::write;

TEST(WeightWire, MessagesRoundTrip) {
  Announcement a;
  a.version = 7;
  a.kind = WeightKind::kPolicy;
  a.path = "/data/policy-v00000007";
  a.size_bytes = 123456;
  a.sha256[0] = 0xAB;
  a.sha256[31] = 0xCD;
  a.metrics = {{"tau_hat", 3.5}, {"loss", 0.25}};
  a.chunk_count = 31;
  const auto ea = encode_announcement(a);
  const auto da = decode_announcement(ea.data(), ea.size(), nullptr);
  ASSERT_TRUE(da);
  EXPECT_EQ(da->version, 7u);
  EXPECT_EQ(da->kind, WeightKind::kPolicy);
  EXPECT_EQ(da->path, a.path);
  EXPECT_EQ(da->size_bytes, a.size_bytes);
  EXPECT_EQ(da->sha256, a.sha256);
  EXPECT_EQ(da->metrics, a.metrics);
  EXPECT_EQ(da->chunk_count, 31u);

  const auto er = encode_chunk_request({9, WeightKind::kDrafter, 4});
  const auto dr = decode_chunk_request(er.data(), er.size(), nullptr);
  ASSERT_TRUE(dr);
  EXPECT_EQ(dr->version, 9u);
  EXPECT_EQ(dr->index, 4u);
  const auto ev = encode_version_request({WeightKind::kPolicy});
  ASSERT_TRUE(decode_version_request(ev.data(), ev.size(), nullptr));
  EXPECT_EQ(decode_version_request(ev.data(), ev.size(), nullptr)->kind, WeightKind::kPolicy);

  WeightChunk c;
  c.version = 9;
  c.index = 2;
  c.count = 5;
  c.file = "model.safetensors";
  c.offset = 8192;
  c.data = random_bytes(1000, 1);
  const auto ec = encode_weight_chunk(c);
  const auto dc = decode_weight_chunk(ec.data(), ec.size(), nullptr);
  ASSERT_TRUE(dc);
  EXPECT_EQ(dc->data, c.data);
  EXPECT_EQ(dc->file, c.file);
  EXPECT_EQ(dc->offset, 8192u);
  EXPECT_EQ(dc->index, 2u);
  EXPECT_EQ(dc->count, 5u);
}

// Builds a WeightChunk with arbitrary fields (a hostile publisher).
EncodedMessage raw_chunk(const std::string& file, uint32_t index, uint32_t count, const std::string& data, uint32_t crc,
                         uint64_t offset = 0) {
  capnp::MallocMessageBuilder b;
  auto c = b.initRoot<wire::WeightChunk>();
  c.setVersion(1);
  c.setKind(wire::WeightKind::DRAFTER);
  c.setIndex(index);
  c.setCount(count);
  c.setOffset(offset);
  c.setData(kj::arrayPtr(reinterpret_cast<const kj::byte*>(data.data()), data.size()));
  c.setCrc32c(crc);
  c.setFile(file);
  return EncodedMessage(capnp::messageToFlatArray(b));
}

TEST(WeightWire, HostileChunksAndAnnouncementsAreRefusedByReason) {
  const std::string data = random_bytes(100, 2);
  const uint32_t good_crc = crc32c(data.data(), data.size());
  auto reason = [](const EncodedMessage& m, size_t cap = kMaxChunkBytes) {
    Reject why = Reject::kNone;
    EXPECT_FALSE(decode_weight_chunk(m.data(), m.size(), &why, cap));
    return why;
  };
  ASSERT_TRUE(decode_weight_chunk(raw_chunk("w.bin", 0, 1, data, good_crc).data(),
                                  raw_chunk("w.bin", 0, 1, data, good_crc).size(), nullptr));
  EXPECT_EQ(reason(raw_chunk("w.bin", 0, 1, data, good_crc ^ 1)), Reject::kBadChecksum);
  for (const char* bad : {"../evil", "a/b", "", "..", "."})
    EXPECT_EQ(reason(raw_chunk(bad, 0, 1, data, good_crc)), Reject::kInvalidField) << bad;
  EXPECT_EQ(reason(raw_chunk(std::string(300, 'x'), 0, 1, data, good_crc)), Reject::kInvalidField);
  EXPECT_EQ(reason(raw_chunk("w.bin", 3, 3, data, good_crc)), Reject::kInvalidField);  // index >= count
  EXPECT_EQ(reason(raw_chunk("w.bin", 0, 1, data, good_crc, UINT64_MAX - 10)), Reject::kInvalidField);
  EXPECT_EQ(reason(raw_chunk("w.bin", 0, 1, data, good_crc), 50), Reject::kInvalidField);  // data above the cap
  // Truncated, misaligned and oversize bodies.
  const auto m = raw_chunk("w.bin", 0, 1, data, good_crc);
  Reject why = Reject::kNone;
  EXPECT_FALSE(decode_weight_chunk(m.data(), m.size() - 8, &why));
  EXPECT_EQ(why, Reject::kTruncated);
  EXPECT_FALSE(decode_weight_chunk(m.data(), m.size() - 3, &why));
  EXPECT_EQ(why, Reject::kMisalignedSize);
  const std::string huge(kMaxControlBytes + 64, '\0');
  EXPECT_FALSE(decode_announcement(huge.data(), huge.size(), &why));
  EXPECT_EQ(why, Reject::kOversize);
  EXPECT_FALSE(decode_weight_chunk(huge.data(), huge.size(), &why, 8));
  EXPECT_EQ(why, Reject::kOversize);

  // An announcement whose sha256 is not 32 bytes.
  capnp::MallocMessageBuilder b;
  auto a = b.initRoot<wire::Announcement>();
  a.setVersion(3);
  a.setSha256(kj::arrayPtr(reinterpret_cast<const kj::byte*>("short"), 5));
  const EncodedMessage ea(capnp::messageToFlatArray(b));
  EXPECT_FALSE(decode_announcement(ea.data(), ea.size(), &why));
  EXPECT_EQ(why, Reject::kInvalidField);
  // A chunk is not an announcement: reading one as the other must not crash.
  EXPECT_FALSE(decode_announcement(m.data(), m.size(), &why));
  // Random corruption never crashes and never yields a chunk with a bad file name or crc.
  std::mt19937_64 rng(5);
  for (int i = 0; i < 3000; ++i) {
    std::string bytes(reinterpret_cast<const char*>(m.data()), m.size());
    for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k)
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    const auto c = decode_weight_chunk(bytes.data(), bytes.size(), nullptr);
    if (c && c->count > 0) {
      EXPECT_TRUE(is_plain_file_name(c->file));
      EXPECT_EQ(crc32c(c->data.data(), c->data.size()), c->crc32c);
    }
    (void)decode_announcement(bytes.data(), bytes.size(), nullptr);
  }
}

TEST(WeightLink, DeliversByTransferAndBySharedPath) {
  TempDir root, local;
  ZmqContext ctx;
  WeightPublisher pub(inproc_publisher(ctx.get(), "wl1"));
  Delivered shared, fetched;
  WeightSubscriber s1(subscriber_for(pub, ctx.get(), shared));
  auto o2 = subscriber_for(pub, ctx.get(), fetched);
  o2.prefer_transfer = true;
  o2.local_root = local.path();
  WeightSubscriber s2(o2);

  const WeightVersion v1 = publish(root.path(), 1);
  const Announcement a = pub.announce(v1.dir, WeightKind::kDrafter, {{"tau_hat", 3.1}});
  EXPECT_EQ(a.version, 1u);
  EXPECT_GT(a.chunk_count, 13u);  // 50 000 bytes in 4 KiB pieces, plus the small files
  EXPECT_EQ(a.sha256, sha256(read(fs::path(v1.dir) / "manifest.json")));
  ASSERT_TRUE(s1.wait_delivered(WeightKind::kDrafter, 1, 10s));
  ASSERT_TRUE(s2.wait_delivered(WeightKind::kDrafter, 1, 10s)) << s2.stats().last_failure;

  const auto g1 = shared.snapshot(), g2 = fetched.snapshot();
  ASSERT_EQ(g1.size(), 1u);
  EXPECT_EQ(fs::canonical(g1[0].second), fs::canonical(v1.dir));  // shared filesystem: no copy
  ASSERT_EQ(g2.size(), 1u);
  EXPECT_EQ(fs::path(g2[0].second).parent_path(), fs::path(local.path()));
  EXPECT_NO_THROW(verify_version(g2[0].second, "drafter"));
  EXPECT_TRUE(same_files(v1.dir, g2[0].second));
  EXPECT_EQ(s1.stats().delivered_shared, 1u);
  EXPECT_EQ(s2.stats().fetched, 1u);
  EXPECT_EQ(s2.stats().fetched_bytes, a.size_bytes);
  EXPECT_EQ(pub.stats().chunks_served, a.chunk_count);

  // The next version replaces it; the subscribers keep order and fetch only what is new.
  const WeightVersion v2 = publish(root.path(), 2);
  pub.announce(v2.dir, WeightKind::kDrafter);
  ASSERT_TRUE(s2.wait_delivered(WeightKind::kDrafter, 2, 10s)) << s2.stats().last_failure;
  ASSERT_TRUE(s1.wait_delivered(WeightKind::kDrafter, 2, 10s));
  EXPECT_TRUE(same_files(v2.dir, fetched.snapshot().back().second));
  EXPECT_EQ(fetched.snapshot().size(), 2u);
  EXPECT_EQ(s2.stats().failures, 0u);
  // Versions are immutable and increasing.
  EXPECT_THROW(pub.announce(v1.dir, WeightKind::kDrafter), Error);
  EXPECT_THROW(pub.announce(root.path(), WeightKind::kDrafter), Error);  // not a version directory
  EXPECT_THROW(pub.announce(v2.dir, WeightKind::kPolicy), Error);        // the manifest says drafter
}

TEST(WeightLink, LeftoversOfAnEarlierSubscriberArePruned) {
  TempDir root, local;
  // An earlier process left two complete copies, a half-written one, and files not its own.
  const fs::path old7 = publish(local.path(), 7).dir, old8 = publish(local.path(), 8).dir;
  fs::create_directories(fs::path(local.path()) / "drafter-v00000009.tmp");
  fs::create_directories(fs::path(local.path()) / "policy-v00000003.tmp");  // a kind not followed
  write(fs::path(local.path()) / "notes.txt", "keep");
  ZmqContext ctx;
  WeightPublisher pub(inproc_publisher(ctx.get(), "wl-left"));
  Delivered d;
  auto so = subscriber_for(pub, ctx.get(), d);
  so.prefer_transfer = true;
  so.local_root = local.path();
  WeightSubscriber sub(so);
  pub.announce(publish(root.path(), 1).dir, WeightKind::kDrafter);
  ASSERT_TRUE(sub.wait_delivered(WeightKind::kDrafter, 1, 10s)) << sub.stats().last_failure;
  EXPECT_FALSE(fs::exists(fs::path(local.path()) / "drafter-v00000009.tmp"));
  EXPECT_TRUE(fs::exists(fs::path(local.path()) / "policy-v00000003.tmp"));
  EXPECT_FALSE(fs::exists(old7));  // pruned first: the oldest of three fetched
  EXPECT_TRUE(fs::exists(old8));
  // Version 8 again (a restarted publisher's numbering, new bytes): fetched over the adopted copy,
  // which then counts as the newest, not the oldest.
  const fs::path new8 = publish(root.path(), 8, 30000).dir;
  pub.announce(new8, WeightKind::kDrafter);
  ASSERT_TRUE(sub.wait_delivered(WeightKind::kDrafter, 8, 10s)) << sub.stats().last_failure;
  EXPECT_TRUE(same_files(new8, old8));
  pub.announce(publish(root.path(), 9).dir, WeightKind::kDrafter);
  ASSERT_TRUE(sub.wait_delivered(WeightKind::kDrafter, 9, 10s)) << sub.stats().last_failure;
  EXPECT_FALSE(fs::exists(fs::path(local.path()) / "drafter-v00000001"));
  EXPECT_TRUE(same_files(new8, old8));
  EXPECT_TRUE(fs::exists(fs::path(local.path()) / "drafter-v00000009"));
  EXPECT_EQ(read(fs::path(local.path()) / "notes.txt"), "keep");
}

TEST(WeightLink, LateJoinerOverTcpGetsOnlyTheCurrentVersion) {
  TempDir root, local;
  WeightPublisherOptions po;
  po.pub_endpoint = "tcp://127.0.0.1:0";
  po.request_endpoint = "tcp://127.0.0.1:0";
  po.chunk_bytes = 8192;
  WeightPublisher pub(po);
  for (uint64_t v = 1; v <= 3; ++v)
    pub.announce(publish(root.path(), v).dir, WeightKind::kDrafter);

  Delivered d;
  WeightSubscriberOptions so;  // its own context, as another process would have
  so.pub_endpoint = pub.pub_endpoint();
  so.request_endpoint = pub.request_endpoint();
  so.kinds = {WeightKind::kDrafter};
  so.prefer_transfer = true;
  so.local_root = local.path();
  so.on_version = d.fn();
  so.poll_interval = 60s;  // one version request at start; later versions must come by PUB
  WeightSubscriber sub(so);
  ASSERT_TRUE(sub.wait_delivered(WeightKind::kDrafter, 3, 10s)) << sub.stats().last_failure;
  const auto got = d.snapshot();
  ASSERT_EQ(got.size(), 1u);  // v1 and v2 were superseded before it joined
  EXPECT_EQ(got[0].first, 3u);
  EXPECT_TRUE(same_files(fs::path(root.path()) / version_dir_name("drafter", 3), got[0].second));

  // Newer versions arrive by announcement (PUB); older fetched copies are cleaned up (two kept).
  std::this_thread::sleep_for(200ms);  // the SUB connection is separate from the request one
  for (uint64_t v = 4; v <= 6; ++v) {
    pub.announce(publish(root.path(), v).dir, WeightKind::kDrafter);
    ASSERT_TRUE(sub.wait_delivered(WeightKind::kDrafter, v, 10s)) << sub.stats().last_failure;
  }
  const auto all = d.snapshot();
  for (size_t i = 1; i < all.size(); ++i)
    EXPECT_LT(all[i - 1].first, all[i].first);
  size_t dirs = 0;
  for (const auto& e : fs::directory_iterator(local.path()))
    dirs += e.is_directory();
  EXPECT_EQ(dirs, 2u);
}

}  // namespace
}  // namespace updraft::messaging
