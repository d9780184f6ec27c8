// The read and consumer paths of RecordStore (declared in record_store.h): listing, reading
// and sampling records, the consumer's lag, and statistics. Opening, recovery, writes,
// retention and catch_up are in record_store.cc.
#include <rocksdb/options.h>

#include <algorithm>
#include <filesystem>

#include "kernels/core/error.h"
#include "messaging/record_store.h"
#include "messaging/record_store_detail.h"

namespace updraft::messaging {

namespace {

// splitmix64: a small seeded generator whose output is the same on every platform.
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) by rejection, so the draw has no modulo bias.
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
      x = next();
    } while (x >= limit);
    return x % n;
  }
};

uint64_t dir_bytes(const std::string& path) {
  uint64_t total = 0;
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fe;
    if (it->is_regular_file(fe)) {
      const auto n = it->file_size(fe);
      if (!fe)
        total += n;
    }
  }
  return total;
}

}  // namespace

uint64_t RecordStore::next_seq(uint32_t worker) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = next_seq_.find(worker);
  return it == next_seq_.end() ? 0 : it->second;
}

bool RecordStore::contains(const RecordKey& k) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.count(k) != 0;
}

std::vector<RecordData> RecordStore::read_keys(const std::vector<RecordKey>& keys) const {
  std::vector<RecordData> out;
  out.reserve(keys.size());
  rocksdb::PinnableSlice value;
  for (const RecordKey& k : keys) {
    value.Reset();
    rocksdb::Status st = db_->Get(rocksdb::ReadOptions(), records_cf_, encode_key(k), &value);
    if (st.IsNotFound())
      continue;  // evicted since it was listed
    UPD_ROCKS_CHECK(st) << options_.path << " reading " << to_string(k);
    const Verdict v = validate_record(value.data(), value.size(), options_.limits);
    if (!v.ok() || v.header.worker != k.worker || v.header.seq != k.seq ||
        v.header.policy_version != k.policy_version) {
      corrupt_reads_.fetch_add(1);
      continue;
    }
    out.push_back(decode_record(value.data(), value.size(), options_.limits));
  }
  return out;
}

std::vector<RecordData> RecordStore::latest(size_t n) const {
  std::vector<RecordKey> keys;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = by_arrival_.rbegin(); it != by_arrival_.rend() && keys.size() < n; ++it)
      keys.push_back(it->second);
  }
  return read_keys(keys);
}

std::vector<RecordData> RecordStore::last_versions(uint64_t versions, size_t max_records) const {
  std::vector<RecordKey> keys;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.empty() || versions == 0)
      return {};
    const uint64_t max_pv = index_.rbegin()->first.policy_version;
    const uint64_t lo = max_pv < versions ? 0 : max_pv - versions + 1;
    for (auto it = index_.lower_bound(RecordKey{lo, 0, 0}); it != index_.end() && keys.size() < max_records; ++it)
      keys.push_back(it->first);
  }
  return read_keys(keys);
}

std::vector<RecordData> RecordStore::sample(size_t n, uint64_t seed, uint64_t versions) const {
  std::vector<RecordKey> pool;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.empty())
      return {};
    const uint64_t max_pv = index_.rbegin()->first.policy_version;
    const uint64_t lo = (versions == 0 || max_pv < versions) ? 0 : max_pv - versions + 1;
    for (auto it = index_.lower_bound(RecordKey{lo, 0, 0}); it != index_.end(); ++it)
      pool.push_back(it->first);
  }
  SplitMix rng{seed};
  const size_t take = std::min(n, pool.size());
  for (size_t i = 0; i < take; ++i)
    std::swap(pool[i], pool[i + rng.below(pool.size() - i)]);
  pool.resize(take);
  return read_keys(pool);
}

std::optional<RecordData> RecordStore::get(const RecordKey& k) const {
  auto v = read_keys({k});
  if (v.empty())
    return std::nullopt;
  return std::move(v.front());
}

std::optional<std::string> RecordStore::get_raw(const RecordKey& k) const {
  std::string value;
  rocksdb::Status st = db_->Get(rocksdb::ReadOptions(), records_cf_, encode_key(k), &value);
  if (st.IsNotFound())
    return std::nullopt;
  UPD_ROCKS_CHECK(st) << options_.path << " reading " << to_string(k);
  return value;
}

std::vector<RecordKey> RecordStore::keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RecordKey> out;
  out.reserve(index_.size());
  for (const auto& [k, e] : index_)
    out.push_back(k);
  return out;
}

void RecordStore::mark_consumed(const RecordKey& k) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(k);
  if (it != index_.end())
    consumed_arrival_ = consumed_arrival_ ? std::max(*consumed_arrival_, it->second.arrival) : it->second.arrival;
}

uint64_t RecordStore::consumer_lag() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!consumed_arrival_)
    return index_.size();
  return static_cast<uint64_t>(std::distance(by_arrival_.upper_bound(*consumed_arrival_), by_arrival_.end()));
}

uint64_t RecordStore::consumer_lag_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t t = 0;
  for (auto it = consumed_arrival_ ? by_arrival_.upper_bound(*consumed_arrival_) : by_arrival_.begin();
       it != by_arrival_.end(); ++it)
    t += index_.at(it->second).response_tokens;
  return t;
}

StoreStats RecordStore::stats() const {
  StoreStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.records = index_.size();
    s.bytes = total_bytes_;
    if (!index_.empty()) {
      s.min_policy_version = index_.begin()->first.policy_version;
      s.max_policy_version = index_.rbegin()->first.policy_version;
    }
    s.workers = next_seq_.size();
    s.evicted_records = evicted_records_;
    s.evicted_bytes = evicted_bytes_;
  }
  return s;
}

uint64_t RecordStore::disk_bytes() const {
  return dir_bytes(options_.path);
}

}  // namespace updraft::messaging
