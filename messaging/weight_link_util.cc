// What the weight link's publisher and subscriber share, and the subscriber's setup before its
// loop (messaging/weight_link_util.h).
#include "messaging/weight_link_util.h"

#include <string>

#include "kernels/io/weight_version.h"
#include "messaging/control.h"
#include "messaging/security.h"

namespace updraft::messaging::weight_link_detail {

namespace fs = std::filesystem;

namespace {

void common_socket_options(ZmqSocket& s) {  // (ZmqSocket sets linger 0 itself)
  s.set(ZMQ_RECONNECT_IVL, 100);
  s.set(ZMQ_RECONNECT_IVL_MAX, 2000);
}

void curve_client(ZmqSocket& s, const std::optional<CurveClient>& c) {
  if (c)
    apply_curve(s, *c);
}

}  // namespace

void heartbeats(ZmqSocket& s) {
  s.set(ZMQ_HEARTBEAT_IVL, 2000);
  s.set(ZMQ_HEARTBEAT_TIMEOUT, 30000);
  s.set(ZMQ_HEARTBEAT_TTL, 30000);
}

void connect_sockets(ZmqSocket& sub, ZmqSocket& dealer, const WeightSubscriberOptions& options) {
  common_socket_options(sub);
  common_socket_options(dealer);
  sub.set(ZMQ_MAXMSGSIZE, static_cast<int64_t>(kMaxControlBytes + 64));
  dealer.set(ZMQ_MAXMSGSIZE, static_cast<int64_t>(options.max_chunk_bytes + kMaxControlBytes + 64));
  dealer.set(ZMQ_IMMEDIATE, 1);
  heartbeats(dealer);
  curve_client(sub, options.curve);
  curve_client(dealer, options.curve);
  UPD_ZMQ_CHECK(zmq_setsockopt(sub.get(), ZMQ_SUBSCRIBE, "", 0)) << "subscribing";
  sub.connect(options.pub_endpoint);
  dealer.connect(options.request_endpoint);
}

void adopt_local_copies(const WeightSubscriberOptions& options, std::vector<fs::path> (&fetched_dirs)[2]) {
  if (!options.local_root.empty())
    for (const WeightKind k : options.kinds) {
      for (const WeightVersion& v : list_versions(options.local_root, weight_kind_name(k)))
        fetched_dirs[kind_index(k)].push_back(v.dir);
      const std::string prefix = std::string(weight_kind_name(k)) + "-v";
      std::vector<fs::path> partial;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(options.local_root, ec)) {
        const std::string name = e.path().filename().string();
        if (name.size() == prefix.size() + 12 && name.starts_with(prefix) && name.ends_with(".tmp"))
          partial.push_back(e.path());
      }
      for (const fs::path& p : partial)
        fs::remove_all(p, ec);
    }
}

}  // namespace updraft::messaging::weight_link_detail
