// The weight link's subscriber (messaging/weight_link.h): follows announcements and polls for
// the current version, delivers a shared path or fetches the chunks into local_root
// (messaging/weight_fetch.cc), verifies them and hands each new version to on_version. The loop's
// state and steps: WeightSubscriber::Loop (messaging/weight_subscriber_loop.h).
#include <spdlog/spdlog.h>

#include <cerrno>
#include <filesystem>

#include "messaging/control.h"
#include "messaging/weight_link.h"
#include "messaging/weight_link_util.h"
#include "messaging/weight_subscriber_loop.h"

namespace updraft::messaging {

namespace fs = std::filesystem;
using weight_link_detail::Clock;
using weight_link_detail::connect_sockets;
using weight_link_detail::kind_index;

WeightSubscriber::WeightSubscriber(WeightSubscriberOptions options) : options_(std::move(options)) {
  UPD_REQUIRE(options_.window >= 1 && options_.max_attempts >= 1)
      << "weight subscriber: window and max_attempts must be >= 1";
  UPD_REQUIRE(options_.max_chunk_bytes <= kMaxChunkBytes)
      << "weight subscriber: max_chunk_bytes above " << kMaxChunkBytes;
  UPD_REQUIRE(!options_.kinds.empty()) << "weight subscriber: no kind to follow";
  if (options_.zmq_context == nullptr) {
    own_context_ = std::make_unique<ZmqContext>();
    context_ = own_context_->get();
  } else {
    context_ = options_.zmq_context;
  }
  if (!options_.local_root.empty()) {
    std::error_code ec;
    fs::create_directories(options_.local_root, ec);
    UPD_REQUIRE(!ec) << "weight subscriber: cannot create " << options_.local_root << ": " << ec.message();
  }
  for (int k = 0; k < 2; ++k)
    stats_.last_delivered[k] = options_.min_version[k];
  thread_ = std::thread([this] { run(); });
}

WeightSubscriber::~WeightSubscriber() {
  stop_ = true;
  thread_.join();
}

WeightSubscriberStats WeightSubscriber::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

bool WeightSubscriber::wait_delivered(WeightKind kind, uint64_t version, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return delivered_cv_.wait_for(lock, timeout, [&] { return stats_.last_delivered[kind_index(kind)] >= version; });
}

void WeightSubscriber::Loop::fail(Announcement a, const std::string& why) {
  spdlog::warn("weight subscriber: {} v{}: {}", weight_kind_name(a.kind), a.version, why);
  if (fetch && fetch->announcement.kind == a.kind && fetch->announcement.version == a.version) {
    const fs::path tmp = fetch->tmp;
    fetch.reset();
    std::error_code ec;
    fs::remove_all(tmp, ec);
  }
  Retry& r = retry[kind_index(a.kind)];
  r.failures = r.version == a.version ? r.failures + 1 : 1;
  r.version = a.version;
  r.after = Clock::now() + std::min<std::chrono::milliseconds>(
                               std::chrono::minutes(5), std::chrono::seconds(1) * (1 << std::min(r.failures - 1, 9)));
  pending[kind_index(a.kind)].reset();  // retried at an announcement or poll after the backoff
  std::lock_guard<std::mutex> lock(self.mu_);
  ++self.stats_.failures;
  self.stats_.last_failure = std::string(weight_kind_name(a.kind)) + " v" + std::to_string(a.version) + ": " + why;
}

void WeightSubscriber::Loop::deliver(const Announcement& a, const std::string& dir, bool shared) {
  const size_t k = kind_index(a.kind);
  try {
    if (options.on_version)
      options.on_version(a.kind, a.version, dir);
  } catch (const std::exception& e) {
    if (!shared) {  // our verified copy, never handed over: nothing of it stays behind
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
    fail(a, std::string("on_version threw: ") + e.what());
    return;
  }
  delivered[k] = a.version;
  if (pending[k] && pending[k]->version <= a.version)
    pending[k].reset();
  if (!shared) {
    std::erase(fetched_dirs[k], fs::path(dir));  // refetched over a copy adopted at start
    fetched_dirs[k].push_back(dir);
    while (fetched_dirs[k].size() > 2) {
      std::error_code ec;
      fs::remove_all(fetched_dirs[k].front(), ec);
      fetched_dirs[k].erase(fetched_dirs[k].begin());
    }
  }
  {
    std::lock_guard<std::mutex> lock(self.mu_);
    ++self.stats_.delivered;
    self.stats_.delivered_shared += shared;
    self.stats_.last_delivered[k] = a.version;
  }
  self.delivered_cv_.notify_all();
}

void WeightSubscriber::Loop::on_announcement(const Announcement& a) {
  if (!follows(a.kind) || a.version == 0)
    return;
  {
    std::lock_guard<std::mutex> lock(self.mu_);
    ++self.stats_.announcements;
  }
  const size_t k = kind_index(a.kind);
  if (a.version <= delivered[k] || (pending[k] && pending[k]->version >= a.version))
    return;
  if (a.version == retry[k].version && Clock::now() < retry[k].after)
    return;
  if (fetch && fetch->announcement.kind == a.kind && fetch->announcement.version < a.version) {
    spdlog::info("weight subscriber: {} v{} superseded by v{} during its transfer", weight_kind_name(a.kind),
                 fetch->announcement.version, a.version);
    std::error_code ec;
    fs::remove_all(fetch->tmp, ec);
    fetch.reset();
  }
  pending[k] = a;
}

void WeightSubscriber::Loop::handle(std::vector<ZmqMessage>& frames, size_t total) {
  const auto kind = total == 2 ? parse_header(frames[0].data(), frames[0].size()) : std::nullopt;
  Reject why = Reject::kNone;
  if (kind == MessageKind::kAnnouncement) {
    if (const auto a = decode_announcement(frames[1].data(), frames[1].size(), &why))
      return on_announcement(*a);
  } else if (kind == MessageKind::kWeightChunk) {
    // A chunk failing its crc32c is dropped and counted (whose it is cannot be trusted); the
    // request times out and is sent again, and a source that keeps failing ends the fetch.
    if (const auto c = decode_weight_chunk(frames[1].data(), frames[1].size(), &why, options.max_chunk_bytes))
      return on_chunk(*c);
  }
  count_reject();
}

// Asks for every followed kind's current version; returns when to ask next.
Clock::time_point WeightSubscriber::Loop::ask_versions(Clock::time_point now) {
  bool sent = true;
  for (WeightKind k : options.kinds)
    sent = send_framed(dealer.get(), MessageKind::kVersionRequest, encode_version_request({k})) && sent;
  // Not connected yet (ZMQ_IMMEDIATE): ask again shortly rather than a poll interval later.
  return now + (sent ? options.poll_interval : std::chrono::milliseconds(50));
}

// With no fetch under way: begins the pending versions in the order of options.kinds until one
// starts a fetch; a pending version that neither started one nor was replaced is dropped.
void WeightSubscriber::Loop::start_pending() {
  for (WeightKind k : options.kinds)
    if (pending[kind_index(k)] && !fetch) {
      const Announcement a = *pending[kind_index(k)];
      begin(a);
      if (!fetch && pending[kind_index(k)] && pending[kind_index(k)]->version == a.version)
        pending[kind_index(k)].reset();
    }
}

void WeightSubscriber::run() {
  try {
    ZmqSocket sub(context_, ZMQ_SUB);
    ZmqSocket dealer(context_, ZMQ_DEALER);
    connect_sockets(sub, dealer, options_);
    Loop loop(*this, dealer);
    std::vector<ZmqMessage> frames;
    size_t total = 0;
    Clock::time_point next_poll = Clock::now();
    while (!stop_) {
      zmq_pollitem_t items[2] = {{sub.get(), 0, ZMQ_POLLIN, 0}, {dealer.get(), 0, ZMQ_POLLIN, 0}};
      if (zmq_poll(items, 2, 20) == -1) {
        UPD_REQUIRE(zmq_errno() == EINTR) << "ZeroMQ: " << zmq_strerror(zmq_errno()) << " in zmq_poll";
        continue;
      }
      while (recv_multipart(sub.get(), frames, &total, 2))
        loop.handle(frames, total);
      while (recv_multipart(dealer.get(), frames, &total, 2))
        loop.handle(frames, total);
      const auto now = Clock::now();
      if (now >= next_poll)
        next_poll = loop.ask_versions(now);
      if (!loop.fetch)
        loop.start_pending();
      if (!loop.fetch)
        continue;
      loop.send_requests(now);
    }
  } catch (const std::exception& e) {
    spdlog::error("weight subscriber: stopped: {}", e.what());
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.failures;
    stats_.last_failure = e.what();
  }
}

}  // namespace updraft::messaging
