#include "messaging/buffer_server.h"

#include <spdlog/spdlog.h>

#include <map>
#include <random>

#include "messaging/control.h"
#include "messaging/zmq_util.h"

namespace updraft::messaging {

BufferServer::BufferServer(BufferServerOptions options, std::shared_ptr<RecordStore> store)
    : options_(std::move(options)), store_(std::move(store)) {
  UPD_CHECK(store_ != nullptr && !store_->is_secondary()) << "buffer server needs a primary store";
  UPD_REQUIRE(!options_.endpoints.empty()) << "buffer server: no endpoint to bind";
  std::random_device rd;
  instance_ = (uint64_t{rd()} << 32) ^ rd();
  if (options_.zmq_context == nullptr) {
    own_context_ = std::make_unique<ZmqContext>();
    context_ = own_context_->get();
  } else {
    context_ = options_.zmq_context;
  }
  for (const auto& ep : options_.endpoints)
    UPD_REQUIRE(options_.curve || is_local_endpoint(ep))
        << "buffer server: refusing to bind " << ep << " without CURVE (bind loopback, or configure curve keys)";
  if (options_.curve)
    zap_ = std::make_unique<ZapAuthenticator>(context_, options_.curve->allowed_clients);
  socket_ = std::make_unique<ZmqSocket>(context_, ZMQ_ROUTER);
  const int hwm = static_cast<int>(std::max<size_t>(4, options_.rcv_hwm_bytes / options_.typical_record_bytes));
  socket_->set(ZMQ_RCVHWM, hwm);
  socket_->set(ZMQ_SNDHWM, 10000);  // acks are small
  socket_->set(ZMQ_ROUTER_HANDOVER, 1);
  // Whole-message cap on tcp (oversized frames close the connection); inproc is capped by
  // the codec, which counts it as "oversize".
  socket_->set(ZMQ_MAXMSGSIZE, static_cast<int64_t>(options_.limits.max_message_bytes + 4096));
  socket_->set(ZMQ_HEARTBEAT_IVL, static_cast<int>(options_.heartbeat_interval.count()));
  socket_->set(ZMQ_HEARTBEAT_TIMEOUT, static_cast<int>(options_.heartbeat_timeout.count()));
  socket_->set(ZMQ_HEARTBEAT_TTL, static_cast<int>(options_.heartbeat_timeout.count()));
  if (options_.curve)
    apply_curve(*socket_, *options_.curve);
  for (const auto& ep : options_.endpoints) {
    socket_->bind(ep);
    bound_.push_back(ep.rfind("tcp://", 0) == 0 ? socket_->last_endpoint() : ep);
  }
  thread_ = std::thread([this] { run(); });
}

BufferServer::~BufferServer() {
  stop_ = true;
  thread_.join();
  socket_.reset();
  zap_.reset();
}

uint64_t BufferServer::auth_denied() const {
  return zap_ ? zap_->denied() : 0;
}

void BufferServer::run() {
  while (!stop_) {
    try {
      serve_once();
    } catch (const std::exception& e) {
      // A message handler failed: report it and keep serving (error model, role boundary).
      spdlog::error("buffer server: {}", e.what());
    }
  }
}

void BufferServer::serve_once() {
  auto& peers = peers_;
  auto& current_incarnation = current_incarnation_;
  zmq_pollitem_t item{socket_->get(), 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&item, 1, 50) == -1) {
    UPD_REQUIRE(zmq_errno() == EINTR) << "ZeroMQ: " << zmq_strerror(zmq_errno()) << " in zmq_poll";
    return;
  }
  if (!(item.revents & ZMQ_POLLIN))
    return;

  struct Pending {
    std::string peer;
    std::vector<ZmqMessage> frames;
    RecordStore::Item item;
  };
  std::vector<Pending> batch;
  size_t batch_bytes = 0;
  std::map<std::string, Ack> refusals;

  auto write_batch = [&] {
    if (batch.empty())
      return;
    std::vector<RecordStore::Item> items;
    items.reserve(batch.size());
    for (const auto& p : batch)
      items.push_back(p.item);
    RecordStore::WriteResult res;
    try {
      res = store_->write(items);
    } catch (const Error& e) {
      metrics_.write_errors.fetch_add(1);
      spdlog::error("buffer server: store write failed, {} records left unacknowledged: {}", batch.size(), e.what());
      batch.clear();
      batch_bytes = 0;
      return;
    }
    metrics_.write_batches.fetch_add(1);
    metrics_.records_stored.fetch_add(res.stored);
    metrics_.bytes_stored.fetch_add(res.bytes);
    std::map<std::string, Ack> acks;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (res.duplicate[i])
        metrics_.records_duplicate.fetch_add(1);
      acks[batch[i].peer].acked.push_back(batch[i].item.header.seq);
    }
    for (auto& [peer, ack] : acks) {
      ack.buffer_instance = instance_;
      send_framed_to(socket_->get(), peer, MessageKind::kAck, encode_ack(ack));  // dropped if the peer left
    }
    batch.clear();
    batch_bytes = 0;
  };

  std::vector<ZmqMessage> frames;
  size_t total = 0;
  while (batch.size() < options_.max_batch_records && batch_bytes < options_.max_batch_bytes &&
         recv_multipart(socket_->get(), frames, &total, 3)) {
    if (total != 3) {
      metrics_.reject(Reject::kBadFraming);
      continue;
    }
    const std::string peer(reinterpret_cast<const char*>(frames[0].data()), frames[0].size());
    const auto kind = parse_header(frames[1].data(), frames[1].size());
    if (!kind || (*kind != MessageKind::kRecord && *kind != MessageKind::kHello)) {
      metrics_.reject(Reject::kBadHeader);
      continue;
    }
    if (*kind == MessageKind::kHello) {
      Reject why = Reject::kNone;
      auto hello = decode_hello(frames[2].data(), frames[2].size(), &why);
      if (!hello) {
        metrics_.reject(why);
        continue;
      }
      write_batch();  // next_seq must include what is already in flight to the store
      peers[peer] = {hello->worker, hello->model};
      current_incarnation[hello->worker] = hello->incarnation;
      HelloReply reply{store_->next_seq(hello->worker), instance_};
      send_framed_to(socket_->get(), peer, MessageKind::kHelloReply, encode_hello_reply(reply));
      continue;
    }
    metrics_.records_received.fetch_add(1);
    auto p = peers.find(peer);
    const Verdict v = validate_record(frames[2].data(), frames[2].size(), options_.limits,
                                      p != peers.end() ? p->second.model : RecordModel{});
    if (v.reason == Reject::kModelMismatch) {  // intact, but not from the declared model: refused for good
      metrics_.reject(v.reason);
      const uint64_t n = metrics_.rejected_count(v.reason);
      if ((n & (n - 1)) == 0)  // the 1st, 2nd, 4th, ...: a flood does not flood the log
        spdlog::warn("buffer server: record {}/{} refused ({} so far): {}", v.header.worker, v.header.seq, n, v.detail);
      Ack& a = refusals[peer];
      a.rejected.push_back(v.header.seq);
      a.reject_reason = std::string(reject_name(v.reason)) + ": " + v.detail;
      continue;
    }
    if (!v.ok()) {
      metrics_.reject(v.reason);
      continue;
    }
    Reject refuse = Reject::kNone;
    if (p != peers.end() && p->second.worker != v.header.worker) {
      refuse = Reject::kWrongWorker;
    } else {
      auto cur = current_incarnation.find(v.header.worker);
      if (cur == current_incarnation.end())
        current_incarnation[v.header.worker] = v.header.incarnation;  // e.g. after a buffer restart
      else if (cur->second != v.header.incarnation)
        refuse = Reject::kStaleIncarnation;
    }
    if (refuse != Reject::kNone) {
      metrics_.reject(refuse);
      Ack& a = refusals[peer];
      a.rejected.push_back(v.header.seq);
      a.reject_reason = reject_name(refuse);
      continue;
    }
    Pending pend;
    pend.peer = peer;
    pend.frames = std::move(frames);  // keeps the bytes alive (the vector's buffer moves, not the frames)
    pend.item = {v.header, pend.frames[2].data(), pend.frames[2].size()};
    batch_bytes += pend.item.size;
    batch.push_back(std::move(pend));
    frames.clear();
  }
  write_batch();
  for (auto& [peer, ack] : refusals) {
    ack.buffer_instance = instance_;
    send_framed_to(socket_->get(), peer, MessageKind::kAck, encode_ack(ack));
  }
  const StoreStats st = store_->stats();
  metrics_.store_bytes.store(st.bytes);
  metrics_.store_records.store(st.records);
  metrics_.records_evicted.store(st.evicted_records);
  metrics_.bytes_evicted.store(st.evicted_bytes);
  metrics_.consumer_lag_records.store(store_->consumer_lag());
}

}  // namespace updraft::messaging
