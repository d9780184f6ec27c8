// The weight link subscriber's chunk transfer (messaging/weight_link.h, "Subscriber";
// messaging/weight_subscriber_loop.h): begins a version (the shared path when it is readable here,
// else a fetch into <local_root>/<kind>-vNNNNNNNN.tmp), writes the chunks as they come, keeps the
// window of requests filled and re-sends timed-out ones, and at the last chunk checks, renames
// and verifies the copy before delivering it.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "kernels/io/atomic_file.h"
#include "kernels/io/sha256.h"
#include "kernels/io/weight_version.h"
#include "messaging/control.h"
#include "messaging/weight_link.h"
#include "messaging/weight_link_util.h"
#include "messaging/weight_subscriber_loop.h"

namespace updraft::messaging {

namespace fs = std::filesystem;
using weight_link_detail::kManifest;

void WeightSubscriber::Loop::begin(const Announcement& a) {
  // A shared filesystem: the announced directory is here and is the announced one.
  if (!options.prefer_transfer) {
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
  if (options.local_root.empty())
    return fail(a, "no local_root to fetch into");
  if (a.size_bytes > options.max_version_bytes)
    return fail(a, "announced size " + std::to_string(a.size_bytes) + " exceeds max_version_bytes");
  // Every chunk but a file's last is full and an empty file is one chunk: more chunks than
  // bytes (plus a file count's slack) is a lie that would only make us allocate.
  if (a.chunk_count > a.size_bytes + 4096)
    return fail(
        a, "announced " + std::to_string(a.chunk_count) + " chunks for " + std::to_string(a.size_bytes) + " bytes");
  fetch = std::make_unique<Fetch>();
  fetch->announcement = a;
  fetch->tmp = fs::path(options.local_root) / (version_dir_name(weight_kind_name(a.kind), a.version) + ".tmp");
  fetch->received.assign(a.chunk_count, false);
  std::error_code ec;
  fs::remove_all(fetch->tmp, ec);
  fs::create_directories(fetch->tmp, ec);
  if (ec)
    return fail(a, "cannot create " + fetch->tmp.string() + ": " + ec.message());
}

void WeightSubscriber::Loop::finish() {
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
  const fs::path final_dir = fs::path(options.local_root) / version_dir_name(weight_kind_name(a.kind), a.version);
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
    std::lock_guard<std::mutex> lock(self.mu_);
    ++self.stats_.fetched;
  }
  deliver(a, final_dir.string(), false);
}

void WeightSubscriber::Loop::on_chunk(const WeightChunk& c) {
  if (!fetch || fetch->announcement.kind != c.kind || fetch->announcement.version != c.version)
    return;  // a late answer for a transfer that is over
  const Announcement& a = fetch->announcement;
  if (c.count == 0)
    return fail(a, "the publisher no longer serves this version");
  if (c.count != a.chunk_count || c.index >= c.count)
    return fail(
        a, "chunk " + std::to_string(c.index) + " of " + std::to_string(c.count) + " does not match the announcement");
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
    std::lock_guard<std::mutex> lock(self.mu_);
    self.stats_.fetched_bytes += c.data.size();
  }
  if (fetch->received_count == a.chunk_count)
    finish();
}

// Requests: re-send timed-out ones, then fill the window.
void WeightSubscriber::Loop::send_requests(Clock::time_point now) {
  const Announcement a = fetch->announcement;
  for (auto& [index, sent] : fetch->in_flight)
    if (now - sent.first >= options.request_timeout) {
      if (sent.second >= options.max_attempts) {
        fail(a, "chunk " + std::to_string(index) + " unanswered after " + std::to_string(sent.second) + " requests");
        break;
      }
      if (send_framed(dealer.get(), MessageKind::kChunkRequest, encode_chunk_request({a.version, a.kind, index}))) {
        sent = {now, sent.second + 1};
        std::lock_guard<std::mutex> lock(self.mu_);
        ++self.stats_.chunk_retries;
      }
    }
  while (fetch && fetch->in_flight.size() < options.window && fetch->next < a.chunk_count) {
    if (!send_framed(dealer.get(), MessageKind::kChunkRequest, encode_chunk_request({a.version, a.kind, fetch->next})))
      break;  // not connected yet: retried on the next turn
    fetch->in_flight[fetch->next] = {now, 1};
    ++fetch->next;
  }
}

}  // namespace updraft::messaging
