#include "messaging/metrics.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernels/core/error.h"

namespace updraft::messaging {

namespace {

void series(std::ostringstream& os, const char* name, const char* type, const char* help, const std::string& labels,
            uint64_t v) {
  os << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n' << name;
  if (!labels.empty())
    os << '{' << labels << '}';
  os << ' ' << v << '\n';
}

}  // namespace

void prometheus_series(std::ostringstream& os, const char* name, const char* type, const char* help,
                       const std::string& labels, double value) {
  os << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n' << name;
  if (!labels.empty())
    os << '{' << labels << '}';
  os << ' ' << value << '\n';
}

void write_metrics_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    UPD_REQUIRE(f.good()) << "cannot write metrics file " << tmp;
    f << text;
    f.flush();
    UPD_REQUIRE(f.good()) << "cannot write metrics file " << tmp;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  UPD_REQUIRE(!ec) << "cannot rename " << tmp << " to " << path << ": " << ec.message();
}

uint64_t BufferMetrics::rejected_total() const {
  uint64_t t = 0;
  for (const auto& c : rejected)
    t += c.load();
  return t;
}

std::string render_prometheus(const SenderMetrics& m, const std::string& labels) {
  std::ostringstream os;
  series(os, "updraft_records_submitted_total", "counter", "Records handed to the sender", labels, m.records_submitted);
  series(os, "updraft_records_sent_total", "counter", "Records transmitted for the first time", labels, m.records_sent);
  series(os, "updraft_records_resent_total", "counter", "Record retransmissions", labels, m.records_resent);
  series(os, "updraft_records_acked_total", "counter", "Records the buffer acknowledged", labels, m.records_acked);
  series(os, "updraft_records_shed_total", "counter", "Records shed under backpressure", labels, m.records_shed);
  series(os, "updraft_records_refused_total", "counter", "Records the buffer refused", labels, m.records_refused);
  series(os, "updraft_records_invalid_total", "counter", "Records refused at submit", labels, m.records_invalid);
  series(os, "updraft_record_bytes_sent_total", "counter", "Encoded record bytes sent", labels, m.bytes_sent);
  series(os, "updraft_record_bytes_acked_total", "counter", "Encoded record bytes acknowledged", labels, m.bytes_acked);
  series(os, "updraft_sender_queue_bytes", "gauge", "Bytes held by the sender queue", labels, m.queue_bytes);
  series(os, "updraft_sender_queue_records", "gauge", "Records held by the sender queue", labels, m.queue_records);
  series(os, "updraft_sender_reconnects_total", "counter", "Reconnections to the buffer", labels, m.reconnects);
  return os.str();
}

std::string render_prometheus(const BufferMetrics& m, const std::string& labels) {
  std::ostringstream os;
  series(os, "updraft_buffer_records_received_total", "counter", "Record messages received", labels,
         m.records_received);
  series(os, "updraft_buffer_records_stored_total", "counter", "Records durably written", labels, m.records_stored);
  series(os, "updraft_buffer_records_duplicate_total", "counter", "Resent records already stored", labels,
         m.records_duplicate);
  series(os, "updraft_buffer_bytes_stored_total", "counter", "Record bytes durably written", labels, m.bytes_stored);
  series(os, "updraft_buffer_write_batches_total", "counter", "Store write batches", labels, m.write_batches);
  series(os, "updraft_buffer_write_errors_total", "counter", "Store writes that failed", labels, m.write_errors);
  os << "# HELP updraft_buffer_records_rejected_total Messages refused, by reason\n"
     << "# TYPE updraft_buffer_records_rejected_total counter\n";
  for (size_t i = 1; i < m.rejected.size(); ++i) {
    os << "updraft_buffer_records_rejected_total{" << labels << (labels.empty() ? "" : ",") << "reason=\""
       << reject_name(static_cast<Reject>(i)) << "\"} " << m.rejected[i].load() << '\n';
  }
  series(os, "updraft_buffer_store_bytes", "gauge", "Record bytes held in the store", labels, m.store_bytes);
  series(os, "updraft_buffer_store_records", "gauge", "Records held in the store", labels, m.store_records);
  series(os, "updraft_buffer_records_evicted_total", "counter", "Records removed by retention", labels,
         m.records_evicted);
  series(os, "updraft_buffer_bytes_evicted_total", "counter", "Record bytes removed by retention", labels,
         m.bytes_evicted);
  series(os, "updraft_buffer_consumer_lag_records", "gauge", "Records newer than what the trainer consumed", labels,
         m.consumer_lag_records);
  return os.str();
}

}  // namespace updraft::messaging
