// Record path throughput: W workers stream realistic records (T tokens x 3 aux layers x H
// hidden, bf16, plus teacher top-k) over loopback tcp into one buffer server writing RocksDB,
// and we measure what is durably written and acknowledged: MB/s and CPU seconds per MB.
// Both sync policies run side by side in one invocation. Generators copy a prebuilt record
// per submit (their CPU is measured and reported apart) and keep their sender below its queue bound,
// so the figure is the sustained rate of the path, not of the shed policy.
//
//   messaging_bench [--workers 4] [--seconds 8] [--tokens 512] [--hidden 1024]
//                   [--sync both|fsync|os] [--dir /tmp] [--quick]
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "messaging/buffer_server.h"
#include "messaging/record_sender.h"

using namespace updraft::messaging;

namespace {

double process_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0)
      return line.substr(line.find(':') + 2);
  return "unknown";
}

RecordData make_template(uint32_t tokens, uint32_t hidden, uint32_t k) {
  std::mt19937 rng(1);
  RecordData r;
  r.policy_version = 1;
  r.prompt_length = tokens / 4;
  r.tokens.resize(tokens);
  for (auto& t : r.tokens)
    t = static_cast<int32_t>(rng() % 128000);
  r.aux.dtype = DType::kBF16;
  r.aux.shape = {tokens, 3, hidden};
  r.aux.bytes.resize(size_t{tokens} * 3 * hidden * 2);
  for (size_t i = 0; i < r.aux.bytes.size(); i += 4) {
    const uint32_t v = rng();
    std::memcpy(r.aux.bytes.data() + i, &v, std::min<size_t>(4, r.aux.bytes.size() - i));
  }
  r.teacher_k = k;
  const size_t n = size_t{tokens - r.prompt_length} * k;
  r.teacher_ids.resize(n);
  r.teacher_logprobs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    r.teacher_ids[i] = static_cast<int32_t>(rng() % 128000);
    r.teacher_logprobs[i] = -static_cast<float>(rng() % 2000) / 100.0f;
  }
  r.rounds.assign(tokens / 4, RoundStats{4, 3});
  return r;
}

struct Result {
  double seconds = 0, mb_acked = 0, mb_stored = 0, cpu_s = 0, gen_cpu_s = 0;
  uint64_t records = 0, shed = 0, resent = 0;
};

Result run(SyncPolicy sync, int workers, double seconds, const RecordData& tmpl, const std::string& base) {
  const std::string dir = base + "/updraft-msgbench-" + std::to_string(getpid()) + "-" + sync_policy_name(sync);
  Result res;
  {
    StoreOptions so;
    so.path = dir;
    so.sync = sync;
    so.max_bytes = uint64_t{1} << 30;  // steady state includes eviction and compaction
    auto store = std::shared_ptr<RecordStore>(RecordStore::open(so));
    BufferServerOptions bo;
    bo.endpoints = {"tcp://127.0.0.1:*"};
    BufferServer server(bo, store);
    std::vector<std::unique_ptr<RecordSender>> senders;
    for (int w = 0; w < workers; ++w) {
      SenderOptions o;
      o.endpoint = server.endpoints()[0];
      o.worker = static_cast<uint32_t>(w);
      o.max_queue_bytes = size_t{48} << 20;
      o.max_inflight_bytes = size_t{24} << 20;
      senders.push_back(std::make_unique<RecordSender>(o));
    }
    std::atomic<bool> stop{false};
    std::atomic<int> measuring{0};
    std::vector<double> gen_cpu(workers, 0);
    std::vector<std::thread> gens;
    const size_t rec_bytes = tmpl.payload_bytes();
    for (int w = 0; w < workers; ++w) {
      gens.emplace_back([&, w] {
        RecordSender& s = *senders[w];
        double cpu0 = 0;
        bool counted = false;
        while (!stop) {
          if (measuring && !counted) {
            cpu0 = thread_cpu_s();
            counted = true;
          }
          if (s.metrics().queue_bytes + 2 * rec_bytes > size_t{48} << 20) {
            std::this_thread::sleep_for(std::chrono::microseconds(500));
            continue;
          }
          RecordData r = tmpl;
          s.submit(std::move(r));
        }
        gen_cpu[w] = counted ? thread_cpu_s() - cpu0 : 0;
      });
    }
    auto acked_bytes = [&] {
      uint64_t b = 0;
      for (auto& s : senders)
        b += s->metrics().bytes_acked;
      return b;
    };
    auto acked_records = [&] {
      uint64_t n = 0;
      for (auto& s : senders)
        n += s->metrics().records_acked;
      return n;
    };
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // warm-up
    const uint64_t b0 = acked_bytes(), n0 = acked_records(), s0 = server.metrics().bytes_stored;
    const double c0 = process_cpu_s();
    const auto t0 = std::chrono::steady_clock::now();
    measuring = 1;
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    const auto t1 = std::chrono::steady_clock::now();
    const uint64_t b1 = acked_bytes(), n1 = acked_records(), s1 = server.metrics().bytes_stored;
    const double c1 = process_cpu_s();
    stop = true;
    for (auto& g : gens)
      g.join();
    res.seconds = std::chrono::duration<double>(t1 - t0).count();
    res.mb_acked = static_cast<double>(b1 - b0) / 1e6;
    res.mb_stored = static_cast<double>(s1 - s0) / 1e6;
    res.records = n1 - n0;
    res.cpu_s = c1 - c0;
    for (double g : gen_cpu)
      res.gen_cpu_s += g;
    for (auto& s : senders) {
      res.shed += s->metrics().records_shed;
      res.resent += s->metrics().records_resent;
    }
    senders.clear();
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  int workers = 4;
  double seconds = 8;
  uint32_t tokens = 512, hidden = 1024, k = 8;
  std::string sync = "both", base = std::filesystem::temp_directory_path().string();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--workers")
      workers = std::atoi(next().c_str());
    else if (a == "--seconds")
      seconds = std::atof(next().c_str());
    else if (a == "--tokens")
      tokens = static_cast<uint32_t>(std::atoi(next().c_str()));
    else if (a == "--hidden")
      hidden = static_cast<uint32_t>(std::atoi(next().c_str()));
    else if (a == "--sync")
      sync = next();
    else if (a == "--dir")
      base = next();
    else if (a == "--quick")
      seconds = 2;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const RecordData tmpl = make_template(tokens, hidden, k);
  const size_t encoded = encode_record(tmpl).size();
  std::printf("messaging_bench: %d workers -> 1 buffer over tcp loopback, RocksDB in %s\n", workers, base.c_str());
  std::printf("  machine : %s, %ld cores online\n", cpu_model().c_str(), sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("  record  : %u tokens x 3 x %u hidden bf16 + top-%u teacher = %.2f MB encoded\n", tokens, hidden, k,
              static_cast<double>(encoded) / 1e6);
  std::printf("  window  : %.1f s after 1 s warm-up; store cap 1 GiB (eviction and compaction included)\n\n", seconds);
  std::printf("%-6s %10s %10s %10s %12s %14s %8s %8s\n", "sync", "acked MB/s", "stored MB/s", "records/s", "CPU s/MB",
              "CPU s/MB path", "shed", "resent");
  for (SyncPolicy p : {SyncPolicy::kEveryBatch, SyncPolicy::kOsBuffered}) {
    if (sync != "both" && sync != sync_policy_name(p))
      continue;
    const Result r = run(p, workers, seconds, tmpl, base);
    std::printf("%-6s %10.1f %10.1f %10.1f %12.5f %14.5f %8llu %8llu\n", sync_policy_name(p), r.mb_acked / r.seconds,
                r.mb_stored / r.seconds, static_cast<double>(r.records) / r.seconds, r.cpu_s / r.mb_acked,
                (r.cpu_s - r.gen_cpu_s) / r.mb_acked, static_cast<unsigned long long>(r.shed),
                static_cast<unsigned long long>(r.resent));
  }
  std::printf(
      "\nCPU s/MB: whole process (generators, senders, ZeroMQ, validation, RocksDB) per acked MB;\n"
      "CPU s/MB path: the same without the generator threads' record copies.\n");
  return 0;
}
