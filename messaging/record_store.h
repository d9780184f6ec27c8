// The buffer's durable record store (RocksDB), layout in docs/messaging.md.
//
// Column families: "records" (key -> the record message exactly as received and validated),
// "index" (key -> 16 bytes: value size, arrival number), "default" (metadata: format tag,
// arrival counter, per-worker next seq). A record and its index entry are written in one
// WriteBatch, so after any crash both or neither exist.
//
// Primary mode (RecordStore::open): ONE writer process. write() is durable per the sync
// policy when it returns; duplicates (key already present) are skipped and reported.
// Retention runs after each write: while the stored record bytes exceed max_bytes (down to
// low_water * max_bytes) and while a record's policy_version is older than the newest minus
// version_window - 1, the oldest records go first: lowest policy_version, then earliest
// arrival. Evicted records are deleted and, once the evicted bytes since the last
// compaction pass reach a sixteenth of max_bytes (or 64 MiB without a byte cap), the
// affected key range is compacted so the disk space is actually freed. With a byte cap the
// directory stays within 1.5 x max_bytes under sustained overload (docs/messaging.md).
//
// Secondary mode (RecordStore::open_secondary): read-only view of a store another process
// writes; catch_up() follows the primary.
//
// Reads never return a partial record: each value is read whole, decoded and its checksum
// verified; records that vanish (evicted) between listing and reading are skipped.
//
// Thread safety: all methods may be called concurrently (one internal mutex guards the
// in-memory index; RocksDB is thread-safe). Errors: RocksDB failures throw updraft::Error.
#pragma once

#include <rocksdb/db.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "messaging/codec.h"
#include "messaging/key.h"

namespace updraft::messaging {

enum class SyncPolicy {
  kEveryBatch,  // fsync the WAL before write() returns: acknowledged data survives power loss
  kOsBuffered,  // WAL in the OS page cache: survives kill -9 of any process, not power loss
};

const char* sync_policy_name(SyncPolicy p);
// "fsync" or "os"; throws updraft::Error otherwise.
SyncPolicy parse_sync_policy(const std::string& s);

struct StoreOptions {
  std::string path;
  uint64_t max_bytes = 0;       // 0: no byte cap
  uint64_t version_window = 0;  // 0: keep every policy version
  double low_water = 0.9;       // byte eviction stops at low_water * max_bytes
  SyncPolicy sync = SyncPolicy::kEveryBatch;
  // RocksDB memtable (and SST file) size; with max_bytes set, min(this, max_bytes / 16) (at
  // least 256 KiB), so the WAL and memtables stay a small share of the cap.
  size_t write_buffer_bytes = size_t{64} << 20;
  DecodeLimits limits;  // for reads
};

struct StoreStats {
  uint64_t records = 0;
  uint64_t bytes = 0;  // record bytes (values), not disk usage
  uint64_t min_policy_version = 0;
  uint64_t max_policy_version = 0;
  uint64_t workers = 0;
  uint64_t evicted_records = 0;  // by this instance
  uint64_t evicted_bytes = 0;
  uint64_t disk_bytes = 0;  // every file under the store's directory
};

class RecordStore {
 public:
  // One validated record to write: its header (from validate_record) and its message bytes.
  struct Item {
    RecordHeader header;
    const uint8_t* data = nullptr;
    size_t size = 0;
  };
  struct WriteResult {
    std::vector<bool> duplicate;  // per item: true when the key was already stored
    size_t stored = 0;
    uint64_t bytes = 0;
  };

  static std::unique_ptr<RecordStore> open(const StoreOptions& options);
  static std::unique_ptr<RecordStore> open_secondary(const std::string& path, const std::string& secondary_path,
                                                     const DecodeLimits& limits = {});
  ~RecordStore();
  RecordStore(const RecordStore&) = delete;
  RecordStore& operator=(const RecordStore&) = delete;

  // REQUIRES: primary. Writes the non-duplicate items in one atomic batch, then applies
  // retention. Items must have passed validate_record.
  WriteResult write(const std::vector<Item>& items);
  // One past the highest seq ever stored for the worker (0 if none); survives eviction.
  uint64_t next_seq(uint32_t worker) const;
  bool contains(const RecordKey& k) const;

  // The n records stored most recently (by arrival at the store, whatever their worker or key),
  // newest first.
  std::vector<RecordData> latest(size_t n) const;
  // Records of the newest `versions` policy versions present, in key order, at most max_records.
  std::vector<RecordData> last_versions(uint64_t versions, size_t max_records = SIZE_MAX) const;
  // n distinct records drawn uniformly (fewer if the store holds fewer), deterministic for a
  // given seed and store content; from the newest `versions` versions when versions > 0.
  std::vector<RecordData> sample(size_t n, uint64_t seed, uint64_t versions = 0) const;
  std::optional<RecordData> get(const RecordKey& k) const;
  // The stored message bytes of k, unvalidated (for inspection tools).
  std::optional<std::string> get_raw(const RecordKey& k) const;
  std::vector<RecordKey> keys() const;

  // The trainer reports the newest record it has consumed (a stored key; others are ignored):
  // every record that arrived up to it counts as consumed, and lag counts those that arrived
  // after. By arrival, not by key: a worker with a lower id whose records arrive later is not
  // hidden behind one with a higher id.
  void mark_consumed(const RecordKey& k);
  uint64_t consumer_lag() const;
  // Response tokens in the records that arrived after the consumed one (a token-count trigger).
  uint64_t consumer_lag_tokens() const;

  StoreStats stats() const;
  // Bytes of every file under the store's directory (walks it; not for hot paths).
  uint64_t disk_bytes() const;
  // REQUIRES: secondary. Follows the primary's writes and evictions.
  void catch_up();
  bool is_secondary() const { return secondary_; }
  // Records that failed decoding or their checksum on read (skipped; should stay 0).
  uint64_t corrupt_reads() const { return corrupt_reads_.load(); }

 private:
  struct Entry {
    uint64_t size = 0;
    uint64_t arrival = 0;
    uint64_t response_tokens = 0;  // 0 for entries written before the index carried it
  };
  RecordStore() = default;
  void load_index();         // REQUIRES: mu_ held
  void enforce_retention();  // REQUIRES: mu_ held
  std::vector<RecordData> read_keys(const std::vector<RecordKey>& keys) const;

  StoreOptions options_;
  bool secondary_ = false;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;  // default, records, index
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* records_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* index_cf_ = nullptr;

  mutable std::mutex mu_;
  std::map<RecordKey, Entry> index_;
  std::map<std::pair<uint64_t, uint64_t>, RecordKey> eviction_order_;  // (policy_version, arrival)
  std::map<uint64_t, RecordKey> by_arrival_;
  std::map<uint32_t, uint64_t> next_seq_;
  uint64_t total_bytes_ = 0;
  uint64_t next_arrival_ = 0;
  uint64_t evicted_records_ = 0;
  uint64_t evicted_bytes_ = 0;
  uint64_t evicted_since_compaction_ = 0;
  std::optional<RecordKey> evicted_lo_, evicted_hi_;
  std::optional<uint64_t> consumed_arrival_;
  mutable std::atomic<uint64_t> corrupt_reads_{0};
};

}  // namespace updraft::messaging
