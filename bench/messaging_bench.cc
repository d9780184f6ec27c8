// Record path throughput: W workers stream realistic records (T tokens x 3 aux layers x H
// hidden, bf16, plus teacher top-k) over loopback tcp into one buffer server writing RocksDB,
// and we measure what is durably written and acknowledged: MB/s and CPU seconds per MB.
// Both sync policies run side by side in one invocation. Generators copy a prebuilt record
// per submit (their CPU is measured and reported apart) and keep their sender below its queue bound,
// so the figure is the sustained rate of the path, not of the shed policy.
//
// Then the weight link (messaging/weight_link.h): a published version of --weights-mb MB is
// announced over tcp loopback and fetched in chunks by a subscriber that does not share the
// publisher's directory (prefer_transfer), into its own directory, verified and delivered: the
// time from announce() to delivery, MB/s, and the process CPU per MB; announce()'s own check
// of the version is timed apart.
//
//   messaging_bench [--workers 4] [--seconds 8] [--tokens 512] [--hidden 1024]
//                   [--sync both|fsync|os] (`--help` lists the options) [--dir /tmp] [--weights-mb 256] [--quick]
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
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

#include "kernels/core/error.h"
#include "kernels/io/weight_version.h"
#include "messaging/buffer_server.h"
#include "messaging/record_sender.h"
#include "messaging/weight_link.h"

using namespace updraft::messaging;
using updraft::publish_version;
using updraft::WeightVersion;

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

struct WeightResult {
  double announce_s = 0, deliver_s = 0, cpu_s = 0, mb = 0;
  uint64_t chunks = 0, retries = 0;
};

// One version of `mb` MB (random bytes in one file) published under base, announced, fetched by a
// subscriber over tcp loopback with `window` chunk requests in flight, verified and delivered.
WeightResult run_weights(uint64_t mb, size_t window, const std::string& base) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(base) / ("updraft-weightbench-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "pub");
  const WeightVersion v = publish_version((dir / "pub").string(), "policy", 1, [&](const std::string& d) {
    std::ofstream f(d + "/model.safetensors", std::ios::binary);
    std::mt19937_64 rng(7);
    std::vector<uint64_t> block(size_t{1} << 17);  // 1 MiB
    for (uint64_t written = 0; written < mb << 20; written += block.size() * 8) {
      for (auto& x : block)
        x = rng();
      f.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(block.size() * 8));
    }
    if (!f)
      throw updraft::Error("messaging_bench: cannot write " + d + "/model.safetensors");
  });
  WeightPublisherOptions po;
  po.pub_endpoint = "tcp://127.0.0.1:0";
  po.request_endpoint = "tcp://127.0.0.1:0";
  WeightPublisher pub(po);
  WeightSubscriberOptions so;
  so.pub_endpoint = pub.pub_endpoint();
  so.request_endpoint = pub.request_endpoint();
  so.kinds = {WeightKind::kPolicy};
  so.local_root = (dir / "sub").string();
  so.prefer_transfer = true;
  so.window = window;
  so.poll_interval = std::chrono::milliseconds(200);
  WeightSubscriber sub(so);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the SUB connects before the PUB speaks
  WeightResult r;
  const double c0 = process_cpu_s();
  const auto t0 = std::chrono::steady_clock::now();
  const Announcement a = pub.announce(v.dir, WeightKind::kPolicy);
  r.announce_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto t1 = std::chrono::steady_clock::now();
  if (!sub.wait_delivered(WeightKind::kPolicy, a.version, std::chrono::minutes(10)))
    throw updraft::Error("messaging_bench: version not delivered: " + sub.stats().last_failure);
  r.deliver_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  r.cpu_s = process_cpu_s() - c0;
  r.mb = static_cast<double>(sub.stats().fetched_bytes) / 1e6;
  r.chunks = pub.stats().chunks_served;
  r.retries = sub.stats().chunk_retries;
  std::error_code ec;
  fs::remove_all(dir, ec);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int workers = 4;
  double seconds = 8;
  uint32_t tokens = 512, hidden = 1024, k = 8;
  std::string sync = "both", base = std::filesystem::temp_directory_path().string();
  uint64_t weights_mb = 256;
  bool quick = false;
  CLI::App app{"updraft messaging_bench: records into the buffer, and the weight link"};
  app.add_option("--workers", workers, "concurrent senders")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--seconds", seconds, "seconds of sending per setting")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--tokens", tokens, "tokens per record")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--hidden", hidden, "hidden size of the records' aux states")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--sync", sync, "the store's sync policy: fsync, os or both")
      ->check(CLI::IsMember({"fsync", "os", "both"}))
      ->capture_default_str();
  app.add_option("--dir", base, "where the stores and weights go")->capture_default_str();
  app.add_option("--weights-mb", weights_mb, "size of the weight version sent over the link")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_flag("--quick", quick, "2 seconds per setting and 32 MiB of weights");
  CLI11_PARSE(app, argc, argv);
  if (quick && app.count("--seconds") == 0)
    seconds = 2;
  if (quick && app.count("--weights-mb") == 0)
    weights_mb = 32;
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
  if (weights_mb > 0) {
    std::printf("\nweight link: one %llu MB version over tcp loopback, chunks of 4 MiB, fetched into the "
                "subscriber's own directory (fsync, rename, sha256 of every file)\n",
                static_cast<unsigned long long>(weights_mb));
    std::printf("%-8s %12s %12s %12s %10s %8s %8s\n", "window", "announce s", "deliver s", "MB/s", "CPU s/MB",
                "chunks", "retries");
    for (size_t window : {size_t{1}, size_t{4}}) {
      const WeightResult r = run_weights(weights_mb, window, base);
      std::printf("%-8zu %12.2f %12.2f %12.1f %10.4f %8llu %8llu\n", window, r.announce_s, r.deliver_s,
                  r.mb / r.deliver_s, r.cpu_s / r.mb, static_cast<unsigned long long>(r.chunks),
                  static_cast<unsigned long long>(r.retries));
    }
    std::printf(
        "announce s: announce()'s completeness check (manifest, sizes; no hashing); deliver s: announce to on_version, both ends in this "
        "process (their CPU together in CPU s/MB).\n");
  }
  return 0;
}
