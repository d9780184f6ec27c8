// The weight link's subscriber (messaging/weight_link.h): follows announcements and polls for
// the current version, delivers a shared path or fetches the chunks into local_root, verifies
// them and hands each new version to on_version.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include "kernels/io/atomic_file.h"
#include "kernels/io/sha256.h"
#include "kernels/io/weight_version.h"
#include "messaging/control.h"
#include "messaging/weight_link.h"
#include "messaging/weight_link_util.h"

namespace updraft::messaging {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using weight_link_detail::adopt_local_copies;
using weight_link_detail::connect_sockets;
using weight_link_detail::kind_index;
using weight_link_detail::kManifest;

struct WeightSubscriber::Fetch {
  Announcement announcement;
  fs::path tmp;
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

void WeightSubscriber::run() {
  try {
    ZmqSocket sub(context_, ZMQ_SUB);
    ZmqSocket dealer(context_, ZMQ_DEALER);
    connect_sockets(sub, dealer, options_);

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
    std::vector<fs::path> fetched_dirs[2];
    adopt_local_copies(options_, fetched_dirs);
    uint64_t delivered[2] = {options_.min_version[0], options_.min_version[1]};
    auto follows = [&](WeightKind k) {
      return std::find(options_.kinds.begin(), options_.kinds.end(), k) != options_.kinds.end();
    };
    auto count_reject = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.rejected;
    };
    auto fail = [&](Announcement a, const std::string& why) {  // a by value: it may live in *fetch
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
      r.after =
          Clock::now() + std::min<std::chrono::milliseconds>(
                             std::chrono::minutes(5), std::chrono::seconds(1) * (1 << std::min(r.failures - 1, 9)));
      pending[kind_index(a.kind)].reset();  // retried at an announcement or poll after the backoff
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.failures;
      stats_.last_failure = std::string(weight_kind_name(a.kind)) + " v" + std::to_string(a.version) + ": " + why;
    };
    auto deliver = [&](const Announcement& a, const std::string& dir, bool shared) {
      const size_t k = kind_index(a.kind);
      try {
        if (options_.on_version)
          options_.on_version(a.kind, a.version, dir);
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
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.delivered;
        stats_.delivered_shared += shared;
        stats_.last_delivered[k] = a.version;
      }
      delivered_cv_.notify_all();
    };
    auto on_announcement = [&](const Announcement& a) {
      if (!follows(a.kind) || a.version == 0)
        return;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.announcements;
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
    };
    auto begin = [&](const Announcement& a) {
      // A shared filesystem: the announced directory is here and is the announced one.
      if (!options_.prefer_transfer) {
        std::error_code ec;
        if (fs::is_regular_file(fs::path(a.path) / kManifest, ec)) {
          try {
            if (sha256(read_file((fs::path(a.path) / kManifest).string())) == a.sha256) {
              deliver(a, a.path, true);
              return;
            }
          } catch (const Error&) {
          }
        }
      }
      if (a.chunk_count == 0)
        return fail(a, a.path + " is not readable here and the publisher serves no chunks");
      if (options_.local_root.empty())
        return fail(a, "no local_root to fetch into");
      if (a.size_bytes > options_.max_version_bytes)
        return fail(a, "announced size " + std::to_string(a.size_bytes) + " exceeds max_version_bytes");
      // Every chunk but a file's last is full and an empty file is one chunk: more chunks than
      // bytes (plus a file count's slack) is a lie that would only make us allocate.
      if (a.chunk_count > a.size_bytes + 4096)
        return fail(
            a, "announced " + std::to_string(a.chunk_count) + " chunks for " + std::to_string(a.size_bytes) + " bytes");
      fetch = std::make_unique<Fetch>();
      fetch->announcement = a;
      fetch->tmp = fs::path(options_.local_root) / (version_dir_name(weight_kind_name(a.kind), a.version) + ".tmp");
      fetch->received.assign(a.chunk_count, false);
      std::error_code ec;
      fs::remove_all(fetch->tmp, ec);
      fs::create_directories(fetch->tmp, ec);
      if (ec)
        return fail(a, "cannot create " + fetch->tmp.string() + ": " + ec.message());
    };
    auto finish = [&] {
      const Announcement a = fetch->announcement;
      if (!fetch->close_all(true))
        return fail(a, "writing the fetched files failed");
      std::string manifest;
      try {
        manifest = read_file((fetch->tmp / kManifest).string());
      } catch (const Error&) {
        return fail(a, "the transfer carried no manifest");
      }
      if (sha256(manifest) != a.sha256)
        return fail(a, "manifest sha256 differs from the announcement");
      const fs::path final_dir = fs::path(options_.local_root) / version_dir_name(weight_kind_name(a.kind), a.version);
      std::error_code ec;
      fs::remove_all(final_dir, ec);
      if (::rename(fetch->tmp.c_str(), final_dir.c_str()) != 0)
        return fail(a, "cannot rename " + fetch->tmp.string() + ": " + std::strerror(errno));
      fetch.reset();
      try {
        verify_version(final_dir.string(), weight_kind_name(a.kind));
      } catch (const Error& e) {
        fs::remove_all(final_dir, ec);
        return fail(a, std::string("fetched copy failed verification: ") + e.what());
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.fetched;
      }
      deliver(a, final_dir.string(), false);
    };
    auto on_chunk = [&](const WeightChunk& c) {
      if (!fetch || fetch->announcement.kind != c.kind || fetch->announcement.version != c.version)
        return;  // a late answer for a transfer that is over
      const Announcement& a = fetch->announcement;
      if (c.count == 0)
        return fail(a, "the publisher no longer serves this version");
      if (c.count != a.chunk_count || c.index >= c.count)
        return fail(a, "chunk " + std::to_string(c.index) + " of " + std::to_string(c.count) +
                           " does not match the announcement");
      if (fetch->received[c.index])
        return;  // a duplicate after a re-request
      if (c.data.size() > a.size_bytes - fetch->bytes || c.offset > a.size_bytes - c.data.size())
        return fail(a, "chunks exceed the announced size");
      auto it = fetch->fds.find(c.file);
      if (it == fetch->fds.end()) {
        if (fetch->fds.size() >= 4096)
          return fail(a, "too many files");
        const int fd = ::open((fetch->tmp / c.file).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
          return fail(a, "cannot create " + (fetch->tmp / c.file).string() + ": " + std::strerror(errno));
        it = fetch->fds.emplace(c.file, fd).first;
      }
      size_t done = 0;
      while (done < c.data.size()) {
        const ssize_t n =
            ::pwrite(it->second, c.data.data() + done, c.data.size() - done, static_cast<off_t>(c.offset + done));
        if (n < 0 && errno == EINTR)
          continue;
        if (n <= 0)
          return fail(a, "writing " + c.file + ": " + std::strerror(errno));
        done += static_cast<size_t>(n);
      }
      fetch->received[c.index] = true;
      ++fetch->received_count;
      fetch->bytes += c.data.size();
      fetch->in_flight.erase(c.index);
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.fetched_bytes += c.data.size();
      }
      if (fetch->received_count == a.chunk_count)
        finish();
    };
    auto handle = [&](std::vector<ZmqMessage>& frames, size_t total) {
      const auto kind = total == 2 ? parse_header(frames[0].data(), frames[0].size()) : std::nullopt;
      Reject why = Reject::kNone;
      if (kind == MessageKind::kAnnouncement) {
        if (const auto a = decode_announcement(frames[1].data(), frames[1].size(), &why))
          return on_announcement(*a);
      } else if (kind == MessageKind::kWeightChunk) {
        // A chunk failing its crc32c is dropped and counted (whose it is cannot be trusted); the
        // request times out and is sent again, and a source that keeps failing ends the fetch.
        if (const auto c = decode_weight_chunk(frames[1].data(), frames[1].size(), &why, options_.max_chunk_bytes))
          return on_chunk(*c);
      }
      count_reject();
    };

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
        handle(frames, total);
      while (recv_multipart(dealer.get(), frames, &total, 2))
        handle(frames, total);
      const auto now = Clock::now();
      if (now >= next_poll) {
        bool sent = true;
        for (WeightKind k : options_.kinds)
          sent = send_framed(dealer.get(), MessageKind::kVersionRequest, encode_version_request({k})) && sent;
        // Not connected yet (ZMQ_IMMEDIATE): ask again shortly rather than a poll interval later.
        next_poll = now + (sent ? options_.poll_interval : std::chrono::milliseconds(50));
      }
      if (!fetch)
        for (WeightKind k : options_.kinds)
          if (pending[kind_index(k)] && !fetch) {
            const Announcement a = *pending[kind_index(k)];
            begin(a);
            if (!fetch && pending[kind_index(k)] && pending[kind_index(k)]->version == a.version)
              pending[kind_index(k)].reset();
          }
      if (!fetch)
        continue;
      // Requests: re-send timed-out ones, then fill the window.
      const Announcement a = fetch->announcement;
      for (auto& [index, sent] : fetch->in_flight)
        if (now - sent.first >= options_.request_timeout) {
          if (sent.second >= options_.max_attempts) {
            fail(a,
                 "chunk " + std::to_string(index) + " unanswered after " + std::to_string(sent.second) + " requests");
            break;
          }
          if (send_framed(dealer.get(), MessageKind::kChunkRequest, encode_chunk_request({a.version, a.kind, index}))) {
            sent = {now, sent.second + 1};
            std::lock_guard<std::mutex> lock(mu_);
            ++stats_.chunk_retries;
          }
        }
      while (fetch && fetch->in_flight.size() < options_.window && fetch->next < a.chunk_count) {
        if (!send_framed(dealer.get(), MessageKind::kChunkRequest,
                         encode_chunk_request({a.version, a.kind, fetch->next})))
          break;  // not connected yet: retried on the next turn
        fetch->in_flight[fetch->next] = {now, 1};
        ++fetch->next;
      }
    }
  } catch (const std::exception& e) {
    spdlog::error("weight subscriber: stopped: {}", e.what());
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.failures;
    stats_.last_failure = e.what();
  }
}

}  // namespace updraft::messaging
