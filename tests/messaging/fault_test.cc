// Fault tests of the record path (anchors.md, fault tests 1, 2 and 6), loopback only, bounded
// in time: kill -9 of the buffer and of a worker, retention under a disk cap with concurrent
// readers. Processes are tests/messaging/msg_test_proc. (SIGSTOP: sigstop_test.cc.)
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "messaging/buffer_server.h"
#include "messaging/record_sender.h"
#include "tests/messaging/proc.h"
#include "tests/messaging/test_util.h"

namespace updraft::messaging {
namespace {

using namespace std::chrono_literals;
using testing::free_tcp_endpoint;
using testing::make_record;
using testing::Proc;
using testing::TempDir;

// seq -> checksum as logged by a worker for every acknowledged record.
std::map<uint64_t, uint32_t> read_ack_log(const std::string& path) {
  std::map<uint64_t, uint32_t> acked;
  std::ifstream f(path);
  uint64_t seq;
  uint32_t crc;
  while (f >> seq >> crc)
    EXPECT_TRUE(acked.emplace(seq, crc).second) << "seq " << seq << " acknowledged twice in " << path;
  return acked;
}

// Checks one worker's stream in the store: acknowledged records present with their checksum,
// seqs contiguous from 0, no content stored twice. Returns the stored content ids.
std::set<int32_t> check_worker(RecordStore& store, uint32_t worker, const std::map<uint64_t, uint32_t>& acked) {
  std::set<uint64_t> seqs;
  std::set<int32_t> ids;
  for (const auto& k : store.keys()) {
    if (k.worker != worker)
      continue;
    seqs.insert(k.seq);
    auto r = store.get(k);
    EXPECT_TRUE(r.has_value()) << to_string(k) << " unreadable";
    if (!r)
      continue;
    EXPECT_TRUE(ids.insert(r->tokens[0]).second) << "content " << r->tokens[0] << " stored twice";
    auto a = acked.find(k.seq);
    if (a != acked.end()) {
      EXPECT_EQ(a->second, r->checksum) << to_string(k) << " checksum differs from the acknowledged one";
    }
  }
  for (const auto& [seq, crc] : acked)
    EXPECT_TRUE(seqs.count(seq)) << "worker " << worker << ": acknowledged seq " << seq << " lost";
  if (!seqs.empty()) {
    EXPECT_EQ(*seqs.begin(), 0u);
    EXPECT_EQ(*seqs.rbegin() + 1, seqs.size()) << "worker " << worker << " has gaps in its seqs";
  }
  EXPECT_EQ(store.corrupt_reads(), 0u);
  return ids;
}

std::shared_ptr<RecordStore> reopen(const std::string& path) {
  StoreOptions o;
  o.path = path;
  return RecordStore::open(o);
}

TEST(FaultBufferKill9, EveryAcknowledgedRecordStoredOnceWithoutGaps) {
  TempDir dir;
  const std::string ep = free_tcp_endpoint();
  const std::string db = dir.sub("db");
  auto buffer = std::make_unique<Proc>(std::vector<std::string>{"buffer", ep, db, "fsync"});
  // The workers stream for about 3.5 s, longer than the 6 kill rounds (about 2.3 s).
  constexpr int kWorkers = 3, kCount = 700;
  std::vector<std::unique_ptr<Proc>> workers;
  for (int w = 0; w < kWorkers; ++w)
    workers.push_back(
        std::make_unique<Proc>(std::vector<std::string>{"worker", ep, std::to_string(w), "1", std::to_string(kCount),
                                                        "64", "32", "5000", dir.sub("acks" + std::to_string(w))}));
  for (int round = 0; round < 6; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250 + 50 * round));
    buffer->kill(SIGKILL);
    ASSERT_EQ(buffer->wait(10s), -SIGKILL);
    buffer = std::make_unique<Proc>(std::vector<std::string>{"buffer", ep, db, "fsync"});
  }
  for (auto& w : workers)
    ASSERT_EQ(w->wait(60s), 0) << "a worker did not get every record acknowledged";
  buffer->kill(SIGTERM);
  ASSERT_EQ(buffer->wait(10s), 0);
  auto store = reopen(db);
  for (int w = 0; w < kWorkers; ++w) {
    const auto acked = read_ack_log(dir.sub("acks" + std::to_string(w)));
    EXPECT_EQ(acked.size(), static_cast<size_t>(kCount));
    const auto ids = check_worker(*store, static_cast<uint32_t>(w), acked);
    EXPECT_EQ(ids.size(), static_cast<size_t>(kCount));
  }
}

TEST(FaultWorkerKill9, RestartedWorkerLosesNothingAcknowledgedAndDuplicatesNothing) {
  TempDir dir;
  const std::string ep = free_tcp_endpoint();
  const std::string db = dir.sub("db");
  Proc buffer({"buffer", ep, db, "fsync"});
  {
    Proc first({"worker", ep, "7", "1", "100000", "64", "32", "1000", dir.sub("acks1")});
    std::this_thread::sleep_for(1200ms);
    first.kill(SIGKILL);
    ASSERT_EQ(first.wait(10s), -SIGKILL);
  }
  Proc second({"worker", ep, "7", "2", "300", "64", "32", "500", dir.sub("acks2")});
  ASSERT_EQ(second.wait(60s), 0);
  buffer.kill(SIGTERM);
  ASSERT_EQ(buffer.wait(10s), 0);
  auto acked = read_ack_log(dir.sub("acks1"));
  EXPECT_GT(acked.size(), 50u) << "the first run should have had records acknowledged before the kill";
  for (const auto& [seq, crc] : read_ack_log(dir.sub("acks2")))
    EXPECT_TRUE(acked.emplace(seq, crc).second) << "the restarted worker reused acknowledged seq " << seq;
  auto store = reopen(db);
  const auto ids = check_worker(*store, 7, acked);
  size_t second_run = 0;
  for (int32_t id : ids)
    second_run += id >= 2000000 ? 1 : 0;
  EXPECT_EQ(second_run, 300u);
}

TEST(FaultRetention, DiskStaysBoundedEvictionOldestFirstReadersSeeWholeRecords) {
  TempDir dir;
  ZmqContext ctx;
  StoreOptions so;
  so.path = dir.sub("db");
  so.max_bytes = 8 << 20;  // RocksDB's buffers follow the cap (write_buffer_bytes stays at its default)
  so.sync = SyncPolicy::kOsBuffered;
  auto store = std::shared_ptr<RecordStore>(RecordStore::open(so));
  BufferServerOptions bo;
  bo.endpoints = {"inproc://retention"};
  bo.zmq_context = ctx.get();
  BufferServer server(bo, store);
  SenderOptions o;
  o.endpoint = "inproc://retention";
  o.zmq_context = ctx.get();
  o.worker = 1;
  o.max_queue_bytes = 64 << 20;
  RecordSender sender(o);
  std::atomic<bool> done{false};
  std::atomic<uint64_t> reads{0}, bad{0};
  // Readers: the primary's read API and a secondary instance, both validating every record.
  std::thread reader([&] {
    auto secondary = RecordStore::open_secondary(so.path, dir.sub("secondary"));
    uint64_t seed = 0;
    while (!done) {
      for (const auto& r : store->sample(4, ++seed)) {
        reads++;
        bad += r.aux.bytes.size() != size_t{128} * 3 * 128 * 2 ? 1 : 0;
      }
      secondary->catch_up();
      for (const auto& r : secondary->latest(3)) {
        reads++;
        bad += r.aux.bytes.size() != size_t{128} * 3 * 128 * 2 ? 1 : 0;
      }
      bad += secondary->corrupt_reads();
    }
  });
  // ~100 KB records, 48 MB in all: six times the cap; two policy versions.
  constexpr int kCount = 480;
  uint64_t peak_disk = 0;
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(sender.submit(make_record(1, 1 + i / 240, i, 128, 128)));
    if (i % 8 == 7) {
      ASSERT_TRUE(sender.flush(20s));
      peak_disk = std::max(peak_disk, store->disk_bytes());
    }
  }
  ASSERT_TRUE(sender.flush(20s));
  done = true;
  reader.join();
  const StoreStats st = store->stats();
  EXPECT_LE(st.bytes, so.max_bytes);
  EXPECT_GT(st.evicted_records, 350u);
  EXPECT_GT(reads.load(), 10u);
  EXPECT_EQ(bad.load(), 0u) << "a reader saw a partial or corrupt record";
  EXPECT_EQ(store->corrupt_reads(), 0u);
  // Disk: the cap, plus the WAL (an eighth of it), the evicted bytes not yet compacted (a
  // sixteenth, and a compaction's output beside its input), and small files: at most 1.5x the cap.
  EXPECT_LE(peak_disk, so.max_bytes * 3 / 2) << "peak disk " << peak_disk;
  // Oldest first: what is left is exactly the newest records.
  std::set<int32_t> ids;
  for (const auto& k : store->keys())
    ids.insert(store->get(k)->tokens[0]);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(*ids.rbegin(), kCount - 1);
  EXPECT_EQ(static_cast<size_t>(*ids.rbegin() - *ids.begin() + 1), ids.size()) << "eviction was not oldest-first";
  std::printf("peak disk %llu bytes for a cap of %llu; %llu evicted; %llu reads\n",
              static_cast<unsigned long long>(peak_disk), static_cast<unsigned long long>(so.max_bytes),
              static_cast<unsigned long long>(st.evicted_records), static_cast<unsigned long long>(reads.load()));
}

}  // namespace
}  // namespace updraft::messaging
