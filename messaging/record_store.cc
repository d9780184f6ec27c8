// RecordStore (record_store.h): opening a primary or secondary instance, rebuilding the
// in-memory index from RocksDB, writes, retention and catch_up. The read and consumer paths
// are in record_store_read.cc.
#include "messaging/record_store.h"

#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "kernels/core/error.h"
#include "messaging/record_store_detail.h"

namespace updraft::messaging {

namespace {

constexpr char kFormatKey[] = "format";
constexpr char kFormatValue[] = "updraft-buffer-1";
constexpr char kArrivalKey[] = "arrival";
constexpr char kNextSeqPrefix[] = "next_seq/";

std::string be64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i)
    s[i] = static_cast<char>((v >> (56 - 8 * i)) & 0xFFu);
  return s;
}

uint64_t from_be64(std::string_view s) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8 && i < s.size(); ++i)
    v = (v << 8) | static_cast<uint8_t>(s[i]);
  return v;
}

std::string next_seq_key(uint32_t worker) {
  std::string k = kNextSeqPrefix;
  for (int i = 3; i >= 0; --i)
    k.push_back(static_cast<char>((worker >> (8 * i)) & 0xFFu));
  return k;
}

// Index values: be64 size, be64 arrival, and (added later) be64 response tokens.
std::string index_value(uint64_t size, uint64_t arrival, uint64_t response_tokens) {
  return be64(size) + be64(arrival) + be64(response_tokens);
}

rocksdb::Options base_options(size_t write_buffer_bytes) {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  o.write_buffer_size = write_buffer_bytes;
  o.max_write_buffer_number = 3;
  // The index column family's memtable stays small; cap the WAL so it cannot pin old logs.
  o.max_total_wal_size = 2 * write_buffer_bytes;
  o.target_file_size_base = write_buffer_bytes;
  o.max_bytes_for_level_base = 4 * write_buffer_bytes;
  o.compression = rocksdb::kNoCompression;  // bf16 activations do not compress
  o.max_background_jobs = 2;
  o.keep_log_file_num = 2;
  o.max_log_file_size = 1 << 20;
  o.recycle_log_file_num = 0;
  return o;
}

// With a byte cap RocksDB's own buffers follow it, so the cap bounds the disk and not just the
// values: memtables (and SST files) of cap/16, between 256 KiB and write_buffer_bytes, and the
// WAL they bound (twice that).
size_t write_buffer_for(const StoreOptions& o) {
  if (o.max_bytes == 0)
    return o.write_buffer_bytes;
  return std::clamp<size_t>(o.max_bytes / 16, std::min<size_t>(256 << 10, o.write_buffer_bytes), o.write_buffer_bytes);
}

std::vector<rocksdb::ColumnFamilyDescriptor> descriptors(const rocksdb::Options& o) {
  return {{rocksdb::kDefaultColumnFamilyName, o}, {"records", o}, {"index", o}};
}

}  // namespace

const char* sync_policy_name(SyncPolicy p) {
  return p == SyncPolicy::kEveryBatch ? "fsync" : "os";
}

SyncPolicy parse_sync_policy(const std::string& s) {
  if (s == "fsync")
    return SyncPolicy::kEveryBatch;
  if (s == "os")
    return SyncPolicy::kOsBuffered;
  UPD_FAIL() << "unknown sync policy '" << s << "' (expected fsync or os)";
  return SyncPolicy::kEveryBatch;
}

std::unique_ptr<RecordStore> RecordStore::open(const StoreOptions& options) {
  UPD_REQUIRE(!options.path.empty()) << "buffer store: empty path";
  UPD_REQUIRE(options.low_water > 0 && options.low_water <= 1) << "buffer store: low_water must be in (0, 1]";
  std::error_code ec;
  std::filesystem::create_directories(options.path, ec);
  UPD_REQUIRE(!ec) << "buffer store: cannot create " << options.path << ": " << ec.message();
  std::unique_ptr<RecordStore> s(new RecordStore());
  s->options_ = options;
  const rocksdb::Options o = base_options(write_buffer_for(options));
  rocksdb::DB* db = nullptr;
  UPD_ROCKS_CHECK(rocksdb::DB::Open(o, options.path, descriptors(o), &s->handles_, &db)) << options.path;
  s->db_.reset(db);
  s->meta_cf_ = s->handles_[0];
  s->records_cf_ = s->handles_[1];
  s->index_cf_ = s->handles_[2];
  std::string format;
  rocksdb::Status st = s->db_->Get(rocksdb::ReadOptions(), s->meta_cf_, kFormatKey, &format);
  if (st.IsNotFound()) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    UPD_ROCKS_CHECK(s->db_->Put(wo, s->meta_cf_, kFormatKey, kFormatValue)) << options.path;
  } else {
    UPD_ROCKS_CHECK(st) << options.path;
    UPD_REQUIRE(format == kFormatValue) << options.path << " is not an updraft buffer (format '" << format << "')";
  }
  std::lock_guard<std::mutex> lock(s->mu_);
  s->load_index();
  s->enforce_retention();
  return s;
}

std::unique_ptr<RecordStore> RecordStore::open_secondary(const std::string& path, const std::string& secondary_path,
                                                         const DecodeLimits& limits) {
  std::unique_ptr<RecordStore> s(new RecordStore());
  s->options_.path = path;
  s->options_.limits = limits;
  s->secondary_ = true;
  rocksdb::Options o = base_options(size_t{64} << 20);
  o.create_if_missing = false;
  o.max_open_files = -1;  // required by secondary instances
  rocksdb::DB* db = nullptr;
  UPD_ROCKS_CHECK(rocksdb::DB::OpenAsSecondary(o, path, secondary_path, descriptors(o), &s->handles_, &db))
      << path << " (secondary at " << secondary_path << ")";
  s->db_.reset(db);
  s->meta_cf_ = s->handles_[0];
  s->records_cf_ = s->handles_[1];
  s->index_cf_ = s->handles_[2];
  std::lock_guard<std::mutex> lock(s->mu_);
  s->load_index();
  return s;
}

RecordStore::~RecordStore() {
  if (!db_)
    return;
  for (auto* h : handles_)
    db_->DestroyColumnFamilyHandle(h);  // status ignored: nothing to do about it while closing
  handles_.clear();
  db_->Close();
  db_.reset();
}

void RecordStore::load_index() {
  index_.clear();
  eviction_order_.clear();
  by_arrival_.clear();
  next_seq_.clear();
  total_bytes_ = 0;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), index_cf_));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      auto k = decode_key(std::string_view(it->key().data(), it->key().size()));
      const auto v = it->value();
      UPD_REQUIRE(k && (v.size() == 16 || v.size() == 24)) << options_.path << ": corrupt index entry";
      Entry e{from_be64(std::string_view(v.data(), 8)), from_be64(std::string_view(v.data() + 8, 8)),
              v.size() == 24 ? from_be64(std::string_view(v.data() + 16, 8)) : 0};
      index_[*k] = e;
      eviction_order_[{k->policy_version, e.arrival}] = *k;
      by_arrival_[e.arrival] = *k;
      total_bytes_ += e.size;
      next_arrival_ = std::max(next_arrival_, e.arrival + 1);
    }
    UPD_ROCKS_CHECK(it->status()) << options_.path << " (index scan)";
  }
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_cf_));
    for (it->Seek(kNextSeqPrefix); it->Valid() && it->key().starts_with(kNextSeqPrefix); it->Next()) {
      const auto k = it->key();
      const size_t p = sizeof(kNextSeqPrefix) - 1;
      UPD_REQUIRE(k.size() == p + 4 && it->value().size() == 8) << options_.path << ": corrupt next_seq entry";
      uint32_t w = 0;
      for (size_t i = 0; i < 4; ++i)
        w = (w << 8) | static_cast<uint8_t>(k.data()[p + i]);
      next_seq_[w] = from_be64(std::string_view(it->value().data(), 8));
    }
    UPD_ROCKS_CHECK(it->status()) << options_.path << " (metadata scan)";
  }
  std::string arrival;
  rocksdb::Status st = db_->Get(rocksdb::ReadOptions(), meta_cf_, kArrivalKey, &arrival);
  if (st.ok())
    next_arrival_ = std::max(next_arrival_, from_be64(arrival));
  else
    UPD_REQUIRE(st.IsNotFound()) << "RocksDB: " << st.ToString() << " reading " << options_.path;
}

RecordStore::WriteResult RecordStore::write(const std::vector<Item>& items) {
  UPD_CHECK(!secondary_) << "write on a secondary store";
  WriteResult result;
  result.duplicate.assign(items.size(), false);
  std::lock_guard<std::mutex> lock(mu_);
  rocksdb::WriteBatch batch;
  std::map<RecordKey, Entry> added;
  std::map<uint32_t, uint64_t> seqs;
  uint64_t arrival = next_arrival_;
  for (size_t i = 0; i < items.size(); ++i) {
    const RecordHeader& h = items[i].header;
    const RecordKey k{h.policy_version, h.worker, h.seq};
    if (index_.count(k) != 0 || added.count(k) != 0) {
      result.duplicate[i] = true;
      continue;
    }
    const std::string key = encode_key(k);
    UPD_ROCKS_CHECK(
        batch.Put(records_cf_, key, rocksdb::Slice(reinterpret_cast<const char*>(items[i].data), items[i].size)));
    UPD_ROCKS_CHECK(batch.Put(index_cf_, key, index_value(items[i].size, arrival, h.response_tokens)));
    added[k] = Entry{items[i].size, arrival++, h.response_tokens};
    uint64_t& next = seqs[h.worker];
    auto known = next_seq_.find(h.worker);
    next = std::max({next, h.seq + 1, known == next_seq_.end() ? uint64_t{0} : known->second});
    result.bytes += items[i].size;
  }
  if (added.empty())
    return result;
  for (const auto& [w, next] : seqs)
    UPD_ROCKS_CHECK(batch.Put(meta_cf_, next_seq_key(w), be64(next)));
  UPD_ROCKS_CHECK(batch.Put(meta_cf_, kArrivalKey, be64(arrival)));
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync == SyncPolicy::kEveryBatch;
  UPD_ROCKS_CHECK(db_->Write(wo, &batch)) << options_.path;
  for (const auto& [k, e] : added) {
    index_[k] = e;
    eviction_order_[{k.policy_version, e.arrival}] = k;
    by_arrival_[e.arrival] = k;
    total_bytes_ += e.size;
  }
  for (const auto& [w, next] : seqs)
    next_seq_[w] = next;
  next_arrival_ = arrival;
  result.stored = added.size();
  enforce_retention();
  return result;
}

void RecordStore::enforce_retention() {
  if (secondary_ || index_.empty())
    return;
  const uint64_t max_pv = index_.rbegin()->first.policy_version;
  const uint64_t w = options_.version_window;
  const uint64_t min_keep_pv = (w == 0 || max_pv < w) ? 0 : max_pv - w + 1;
  const uint64_t cap = options_.max_bytes;
  const bool over_bytes = cap != 0 && total_bytes_ > cap;
  const uint64_t target = over_bytes ? static_cast<uint64_t>(options_.low_water * static_cast<double>(cap)) : 0;
  rocksdb::WriteBatch batch;
  std::vector<RecordKey> victims;
  uint64_t freed = 0;
  for (auto it = eviction_order_.begin(); it != eviction_order_.end(); ++it) {
    const RecordKey& k = it->second;
    const bool too_old = k.policy_version < min_keep_pv;
    const bool too_big = over_bytes && total_bytes_ - freed > target;
    if (!too_old && !too_big)
      break;
    const std::string key = encode_key(k);
    UPD_ROCKS_CHECK(batch.Delete(records_cf_, key));
    UPD_ROCKS_CHECK(batch.Delete(index_cf_, key));
    freed += index_.at(k).size;
    victims.push_back(k);
  }
  if (victims.empty())
    return;
  // Not synced: an eviction lost in a crash is simply redone when the store reopens.
  UPD_ROCKS_CHECK(db_->Write(rocksdb::WriteOptions(), &batch)) << options_.path << " (eviction)";
  for (const RecordKey& k : victims) {
    const Entry e = index_.at(k);
    eviction_order_.erase({k.policy_version, e.arrival});
    by_arrival_.erase(e.arrival);
    index_.erase(k);
    evicted_lo_ = evicted_lo_ ? std::min(*evicted_lo_, k) : k;
    evicted_hi_ = evicted_hi_ ? std::max(*evicted_hi_, k) : k;
  }
  total_bytes_ -= freed;
  evicted_records_ += victims.size();
  evicted_bytes_ += freed;
  evicted_since_compaction_ += freed;
  const uint64_t threshold = cap != 0 ? std::max<uint64_t>(cap / 16, 1) : uint64_t{64} << 20;
  if (evicted_since_compaction_ >= threshold) {
    // Deleted values occupy disk until compaction drops them: compact the evicted key span.
    const std::string lo = encode_key(*evicted_lo_);
    const std::string hi = encode_key(*evicted_hi_);
    const rocksdb::Slice b(lo), e(hi);
    rocksdb::CompactRangeOptions cro;
    cro.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForceOptimized;
    UPD_ROCKS_CHECK(db_->CompactRange(cro, records_cf_, &b, &e)) << options_.path << " (reclaiming space)";
    UPD_ROCKS_CHECK(db_->CompactRange(cro, index_cf_, &b, &e)) << options_.path << " (reclaiming space)";
    evicted_since_compaction_ = 0;
    evicted_lo_.reset();
    evicted_hi_.reset();
  }
}

void RecordStore::catch_up() {
  UPD_CHECK(secondary_) << "catch_up on a primary store";
  UPD_ROCKS_CHECK(db_->TryCatchUpWithPrimary()) << options_.path;
  std::lock_guard<std::mutex> lock(mu_);
  load_index();
}

}  // namespace updraft::messaging
