#include "messaging/buffer_main.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "kernels/core/error.h"
#include "kernels/core/stop_signals.h"
#include "messaging/buffer_server.h"
#include "messaging/curve_keys.h"
#include "messaging/metrics.h"
#include "messaging/quarantine.h"

namespace updraft::messaging {

namespace {

RecordKey parse_key(const std::string& s) {
  const std::optional<RecordKey> k = parse_key_text(s);
  UPD_REQUIRE(k.has_value()) << "bad record key '" << s << "' (expected policy_version/worker/seq)";
  return *k;
}

void print_quarantine(const std::string& path, const RecordStore& store) {
  UPD_REQUIRE(std::filesystem::exists(path)) << "no quarantine log at " << path;
  const std::vector<QuarantineEntry> entries = QuarantineLog::load(path);
  std::printf("quarantine %s: %zu records\n", path.c_str(), entries.size());
  for (const QuarantineEntry& e : entries)
    std::printf("  %-20s round %-5lld %s  %s\n", key_text(e.key).c_str(), static_cast<long long>(e.round),
                store.contains(e.key) ? "stored " : "evicted", e.reason.c_str());
}

}  // namespace

int run_buffer(const BufferCommandOptions& o, const std::atomic<bool>* stop) {
  // Handlers first: a SIGTERM that arrives while the store opens still stops cleanly.
  const StopSignals signals;
  StoreOptions so;
  so.path = o.path;
  so.max_bytes = o.max_bytes;
  so.version_window = o.version_window;
  so.sync = parse_sync_policy(o.sync);
  so.limits.max_message_bytes = o.max_message_bytes;
  auto store = std::shared_ptr<RecordStore>(RecordStore::open(so));
  BufferServerOptions bo;
  bo.endpoints = {o.endpoint};
  bo.limits.max_message_bytes = o.max_message_bytes;
  UPD_REQUIRE(o.curve_key_file.empty() == o.curve_allow_file.empty())
      << "buffer: give both --curve-key and --curve-allow, or neither";
  if (!o.curve_key_file.empty())
    bo.curve = curve_server_from_files(o.curve_key_file, o.curve_allow_file);
  BufferServer server(bo, store);
  const StoreStats st = store->stats();
  spdlog::info("buffer: serving {} into {} ({} records, {} bytes, sync {}, cap {} bytes, window {}{})",
               server.endpoints().at(0), o.path, st.records, st.bytes, o.sync, o.max_bytes, o.version_window,
               bo.curve ? fmt::format(", CURVE: {} clients allowed", bo.curve->allowed_clients.size()) : "");
  auto last = std::chrono::steady_clock::now();
  while (!signals.requested() && !(stop != nullptr && stop->load())) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto now = std::chrono::steady_clock::now();
    if (o.report_seconds > 0 && now - last >= std::chrono::duration<double>(o.report_seconds)) {
      last = now;
      const auto& m = server.metrics();
      spdlog::info("buffer: stored {} records ({} bytes), duplicates {}, rejected {}, held {} records / {} bytes",
                   m.records_stored.load(), m.bytes_stored.load(), m.records_duplicate.load(), m.rejected_total(),
                   m.store_records.load(), m.store_bytes.load());
      if (!o.metrics_file.empty())
        write_metrics_file(o.metrics_file, render_prometheus(m, ""));
    }
  }
  spdlog::info("buffer: stopping");
  return 0;
}

int run_inspect_buffer(const InspectBufferOptions& o) {
  UPD_REQUIRE(std::filesystem::exists(o.path)) << "no buffer at " << o.path;
  std::optional<RecordKey> key;
  if (!o.key.empty())
    key = parse_key(o.key);
  char tmpl[] = "/tmp/updraft-inspect-XXXXXX";
  UPD_REQUIRE(mkdtemp(tmpl) != nullptr) << "mkdtemp failed";
  const std::string secondary = tmpl;
  int rc = 0;
  {
    auto store = RecordStore::open_secondary(o.path, secondary);
    const StoreStats st = store->stats();
    const auto keys = store->keys();
    std::map<uint64_t, uint64_t> per_version;
    std::map<uint32_t, std::pair<uint64_t, uint64_t>> per_worker;  // count, max seq
    for (const auto& k : keys) {
      per_version[k.policy_version]++;
      auto& w = per_worker[k.worker];
      w.first++;
      w.second = std::max(w.second, k.seq);
    }
    std::printf("buffer %s\n", o.path.c_str());
    std::printf("  records          : %llu\n", static_cast<unsigned long long>(st.records));
    std::printf("  record bytes     : %llu\n", static_cast<unsigned long long>(st.bytes));
    std::printf("  disk bytes       : %llu\n", static_cast<unsigned long long>(store->disk_bytes()));
    std::printf("  policy versions  : %llu..%llu (%zu present)\n",
                static_cast<unsigned long long>(st.min_policy_version),
                static_cast<unsigned long long>(st.max_policy_version), per_version.size());
    for (const auto& [pv, n] : per_version)
      std::printf("    version %-8llu: %llu records\n", static_cast<unsigned long long>(pv),
                  static_cast<unsigned long long>(n));
    for (const auto& [w, c] : per_worker)
      std::printf("    worker %-9u: %llu records, next seq %llu\n", w, static_cast<unsigned long long>(c.first),
                  static_cast<unsigned long long>(store->next_seq(w)));
    if (!key && !keys.empty())
      key = keys.back();
    if (key) {
      auto r = store->get(*key);
      if (!r) {
        std::printf("record %s: not found or failed validation\n", to_string(*key).c_str());
        rc = 1;
      } else {
        std::printf("record %s\n", to_string(*key).c_str());
        std::printf("  drafter_version  : %llu\n", static_cast<unsigned long long>(r->drafter_version));
        std::printf("  incarnation      : %016llx\n", static_cast<unsigned long long>(r->incarnation));
        std::printf("  tokens           : %zu (prompt %u)\n", r->tokens.size(), r->prompt_length);
        std::string shape;
        for (uint32_t d : r->aux.shape) {
          if (!shape.empty())
            shape += 'x';
          shape += std::to_string(d);
        }
        std::printf("  aux              : %s [%s] %zu bytes\n", dtype_name(r->aux.dtype), shape.c_str(),
                    r->aux.bytes.size());
        std::printf("  teacher top-k    : k=%u, %zu ids\n", r->teacher_k, r->teacher_ids.size());
        uint64_t drafted = 0, accepted = 0;
        for (const auto& s : r->rounds) {
          drafted += s.drafted;
          accepted += s.accepted;
        }
        std::printf("  rounds           : %zu (drafted %llu, accepted %llu)\n", r->rounds.size(),
                    static_cast<unsigned long long>(drafted), static_cast<unsigned long long>(accepted));
        std::printf("  rejected at      : %zu positions\n", r->rejected.size());
        std::printf("  checksum         : %08x (verified)\n", r->checksum);
        if (o.dump_values) {
          std::printf("  token ids        :");
          for (size_t i = 0; i < r->tokens.size() && i < 32; ++i)
            std::printf(" %d", r->tokens[i]);
          std::printf("%s\n", r->tokens.size() > 32 ? " ..." : "");
        }
      }
    }
    if (!o.quarantine.empty())
      print_quarantine(o.quarantine, *store);
  }
  std::error_code ec;
  std::filesystem::remove_all(secondary, ec);
  return rc;
}

}  // namespace updraft::messaging
