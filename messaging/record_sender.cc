#include "messaging/record_sender.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <random>

#include "messaging/control.h"
#include "messaging/zmq_util.h"

namespace updraft::messaging {

namespace {

using Clock = std::chrono::steady_clock;

uint64_t random_incarnation() {
  std::random_device rd;
  uint64_t v = (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  return v == 0 ? 1 : v;
}

std::string routing_id(uint32_t worker, uint64_t incarnation) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "w%u-%016llx", worker, static_cast<unsigned long long>(incarnation));
  return buf;
}

}  // namespace

RecordSender::RecordSender(SenderOptions options)
    : options_(std::move(options)), incarnation_(random_incarnation()), wake_(std::make_unique<WakeFd>()) {
  UPD_REQUIRE(options_.max_inflight_bytes > 0 && options_.max_queue_bytes >= options_.max_inflight_bytes)
      << "record sender: need 0 < max_inflight_bytes <= max_queue_bytes";
  if (options_.zmq_context == nullptr) {
    own_context_ = std::make_unique<ZmqContext>();
    context_ = own_context_->get();
  } else {
    context_ = options_.zmq_context;
  }
  thread_ = std::thread([this] { run(); });
}

RecordSender::~RecordSender() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_->wake();
  thread_.join();
}

bool RecordSender::submit(RecordData&& r) {
  const size_t size = r.payload_bytes();
  {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.records_submitted.fetch_add(1, std::memory_order_relaxed);
    if (size > options_.max_queue_bytes) {
      metrics_.records_shed.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    while (pending_bytes_ + inflight_bytes_ + size > options_.max_queue_bytes) {
      if (options_.shed == ShedPolicy::kDropNewest || pending_.empty()) {
        metrics_.records_shed.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      pending_bytes_ -= pending_.front().payload_bytes();
      pending_.pop_front();
      metrics_.records_shed.fetch_add(1, std::memory_order_relaxed);
    }
    pending_.push_back(std::move(r));
    pending_bytes_ += size;
    update_gauges();
  }
  wake_->wake();
  return true;
}

bool RecordSender::flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return drained_cv_.wait_for(lock, timeout, [&] { return pending_.empty() && inflight_count_ == 0; });
}

void RecordSender::update_gauges() {
  metrics_.queue_bytes.store(pending_bytes_ + inflight_bytes_, std::memory_order_relaxed);
  metrics_.queue_records.store(pending_.size() + inflight_count_, std::memory_order_relaxed);
}

void RecordSender::run() {
  try {
    ZmqSocket socket(context_, ZMQ_DEALER);
    socket.set(ZMQ_ROUTING_ID, routing_id(options_.worker, incarnation_));
    socket.set(ZMQ_IMMEDIATE, 1);  // no queueing towards a peer that is not connected
    socket.set(ZMQ_SNDHWM, 1000);  // messages; bytes are bounded by max_inflight_bytes
    socket.set(ZMQ_RCVHWM, 1000);
    socket.set(ZMQ_MAXMSGSIZE, static_cast<int64_t>(kMaxControlBytes));
    socket.set(ZMQ_RECONNECT_IVL, 100);
    socket.set(ZMQ_RECONNECT_IVL_MAX, 2000);
    socket.set(ZMQ_HEARTBEAT_IVL, static_cast<int>(options_.heartbeat_interval.count()));
    socket.set(ZMQ_HEARTBEAT_TIMEOUT, static_cast<int>(options_.heartbeat_timeout.count()));
    socket.set(ZMQ_HEARTBEAT_TTL, static_cast<int>(options_.heartbeat_timeout.count()));
    if (options_.curve)
      apply_curve(socket, *options_.curve);
    // Connection events make resends immediate after the buffer comes back.
    char monitor_ep[64];
    std::snprintf(monitor_ep, sizeof(monitor_ep), "inproc://updraft-sender-monitor-%p", static_cast<void*>(this));
    UPD_ZMQ_CHECK(zmq_socket_monitor(socket.get(), monitor_ep, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED));
    ZmqSocket monitor(context_, ZMQ_PAIR);
    monitor.connect(monitor_ep);
    socket.connect(options_.endpoint);

    bool connected_before = false;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_)
          break;
      }
      zmq_pollitem_t items[3] = {
          {socket.get(), 0, ZMQ_POLLIN, 0}, {monitor.get(), 0, ZMQ_POLLIN, 0}, {nullptr, wake_->fd(), ZMQ_POLLIN, 0}};
      if (zmq_poll(items, 3, 20) == -1) {
        UPD_REQUIRE(zmq_errno() == EINTR) << "ZeroMQ: " << zmq_strerror(zmq_errno()) << " in zmq_poll";
        continue;
      }
      if (items[2].revents & ZMQ_POLLIN)
        wake_->drain();
      if (items[1].revents & ZMQ_POLLIN) {
        std::vector<ZmqMessage> ev;
        while (recv_multipart(monitor.get(), ev, nullptr)) {
          uint16_t event = 0;
          if (!ev.empty() && ev[0].size() >= 2)
            std::memcpy(&event, ev[0].data(), 2);
          if (event == ZMQ_EVENT_CONNECTED) {
            if (connected_before)
              metrics_.reconnects.fetch_add(1, std::memory_order_relaxed);
            connected_before = true;
            need_hello_ = true;
            last_hello_ = {};
            for (auto& [seq, f] : inflight_)
              f.last_sent = {};  // due now
          }
        }
      }
      if (items[0].revents & ZMQ_POLLIN)
        handle_incoming(socket.get());
      send_due(socket.get());
    }
    zmq_socket_monitor(socket.get(), nullptr, 0);
  } catch (const std::exception& e) {
    // A broken sender must not take the worker down; generation keeps going and records are
    // shed once the queue is full, which the metrics show.
    spdlog::error("record sender (worker {}) stopped: {}", options_.worker, e.what());
  }
}

void RecordSender::handle_incoming(void* socket) {
  std::vector<ZmqMessage> frames;
  size_t total = 0;
  while (recv_multipart(socket, frames, &total)) {
    if (total != 2)
      continue;
    const auto kind = parse_header(frames[0].data(), frames[0].size());
    if (kind == MessageKind::kHelloReply) {
      auto r = decode_hello_reply(frames[1].data(), frames[1].size(), nullptr);
      if (!r)
        continue;
      need_hello_ = false;
      if (!have_seq_ || r->next_seq > next_seq_)
        next_seq_ = std::max(next_seq_, r->next_seq);
      have_seq_ = true;
    } else if (kind == MessageKind::kAck) {
      auto a = decode_ack(frames[1].data(), frames[1].size(), nullptr);
      if (!a)
        continue;
      size_t freed = 0, done = 0;
      for (uint64_t seq : a->acked) {
        auto it = inflight_.find(seq);
        if (it == inflight_.end())
          continue;  // a second ack for a resent record
        metrics_.records_acked.fetch_add(1, std::memory_order_relaxed);
        metrics_.bytes_acked.fetch_add(it->second.msg.size(), std::memory_order_relaxed);
        if (options_.on_ack)
          options_.on_ack(seq, it->second.checksum);
        freed += it->second.msg.size();
        ++done;
        inflight_.erase(it);
      }
      for (uint64_t seq : a->rejected) {
        auto it = inflight_.find(seq);
        if (it == inflight_.end())
          continue;
        spdlog::warn("record sender (worker {}): buffer refused seq {}: {}", options_.worker, seq, a->reject_reason);
        metrics_.records_refused.fetch_add(1, std::memory_order_relaxed);
        freed += it->second.msg.size();
        ++done;
        inflight_.erase(it);
      }
      if (done > 0) {
        std::lock_guard<std::mutex> lock(mu_);
        inflight_bytes_ -= freed;
        inflight_count_ -= done;
        update_gauges();
        if (pending_.empty() && inflight_count_ == 0)
          drained_cv_.notify_all();
      }
    }
  }
}

void RecordSender::send_due(void* socket) {
  const auto now = Clock::now();
  if (need_hello_ && now - last_hello_ >= options_.hello_interval) {
    if (send_framed(socket, MessageKind::kHello, encode_hello({options_.worker, incarnation_, options_.model})))
      last_hello_ = now;
  }
  if (!have_seq_)
    return;
  // Resends (and first sends that met a full pipe), oldest first.
  for (auto& [seq, f] : inflight_) {
    if (f.sent && now - f.last_sent < options_.ack_timeout)
      continue;
    if (!send_framed(socket, MessageKind::kRecord, f.msg))
      return;  // pipe full or no peer: try again on the next pass
    (f.sent ? metrics_.records_resent : metrics_.records_sent).fetch_add(1, std::memory_order_relaxed);
    metrics_.bytes_sent.fetch_add(f.msg.size(), std::memory_order_relaxed);
    f.sent = true;
    f.last_sent = now;
  }
  // New records while the in-flight window has room.
  for (;;) {
    RecordData r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_.empty() || inflight_bytes_ >= options_.max_inflight_bytes)
        return;
      r = std::move(pending_.front());
      pending_.pop_front();
      pending_bytes_ -= r.payload_bytes();
    }
    r.worker = options_.worker;
    r.incarnation = incarnation_;
    r.seq = next_seq_;
    Inflight f;
    try {
      f.msg = encode_record(r, options_.limits, &f.checksum);
    } catch (const Error& e) {
      metrics_.records_invalid.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("record sender (worker {}): dropping an invalid record: {}", options_.worker, e.what());
      std::lock_guard<std::mutex> lock(mu_);
      update_gauges();
      if (pending_.empty() && inflight_count_ == 0)
        drained_cv_.notify_all();
      continue;
    }
    ++next_seq_;
    const size_t size = f.msg.size();
    {
      std::lock_guard<std::mutex> lock(mu_);
      inflight_bytes_ += size;
      ++inflight_count_;
      update_gauges();
    }
    auto& slot = inflight_[r.seq] = std::move(f);
    if (send_framed(socket, MessageKind::kRecord, slot.msg)) {
      slot.sent = true;
      slot.last_sent = now;
      metrics_.records_sent.fetch_add(1, std::memory_order_relaxed);
      metrics_.bytes_sent.fetch_add(size, std::memory_order_relaxed);
    } else {
      return;
    }
  }
}

}  // namespace updraft::messaging
