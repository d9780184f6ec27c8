// Internal to the weight link's subscriber (messaging/weight_subscriber.cc, which runs the loop,
// delivers and keeps the backoff, and messaging/weight_fetch.cc, which fetches a version's chunks
// into local_root); nothing else includes it.
//
//  * WeightSubscriber::Fetch: one transfer under way: the announcement, its ".tmp" directory, the
//    chunk requests in flight, what was received and the files open for writing.
//  * WeightSubscriber::Loop: the state of WeightSubscriber::run (pending announcements, backoff,
//    the fetch, the fetched directories, the last version delivered per kind) and the steps of one
//    turn over it. Lives on the subscriber's thread only; the stats are updated under the
//    subscriber's mutex.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "messaging/weight_link.h"
#include "messaging/weight_link_util.h"
#include "messaging/zmq_util.h"

namespace updraft::messaging {

namespace weight_link_detail {
using Clock = std::chrono::steady_clock;
}  // namespace weight_link_detail

struct WeightSubscriber::Fetch {
  using Clock = weight_link_detail::Clock;
  Announcement announcement;
  std::filesystem::path tmp;
  uint32_t next = 0;                                                // next index never requested
  std::map<uint32_t, std::pair<Clock::time_point, int>> in_flight;  // index -> (sent, attempts)
  std::vector<bool> received;
  uint32_t received_count = 0;
  uint64_t bytes = 0;
  std::map<std::string, int> fds;

  ~Fetch() { close_all(false); }
  bool close_all(bool sync) {
    bool ok = true;
    for (auto& [name, fd] : fds) {
      if (sync && ::fsync(fd) != 0)
        ok = false;
      if (::close(fd) != 0)
        ok = false;
    }
    fds.clear();
    return ok;
  }
};

struct WeightSubscriber::Loop {
  using Clock = weight_link_detail::Clock;
  WeightSubscriber& self;
  const WeightSubscriberOptions& options;
  ZmqSocket& dealer;
  std::optional<Announcement> pending[2];
  // A version that failed is not taken again before its backoff (1 s, doubling per failure,
  // at most 5 min) unless a newer one is announced: a corrupt source is not refetched forever.
  struct Retry {
    uint64_t version = 0;
    int failures = 0;
    Clock::time_point after{};
  } retry[2];
  std::unique_ptr<Fetch> fetch;
  // Copies fetched by an earlier process count as fetched (oldest first), so the keep-two rule
  // prunes them; its half-written ".tmp" directories are removed now.
  std::vector<std::filesystem::path> fetched_dirs[2];
  uint64_t delivered[2];

  Loop(WeightSubscriber& s, ZmqSocket& d) : self(s), options(s.options_), dealer(d) {
    weight_link_detail::adopt_local_copies(options, fetched_dirs);
    delivered[0] = options.min_version[0];
    delivered[1] = options.min_version[1];
  }
  bool follows(WeightKind k) const {
    return std::find(options.kinds.begin(), options.kinds.end(), k) != options.kinds.end();
  }
  void count_reject() {
    std::lock_guard<std::mutex> lock(self.mu_);
    ++self.stats_.rejected;
  }

  // weight_subscriber.cc
  void fail(Announcement a, const std::string& why);  // a by value: it may live in *fetch
  void deliver(const Announcement& a, const std::string& dir, bool shared);
  void on_announcement(const Announcement& a);
  void handle(std::vector<ZmqMessage>& frames, size_t total);
  Clock::time_point ask_versions(Clock::time_point now);  // returns when to ask next
  void start_pending();

  // weight_fetch.cc
  void begin(const Announcement& a);  // delivers the shared path, or starts a fetch
  void on_chunk(const WeightChunk& c);
  void finish();
  void send_requests(Clock::time_point now);
};

}  // namespace updraft::messaging
