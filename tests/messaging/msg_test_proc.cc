// Helper process for the messaging fault tests (tests spawn it, then kill -9 / SIGSTOP it).
//
//   msg_test_proc buffer <endpoint> <db dir> <sync: fsync|os>
//       runs `updraft buffer` logic until SIGTERM.
//   msg_test_proc worker <endpoint> <worker id> <run> <count> <tokens> <hidden> <pause us> <ack log>
//       streams <count> records, one every <pause us>, whose tokens[0] is run * 1000000 + i, appends "seq crc id" for
//       every acknowledged record to <ack log>, waits until all are acknowledged, exits 0
//       (3 if they were not within 60 s).
//   msg_test_proc poison <endpoint> <worker id> <count> <declare: 0|1> <vocab> <hidden> <teacher k> [<key> <server pub>]
//       a buggy or hostile worker (the fault harness, tools/fault_cluster.py): streams <count> records of
//       policy version 1 shaped for a model of <vocab> ids, aux [tokens, 3, hidden] and teacher k, each
//       with a valid checksum but a teacher id of -5 and a token id beyond the vocabulary. With declare 1
//       its Hello declares that model (the buffer refuses them by reason model_mismatch); with 0 it
//       declares nothing (stored, and the trainer must quarantine them). CURVE with the key files.
//       Prints "poison: N submitted, N acknowledged, N refused" and exits 0 once all are answered.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "messaging/buffer_main.h"
#include "messaging/curve_keys.h"
#include "messaging/record_sender.h"
#include "tests/messaging/test_util.h"

using namespace updraft::messaging;

namespace {

int run_poison(int argc, char** argv) {
  SenderOptions o;
  o.endpoint = argv[2];
  o.worker = static_cast<uint32_t>(std::atoi(argv[3]));
  const uint64_t count = std::strtoull(argv[4], nullptr, 10);
  const bool declare = std::atoi(argv[5]) != 0;
  const uint32_t vocab = static_cast<uint32_t>(std::atoi(argv[6]));
  const uint32_t hidden = static_cast<uint32_t>(std::atoi(argv[7]));
  const uint32_t k = static_cast<uint32_t>(std::atoi(argv[8]));
  if (declare)
    o.model = RecordModel{vocab, 3 * hidden, k};
  if (argc == 11)
    o.curve = curve_client_from_files(argv[9], argv[10]);
  o.ack_timeout = std::chrono::milliseconds(1000);
  RecordSender sender(o);
  for (uint64_t i = 0; i < count; ++i) {
    RecordData r = testing::make_record(o.worker, 1, i, 24, hidden, k);
    r.drafter_version = 1;
    for (auto& t : r.tokens)
      t = static_cast<int32_t>(static_cast<uint32_t>(t) % vocab);
    for (auto& t : r.teacher_ids)
      t = static_cast<int32_t>(static_cast<uint32_t>(t) % vocab);
    r.tokens[r.prompt_length + 1] = static_cast<int32_t>(vocab + 7);
    r.teacher_ids[k] = -5;
    if (!sender.submit(std::move(r)))
      return 4;
  }
  const bool drained = sender.flush(std::chrono::seconds(120));
  const auto& m = sender.metrics();
  std::printf("poison: %llu submitted, %llu acknowledged, %llu refused\n",
              static_cast<unsigned long long>(m.records_submitted.load()),
              static_cast<unsigned long long>(m.records_acked.load()),
              static_cast<unsigned long long>(m.records_refused.load()));
  return drained ? 0 : 3;
}

}  // namespace

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
  if (mode == "poison" && (argc == 9 || argc == 11))
    return run_poison(argc, argv);
  std::fprintf(stderr, "usage: see the header of tests/messaging/msg_test_proc.cc\n");
  return 2;
}
