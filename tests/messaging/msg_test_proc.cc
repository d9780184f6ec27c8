// Helper process for the messaging fault tests (tests spawn it, then kill -9 / SIGSTOP it).
//
//   msg_test_proc buffer <endpoint> <db dir> <sync: fsync|os>
//       runs `updraft buffer` logic until SIGTERM.
//   msg_test_proc worker <endpoint> <worker id> <run> <count> <tokens> <hidden> <pause us> <ack log>
//       streams <count> records, one every <pause us>, whose tokens[0] is run * 1000000 + i, appends "seq crc id" for
//       every acknowledged record to <ack log>, waits until all are acknowledged, exits 0
//       (3 if they were not within 60 s).
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "messaging/buffer_main.h"
#include "messaging/record_sender.h"
#include "tests/messaging/test_util.h"

using namespace updraft::messaging;

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "buffer" && argc == 5) {
    BufferCommandOptions o;
    o.endpoint = argv[2];
    o.path = argv[3];
    o.sync = argv[4];
    o.report_seconds = 0;
    return run_buffer(o);
  }
  if (mode == "worker" && argc == 10) {
    const uint32_t worker = static_cast<uint32_t>(std::atoi(argv[3]));
    const uint64_t run = std::strtoull(argv[4], nullptr, 10);
    const uint64_t count = std::strtoull(argv[5], nullptr, 10);
    const uint32_t tokens = static_cast<uint32_t>(std::atoi(argv[6]));
    const uint32_t hidden = static_cast<uint32_t>(std::atoi(argv[7]));
    const long pause_us = std::atol(argv[8]);
    const int log = open(argv[9], O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (log < 0) {
      std::perror(argv[9]);
      return 2;
    }
    SenderOptions o;
    o.endpoint = argv[2];
    o.worker = worker;
    o.ack_timeout = std::chrono::milliseconds(500);
    o.max_queue_bytes = size_t{1} << 30;  // the fault tests count on no shedding here
    o.on_ack = [log](uint64_t seq, uint32_t crc) {
      char line[64];
      const int n = std::snprintf(line, sizeof(line), "%llu %u\n", static_cast<unsigned long long>(seq), crc);
      if (write(log, line, static_cast<size_t>(n)) != n)
        std::abort();
    };
    RecordSender sender(o);
    for (uint64_t i = 0; i < count; ++i) {
      if (!sender.submit(testing::make_record(worker, 1 + i / 100, run * 1000000 + i, tokens, hidden)))
        return 4;
      usleep(static_cast<useconds_t>(pause_us));
    }
    const bool drained = sender.flush(std::chrono::seconds(60));
    close(log);
    return drained ? 0 : 3;
  }
  std::fprintf(stderr, "usage: see the header of tests/messaging/msg_test_proc.cc\n");
  return 2;
}
