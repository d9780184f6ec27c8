// Counters of the record path, updated with relaxed atomics from any thread, and their
// Prometheus text rendering (names in docs/messaging.md; counters end in _total, base units).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <sstream>
#include <string>

#include "messaging/record.h"

namespace updraft::messaging {

using Counter = std::atomic<uint64_t>;

// Worker side (one per RecordSender).
struct SenderMetrics {
  Counter records_submitted{0};
  Counter records_sent{0};     // first transmissions
  Counter records_resent{0};   // retransmissions after timeout or reconnect
  Counter records_acked{0};    // durably stored (or found already stored) by the buffer
  Counter records_shed{0};     // dropped by the shed policy, never sent
  Counter records_refused{0};  // rejected for good by the buffer (a sender bug)
  Counter records_invalid{0};  // refused at submit: broke the Record contract
  Counter bytes_sent{0};
  Counter bytes_acked{0};
  Counter queue_bytes{0};    // gauge: pending + unacknowledged bytes held
  Counter queue_records{0};  // gauge
  Counter reconnects{0};
};

// Buffer side (one per BufferServer).
struct BufferMetrics {
  Counter records_received{0};
  Counter records_stored{0};
  Counter records_duplicate{0};  // already stored; acknowledged again, not written
  Counter bytes_stored{0};
  Counter write_batches{0};
  Counter write_errors{0};  // store write failed; records left unacknowledged
  std::array<Counter, static_cast<size_t>(Reject::kCount)> rejected{};
  Counter store_bytes{0};    // gauge
  Counter store_records{0};  // gauge
  Counter records_evicted{0};
  Counter bytes_evicted{0};
  Counter consumer_lag_records{0};  // gauge: records newer than what the trainer consumed

  void reject(Reject r) { rejected[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed); }
  uint64_t rejected_count(Reject r) const { return rejected[static_cast<size_t>(r)].load(); }
  uint64_t rejected_total() const;
};

// Prometheus text exposition; `labels` is inserted in every series, e.g. `worker="3"`.
std::string render_prometheus(const SenderMetrics& m, const std::string& labels);
std::string render_prometheus(const BufferMetrics& m, const std::string& labels);

// One series of the exposition (HELP, TYPE, sample), for other roles' metrics.
void prometheus_series(std::ostringstream& os, const char* name, const char* type, const char* help,
                       const std::string& labels, double value);
// Writes `text` beside `path` and renames it over, so a scraper never reads half a file.
void write_metrics_file(const std::string& path, const std::string& text);

}  // namespace updraft::messaging
