// RocksDB record store: key layout, dedup, retention, reads, secondary mode, crash reopen.
#include "messaging/record_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <set>

#include "kernels/core/error.h"
#include "tests/messaging/test_util.h"

namespace updraft::messaging {
namespace {

using testing::make_record;
using testing::TempDir;

// Encodes records and keeps the bytes alive for RecordStore::write.
struct Batch {
  std::vector<EncodedMessage> msgs;
  std::vector<RecordStore::Item> items;
  void add(RecordData r, uint64_t seq) {
    r.seq = seq;
    msgs.push_back(encode_record(r));
    const Verdict v = validate_record(msgs.back().data(), msgs.back().size());
    if (!v.ok())
      throw std::runtime_error(v.detail);
    items.push_back({v.header, msgs.back().data(), msgs.back().size()});
  }
};

StoreOptions opts(const std::string& path) {
  StoreOptions o;
  o.path = path;
  o.write_buffer_bytes = 1 << 20;
  return o;
}

TEST(RecordKey, BytewiseOrderIsNumericOrder) {
  std::mt19937_64 rng(3);
  std::vector<RecordKey> keys;
  for (int i = 0; i < 500; ++i) {
    // Mix small and huge values so that every byte position matters.
    auto pick = [&](uint64_t bits) { return (rng() % 2) ? rng() % 4 : rng() >> (64 - bits); };
    keys.push_back({pick(64), static_cast<uint32_t>(pick(32)), pick(64)});
  }
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    const auto a = encode_key(keys[i]), b = encode_key(keys[i + 1]);
    ASSERT_EQ(a.size(), kKeyBytes);
    EXPECT_EQ(a < b, keys[i] < keys[i + 1]) << to_string(keys[i]) << " vs " << to_string(keys[i + 1]);
    EXPECT_EQ(decode_key(a), keys[i]);
  }
  EXPECT_EQ(encode_key({1, 2, 3}), std::string("\0\0\0\0\0\0\0\1\0\0\0\2\0\0\0\0\0\0\0\3", 20));
  EXPECT_FALSE(decode_key("short").has_value());
}

TEST(RecordStore, WriteReopenReadBack) {
  TempDir dir;
  {
    auto s = RecordStore::open(opts(dir.path()));
    Batch b;
    for (uint64_t i = 0; i < 10; ++i)
      b.add(make_record(static_cast<uint32_t>(i % 3), 1 + i / 4, i), i / 3);
    const auto r = s->write(b.items);
    EXPECT_EQ(r.stored, 10u);
    EXPECT_EQ(s->stats().records, 10u);
  }
  auto s = RecordStore::open(opts(dir.path()));
  const StoreStats st = s->stats();
  EXPECT_EQ(st.records, 10u);
  EXPECT_EQ(st.min_policy_version, 1u);
  EXPECT_EQ(st.max_policy_version, 3u);
  EXPECT_EQ(st.workers, 3u);
  EXPECT_EQ(s->next_seq(0), 4u);  // worker 0 wrote ids 0,3,6,9 with seq 0,1,2,3
  EXPECT_EQ(s->next_seq(2), 3u);
  EXPECT_EQ(s->next_seq(9), 0u);
  auto rec = s->get({2, 1, 1});  // id 4: worker 1, pv 2, seq 1
  ASSERT_TRUE(rec);
  RecordData want = make_record(1, 2, 4);
  EXPECT_EQ(rec->tokens, want.tokens);
  EXPECT_EQ(rec->aux.bytes, want.aux.bytes);
  EXPECT_FALSE(s->get({2, 1, 77}).has_value());
}

TEST(RecordStore, DuplicatesAreStoredOnce) {
  TempDir dir;
  auto s = RecordStore::open(opts(dir.path()));
  Batch b;
  b.add(make_record(1, 1, 1), 0);
  b.add(make_record(1, 1, 2), 1);
  b.add(make_record(1, 1, 1), 0);  // duplicate inside the batch
  auto r = s->write(b.items);
  EXPECT_EQ(r.stored, 2u);
  EXPECT_EQ(r.duplicate, (std::vector<bool>{false, false, true}));
  r = s->write(b.items);  // a resend of everything
  EXPECT_EQ(r.stored, 0u);
  EXPECT_EQ(s->stats().records, 2u);
}

TEST(RecordStore, ByteRetentionEvictsOldestVersionThenOldestArrival) {
  TempDir dir;
  StoreOptions o = opts(dir.path());
  Batch probe;
  probe.add(make_record(0, 0, 0), 0);
  const uint64_t rec_bytes = probe.items[0].size;
  o.max_bytes = rec_bytes * 10;
  o.low_water = 1.0;
  auto s = RecordStore::open(o);
  // Version 5 written first by worker 9, then version 4 by workers 1 and 2 interleaved.
  uint64_t seq[10] = {};
  auto put = [&](uint32_t w, uint64_t pv, uint64_t id) {
    Batch b;
    b.add(make_record(w, pv, id), seq[w]++);
    s->write(b.items);
  };
  for (int i = 0; i < 4; ++i)
    put(9, 5, 100 + i);
  for (int i = 0; i < 6; ++i)
    put(static_cast<uint32_t>(1 + i % 2), 4, i);
  EXPECT_EQ(s->stats().records, 10u);
  put(2, 4, 50);  // 11 records > cap: the oldest arrival of version 4 goes (worker 1, seq 0)
  EXPECT_EQ(s->stats().records, 10u);
  EXPECT_FALSE(s->contains({4, 1, 0}));
  EXPECT_TRUE(s->contains({4, 2, 0}));
  for (int i = 0; i < 7; ++i)
    put(3, 6, 200 + i);
  // 7 more: all of version 4 (7 records) goes before any of version 5.
  const auto keys = s->keys();
  EXPECT_EQ(keys.size(), 10u);
  for (const auto& k : keys)
    EXPECT_GE(k.policy_version, 5u) << to_string(k);
  EXPECT_LE(s->stats().bytes, o.max_bytes);
  EXPECT_EQ(s->stats().evicted_records, 8u);
}

TEST(RecordStore, VersionWindowRetention) {
  TempDir dir;
  StoreOptions o = opts(dir.path());
  o.version_window = 2;
  auto s = RecordStore::open(o);
  uint64_t seq = 0;
  for (uint64_t pv = 1; pv <= 5; ++pv) {
    Batch b;
    b.add(make_record(1, pv, pv * 10), seq++);
    b.add(make_record(1, pv, pv * 10 + 1), seq++);
    s->write(b.items);
    const StoreStats st = s->stats();
    EXPECT_EQ(st.max_policy_version, pv);
    EXPECT_EQ(st.min_policy_version, pv >= 2 ? pv - 1 : 1);
  }
  EXPECT_EQ(s->stats().records, 4u);
  EXPECT_EQ(s->next_seq(1), 10u);  // survives eviction
}

TEST(RecordStore, ReadApis) {
  TempDir dir;
  auto s = RecordStore::open(opts(dir.path()));
  Batch b;
  for (uint64_t i = 0; i < 30; ++i)
    b.add(make_record(static_cast<uint32_t>(i % 2), 1 + i / 10, i), i / 2);
  s->write(b.items);
  auto latest = s->latest(4);  // by arrival: records 29, 28, 27, 26
  ASSERT_EQ(latest.size(), 4u);
  for (size_t i = 0; i < latest.size(); ++i)
    EXPECT_EQ(latest[i].tokens[0], static_cast<int32_t>(29 - i));
  EXPECT_EQ(latest[0].policy_version, 3u);
  auto last2 = s->last_versions(2);
  EXPECT_EQ(last2.size(), 20u);
  for (const auto& r : last2)
    EXPECT_GE(r.policy_version, 2u);
  EXPECT_EQ(s->last_versions(2, 5).size(), 5u);
  auto a = s->sample(7, 123), a2 = s->sample(7, 123), c = s->sample(7, 124);
  ASSERT_EQ(a.size(), 7u);
  std::set<uint32_t> ids;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, a2[i].tokens);
    ids.insert(static_cast<uint32_t>(a[i].tokens[0]));
  }
  EXPECT_EQ(ids.size(), 7u) << "a sample holds distinct records";
  bool any_diff = false;
  for (size_t i = 0; i < a.size(); ++i)
    any_diff |= a[i].tokens != c[i].tokens;
  EXPECT_TRUE(any_diff) << "another seed draws another sample";
  for (const auto& r : s->sample(50, 1, 1))
    EXPECT_EQ(r.policy_version, 3u);
  EXPECT_EQ(s->sample(50, 1).size(), 30u);
  EXPECT_EQ(s->consumer_lag(), 30u);
  uint64_t tokens = 0, tokens_above = 0;  // response tokens: all records', then those above the mark
  for (const auto& r : s->latest(100)) {
    tokens += r.tokens.size() - r.prompt_length;
    if (r.tokens[0] > 19)  // arrived after record 19, key {2, 1, 9}
      tokens_above += r.tokens.size() - r.prompt_length;
  }
  EXPECT_GT(tokens, 0u);
  EXPECT_EQ(s->consumer_lag_tokens(), tokens);
  s->mark_consumed({2, 1, 9});
  EXPECT_EQ(s->consumer_lag(), 10u);
  EXPECT_EQ(s->consumer_lag_tokens(), tokens_above);
  EXPECT_LT(tokens_above, tokens);
  EXPECT_EQ(s->corrupt_reads(), 0u);
}

// The consumed mark is by arrival: records of a lower worker id that arrive after a higher
// one's were consumed still count as new (the online trainer stalled on this when a worker with
// a high id had written last), and latest() returns them first.
TEST(RecordStore, ConsumerLagCountsArrivalsNotKeys) {
  TempDir dir;
  auto s = RecordStore::open(opts(dir.path()));
  Batch high;
  for (uint64_t i = 0; i < 5; ++i)
    high.add(make_record(102, 1, 100 + i), i);
  s->write(high.items);
  s->mark_consumed({1, 102, 4});
  EXPECT_EQ(s->consumer_lag(), 0u);
  Batch low;
  for (uint64_t i = 0; i < 3; ++i)
    low.add(make_record(1, 1, i), i);
  s->write(low.items);
  EXPECT_EQ(s->consumer_lag(), 3u);
  EXPECT_GT(s->consumer_lag_tokens(), 0u);
  const auto newest = s->latest(3);
  ASSERT_EQ(newest.size(), 3u);
  EXPECT_EQ(newest[0].worker, 1u);
  EXPECT_EQ(newest[0].tokens[0], 2);
  s->mark_consumed({1, 1, 2});
  EXPECT_EQ(s->consumer_lag(), 0u);
  s->mark_consumed({1, 102, 0});  // an older mark does not move it back
  EXPECT_EQ(s->consumer_lag(), 0u);
  s->mark_consumed({9, 9, 9});  // not stored: ignored
  EXPECT_EQ(s->consumer_lag(), 0u);
}

TEST(RecordStore, SecondaryFollowsPrimary) {
  TempDir dir;
  auto primary = RecordStore::open(opts(dir.sub("db")));
  Batch b1;
  b1.add(make_record(1, 1, 1), 0);
  primary->write(b1.items);
  auto sec = RecordStore::open_secondary(dir.sub("db"), dir.sub("secondary"));
  EXPECT_EQ(sec->stats().records, 1u);
  Batch b2;
  b2.add(make_record(1, 2, 2), 1);
  primary->write(b2.items);
  sec->catch_up();
  EXPECT_EQ(sec->stats().records, 2u);
  auto r = sec->get({2, 1, 1});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->tokens, make_record(1, 2, 2).tokens);
  EXPECT_THROW(sec->write(b2.items), CheckFailure);
}

TEST(RecordStore, RefusesForeignDirectory) {
  TempDir dir;
  { auto s = RecordStore::open(opts(dir.path())); }
  // Damage the format tag through a second column-family-less open is not possible; check
  // instead that a bad option is refused with a clear error.
  StoreOptions o = opts(dir.path());
  o.low_water = 0;
  EXPECT_THROW(RecordStore::open(o), Error);
  EXPECT_THROW(parse_sync_policy("sometimes"), Error);
  EXPECT_EQ(parse_sync_policy("os"), SyncPolicy::kOsBuffered);
}

// The writer half of SurvivesKill9OfTheWriter, run in a fresh process (exec of this test
// binary): forking a process that already runs RocksDB's thread pool would be unsafe.
TEST(RecordStoreChild, Writer) {
  const char* dir = std::getenv("UPDRAFT_TEST_WRITER_DIR");
  const char* fd = std::getenv("UPDRAFT_TEST_WRITER_FD");
  if (dir == nullptr || fd == nullptr)
    GTEST_SKIP() << "only runs as the child of SurvivesKill9OfTheWriter";
  const int out = std::atoi(fd);
  StoreOptions o = opts(dir);
  o.sync = SyncPolicy::kOsBuffered;
  auto s = RecordStore::open(o);
  for (uint64_t i = 0;; ++i) {
    Batch b;
    b.add(make_record(4, 1, i, 64, 64), i);
    s->write(b.items);
    if (write(out, &i, sizeof(i)) != sizeof(i))
      _exit(3);
  }
}

// A child process writes records one batch at a time and reports each completed write on a
// pipe; it is killed with SIGKILL mid-stream. Everything reported must be there, intact.
TEST(RecordStore, SurvivesKill9OfTheWriter) {
  TempDir dir;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    setenv("UPDRAFT_TEST_WRITER_DIR", dir.path().c_str(), 1);
    setenv("UPDRAFT_TEST_WRITER_FD", std::to_string(fds[1]).c_str(), 1);
    execl("/proc/self/exe", "messaging_store_test", "--gtest_filter=RecordStoreChild.Writer", nullptr);
    _exit(127);
  }
  close(fds[1]);
  uint64_t last = 0, got = 0, v;
  while (got < 300 && read(fds[0], &v, sizeof(v)) == sizeof(v)) {
    last = v;
    ++got;
  }
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  close(fds[0]);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer should have been killed, status " << status;
  ASSERT_GE(got, 300u);
  auto s = RecordStore::open(opts(dir.path()));
  EXPECT_GE(s->stats().records, last + 1);
  EXPECT_EQ(s->next_seq(4), s->stats().records) << "seqs are contiguous";
  for (uint64_t i = 0; i <= last; ++i) {
    auto r = s->get({1, 4, i});
    ASSERT_TRUE(r) << "reported write " << i << " is missing";
    EXPECT_EQ(r->tokens[0], static_cast<int32_t>(i));
  }
  EXPECT_EQ(s->corrupt_reads(), 0u);
}

}  // namespace
}  // namespace updraft::messaging
