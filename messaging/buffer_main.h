// The `updraft buffer` and `updraft inspect buffer` commands, kept here so that app/main.cc
// only parses flags and calls these.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace updraft::messaging {

struct BufferCommandOptions {
  std::string endpoint = "tcp://127.0.0.1:5557";
  std::string path = "updraft-buffer";
  uint64_t max_bytes = uint64_t{16} << 30;
  uint64_t version_window = 0;
  std::string sync = "fsync";  // fsync | os (docs/messaging.md)
  uint64_t max_message_bytes = uint64_t{64} << 20;
  double report_seconds = 10;  // log counters this often (0: never)
  std::string metrics_file;    // when set, Prometheus text is rewritten there each report
  // CURVE (messaging/curve_keys.h): this buffer's key file and the workers it admits. Both or
  // neither; with them the endpoint may be non-loopback.
  std::string curve_key_file, curve_allow_file;
};

// Serves until SIGINT or SIGTERM (or *stop becomes true). Returns the exit code.
// Throws updraft::Error for bad options or a store that cannot be opened.
int run_buffer(const BufferCommandOptions& options, const std::atomic<bool>* stop = nullptr);

struct InspectBufferOptions {
  std::string path;
  std::string key;           // "policy_version/worker/seq" to decode that record; empty: the newest
  bool dump_values = false;  // print token ids and the first aux values too
  // A quarantine log (the online trainer's <dir>/quarantine.tsv): its entries are listed, each
  // with whether the buffer still holds the record.
  std::string quarantine;
};

// Prints counts, bytes, versions, workers and one decoded record. Opens the store as a
// secondary (read-only) instance, so it works while `updraft buffer` runs.
int run_inspect_buffer(const InspectBufferOptions& options);

}  // namespace updraft::messaging
