// Fault test 3 (anchors.md): SIGSTOP the buffer while a worker generates. The worker's memory
// stays within its queue bound, shed records are counted, generation keeps its speed and
// throughput recovers after SIGCONT. Timing-based, so it runs in the slow tier.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "messaging/record_sender.h"
#include "tests/messaging/proc.h"
#include "tests/messaging/test_util.h"

namespace updraft::messaging {
namespace {

using namespace std::chrono_literals;
using testing::free_tcp_endpoint;
using testing::make_record;
using testing::Proc;
using testing::TempDir;

// Resident set size of this process in bytes.
size_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

TEST(FaultBufferSigstop, WorkerStaysBoundedShedsCountsAndRecovers) {
  TempDir dir;
  const std::string ep = free_tcp_endpoint();
  Proc buffer({"buffer", ep, dir.sub("db"), "os"});
  SenderOptions o;
  o.endpoint = ep;
  o.worker = 1;
  o.max_queue_bytes = 4 << 20;
  o.max_inflight_bytes = 2 << 20;
  o.ack_timeout = 1000ms;
  RecordSender sender(o);
  const RecordData tmpl = make_record(1, 1, 0, 128, 128);  // ~100 KB
  // "Generation": 2 ms of work then a submit, for 4.5 s; the buffer is stopped from 1.0 s to
  // 2.5 s. Measured: work rate per phase, the slowest submit, queue and RSS peaks.
  std::atomic<int> phase{0};
  double rate[3] = {0, 0, 0};
  uint64_t iters[3] = {0, 0, 0};
  double phase_s[3] = {0, 0, 0};
  std::chrono::nanoseconds worst_submit{0};
  size_t peak_queue = 0, peak_rss = 0;
  uint64_t acked_at_cont = 0;
  const size_t rss_before = rss_bytes();
  std::thread gen([&] {
    auto phase_start = std::chrono::steady_clock::now();
    int cur = 0;
    volatile double sink = 0;
    uint64_t id = 0;
    while (phase.load() < 3) {
      const int p = phase.load();
      if (p != cur) {
        phase_s[cur] = std::chrono::duration<double>(std::chrono::steady_clock::now() - phase_start).count();
        phase_start = std::chrono::steady_clock::now();
        cur = p;
      }
      const auto w0 = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - w0 < 2ms)
        sink = sink + 1.0;
      RecordData r = tmpl;
      r.tokens[0] = static_cast<int32_t>(++id);
      const auto s0 = std::chrono::steady_clock::now();
      sender.submit(std::move(r));
      worst_submit = std::max(worst_submit, std::chrono::steady_clock::now() - s0);
      iters[cur]++;
      peak_queue = std::max<size_t>(peak_queue, sender.metrics().queue_bytes);
    }
    phase_s[cur] = std::chrono::duration<double>(std::chrono::steady_clock::now() - phase_start).count();
  });
  std::this_thread::sleep_for(1000ms);
  const uint64_t acked_before = sender.metrics().records_acked;
  buffer.kill(SIGSTOP);
  phase = 1;
  for (int i = 0; i < 15; ++i) {
    std::this_thread::sleep_for(100ms);
    peak_rss = std::max(peak_rss, rss_bytes());
  }
  const uint64_t shed_during_stop = sender.metrics().records_shed;
  buffer.kill(SIGCONT);
  acked_at_cont = sender.metrics().records_acked;
  phase = 2;
  std::this_thread::sleep_for(2000ms);
  phase = 3;
  gen.join();
  for (int i = 0; i < 3; ++i)
    rate[i] = static_cast<double>(iters[i]) / phase_s[i];
  const uint64_t acked_after = sender.metrics().records_acked;
  EXPECT_GT(acked_before, 50u);
  EXPECT_GT(shed_during_stop, 0u) << "a stopped buffer must make the full queue shed";
  EXPECT_LE(peak_queue, o.max_queue_bytes);
  EXPECT_LT(peak_rss, rss_before + o.max_queue_bytes + (48u << 20)) << "worker memory grew past its bound";
  EXPECT_LT(worst_submit, 50ms) << "submit blocked";
  EXPECT_GT(rate[1], 0.8 * rate[0]) << "generation slowed while the buffer was stopped";
  EXPECT_GT(acked_after - acked_at_cont, 200u) << "throughput did not recover after SIGCONT";
  ASSERT_TRUE(sender.flush(20s));
  std::printf("rates (iter/s) before %.0f, stopped %.0f, after %.0f; shed %llu; peak queue %zu; worst submit %lld us\n",
              rate[0], rate[1], rate[2], static_cast<unsigned long long>(sender.metrics().records_shed.load()),
              peak_queue,
              static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(worst_submit).count()));
}

}  // namespace
}  // namespace updraft::messaging
