// The weight link's publisher (messaging/weight_link.h): announces published versions over PUB,
// answers version requests and serves chunks of the kept versions over ROUTER.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "kernels/io/atomic_file.h"
#include "kernels/io/sha256.h"
#include "kernels/io/weight_version.h"
#include "messaging/control.h"
#include "messaging/weight_link.h"
#include "messaging/weight_link_util.h"

namespace updraft::messaging {

namespace fs = std::filesystem;
using weight_link_detail::heartbeats;
using weight_link_detail::kManifest;

namespace {

// Reads [offset, offset + size) of a file; false when it cannot.
bool read_range(const std::string& path, uint64_t offset, uint64_t size, std::string& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  out.resize(size);
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out.data() + done, size - done, static_cast<off_t>(offset + done));
    if (n <= 0) {
      if (n < 0 && errno == EINTR)
        continue;
      break;
    }
    done += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return done == size;
}

}  // namespace

struct WeightPublisher::Served {
  struct Piece {
    std::string file;
    uint64_t offset = 0, size = 0;
  };
  Announcement announcement;
  std::string dir;
  std::vector<Piece> plan;
  EncodedMessage encoded;
};

WeightPublisher::WeightPublisher(WeightPublisherOptions options)
    : options_(std::move(options)), wake_(std::make_unique<WakeFd>()) {
  UPD_REQUIRE(options_.chunk_bytes > 0 && options_.chunk_bytes <= kMaxChunkBytes)
      << "weight publisher: chunk_bytes must be in [1, " << kMaxChunkBytes << "]";
  UPD_REQUIRE(options_.keep_versions >= 1) << "weight publisher: keep_versions must be >= 1";
  for (const auto* ep : {&options_.pub_endpoint, &options_.request_endpoint})
    UPD_REQUIRE(options_.curve || is_local_endpoint(*ep))
        << "weight publisher: refusing to bind " << *ep << " without CURVE (bind loopback, or configure curve keys)";
  if (options_.zmq_context == nullptr) {
    own_context_ = std::make_unique<ZmqContext>();
    context_ = own_context_->get();
  } else {
    context_ = options_.zmq_context;
  }
  if (options_.curve)
    zap_ = std::make_unique<ZapAuthenticator>(context_, options_.curve->allowed_clients);
  pub_ = std::make_unique<ZmqSocket>(context_, ZMQ_PUB);
  router_ = std::make_unique<ZmqSocket>(context_, ZMQ_ROUTER);
  if (options_.curve)
    for (ZmqSocket* s : {pub_.get(), router_.get()})
      apply_curve(*s, *options_.curve);
  pub_->set(ZMQ_MAXMSGSIZE, int64_t{4096});  // subscribers send only subscriptions
  router_->set(ZMQ_MAXMSGSIZE, static_cast<int64_t>(kMaxControlBytes + 64));
  router_->set(ZMQ_ROUTER_HANDOVER, 1);
  heartbeats(*router_);
  pub_->bind(options_.pub_endpoint);
  router_->bind(options_.request_endpoint);
  auto bound = [](ZmqSocket& s, const std::string& ep) { return ep.rfind("tcp://", 0) == 0 ? s.last_endpoint() : ep; };
  pub_bound_ = bound(*pub_, options_.pub_endpoint);
  req_bound_ = bound(*router_, options_.request_endpoint);
  thread_ = std::thread([this] { run(); });
}

WeightPublisher::~WeightPublisher() {
  stop_ = true;
  wake_->wake();
  thread_.join();
  pub_.reset();
  router_.reset();
  zap_.reset();
}

Announcement WeightPublisher::announce(const std::string& dir, WeightKind kind,
                                       const std::vector<std::pair<std::string, double>>& metrics) {
  UPD_REQUIRE(metrics.size() <= kMaxAnnouncementMetrics)
      << "weight publisher: at most " << kMaxAnnouncementMetrics << " metrics per announcement";
  const WeightVersion v = verify_version(dir, weight_kind_name(kind),  // complete (and intact)
                                         options_.hash_on_announce ? VerifyLevel::kHashes : VerifyLevel::kSizes);
  auto s = std::make_shared<Served>();
  s->dir = dir;
  Announcement& a = s->announcement;
  a.version = v.version;
  a.kind = kind;
  a.path = fs::absolute(dir).string();
  a.sha256 = sha256(read_file((fs::path(dir) / kManifest).string()));
  a.metrics = metrics;
  std::vector<std::string> files;
  for (const auto& [name, hex] : v.sha256)
    files.push_back(name);  // name order (std::map)
  files.push_back(kManifest);
  for (const std::string& name : files) {
    const uint64_t size = fs::file_size(fs::path(dir) / name);
    a.size_bytes += size;
    uint64_t off = 0;
    do {
      const uint64_t n = std::min<uint64_t>(options_.chunk_bytes, size - off);
      s->plan.push_back({name, off, n});
      off += n;
    } while (off < size);
  }
  UPD_REQUIRE(s->plan.size() <= UINT32_MAX) << "weight publisher: too many chunks for " << dir;
  a.chunk_count = options_.serve_chunks ? static_cast<uint32_t>(s->plan.size()) : 0;
  s->encoded = encode_announcement(a);
  {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t current = 0;
    size_t of_kind = 0;
    for (const auto& e : served_)
      if (e->announcement.kind == kind) {
        current = std::max(current, e->announcement.version);
        ++of_kind;
      }
    UPD_REQUIRE(a.version > current) << "weight publisher: " << weight_kind_name(kind) << " v" << a.version
                                     << " is not newer than the current v" << current;
    if (of_kind >= options_.keep_versions) {
      auto oldest =
          std::find_if(served_.begin(), served_.end(), [&](const auto& e) { return e->announcement.kind == kind; });
      served_.erase(oldest);
    }
    served_.push_back(s);
    to_publish_.push_back(s->encoded);
    ++stats_.announcements;
  }
  wake_->wake();
  return a;
}

WeightPublisherStats WeightPublisher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void WeightPublisher::run() {
  std::vector<ZmqMessage> frames;
  size_t total = 0;
  while (!stop_) {
    zmq_pollitem_t items[2] = {{router_->get(), 0, ZMQ_POLLIN, 0}, {nullptr, wake_->fd(), ZMQ_POLLIN, 0}};
    if (zmq_poll(items, 2, 100) == -1) {
      if (zmq_errno() == EINTR)
        continue;
      spdlog::error("weight publisher: zmq_poll: {}", zmq_strerror(zmq_errno()));
      return;
    }
    if (items[1].revents & ZMQ_POLLIN)
      wake_->drain();
    std::vector<EncodedMessage> pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending.swap(to_publish_);
    }
    for (const auto& m : pending)
      send_framed(pub_->get(), MessageKind::kAnnouncement, m);  // PUB drops when a peer is full
    try {
      while (recv_multipart(router_->get(), frames, &total, 3)) {
        if (total != 3) {
          std::lock_guard<std::mutex> lock(mu_);
          ++stats_.rejected;
          continue;
        }
        const std::string peer(reinterpret_cast<const char*>(frames[0].data()), frames[0].size());
        serve(peer, frames[1].data(), frames[1].size(), frames[2].data(), frames[2].size());
      }
    } catch (const Error& e) {
      spdlog::error("weight publisher: {}", e.what());
    }
  }
}

void WeightPublisher::serve(const std::string& peer, const uint8_t* header, size_t header_size, const uint8_t* body,
                            size_t size) {
  const auto kind = parse_header(header, header_size);
  Reject why = Reject::kNone;
  if (kind == MessageKind::kVersionRequest) {
    if (const auto req = decode_version_request(body, size, &why)) {
      EncodedMessage reply;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.version_requests;
        for (auto it = served_.rbegin(); it != served_.rend(); ++it)
          if ((*it)->announcement.kind == req->kind) {
            reply = (*it)->encoded;
            break;
          }
      }
      if (reply.size() == 0) {
        Announcement none;
        none.kind = req->kind;
        reply = encode_announcement(none);
      }
      send_framed_to(router_->get(), peer, MessageKind::kAnnouncement, reply);
      return;
    }
  } else if (kind == MessageKind::kChunkRequest) {
    if (const auto req = decode_chunk_request(body, size, &why)) {
      std::shared_ptr<const Served> s;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.chunk_requests;
        if (options_.serve_chunks)
          for (const auto& e : served_)
            if (e->announcement.kind == req->kind && e->announcement.version == req->version)
              s = e;
      }
      WeightChunk c;
      c.version = req->version;
      c.kind = req->kind;
      c.index = req->index;
      if (s && req->index < s->plan.size()) {
        const Served::Piece& p = s->plan[req->index];
        if (read_range((fs::path(s->dir) / p.file).string(), p.offset, p.size, c.data)) {
          c.count = static_cast<uint32_t>(s->plan.size());
          c.file = p.file;
          c.offset = p.offset;
        } else {
          c.data.clear();
        }
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (c.count == 0) {
          ++stats_.not_served;
        } else {
          ++stats_.chunks_served;
          stats_.bytes_served += c.data.size();
        }
      }
      send_framed_to(router_->get(), peer, MessageKind::kWeightChunk, encode_weight_chunk(c));
      return;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.rejected;
}

}  // namespace updraft::messaging
