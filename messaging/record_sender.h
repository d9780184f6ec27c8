// Worker side of the record link: a bounded byte queue drained by a sender thread over a
// ZeroMQ DEALER socket, with application acks and resends (docs/messaging.md).
//
// Contract:
//  * submit() never waits for the network or the buffer: it takes a mutex for O(1) work
//    and returns. The queue holds at most max_queue_bytes (records waiting to be sent plus
//    records sent and not yet acknowledged). When a record does not fit, the shed policy
//    decides: kDropOldest drops the oldest records not yet sent until it fits (fresh data is
//    worth more to the drafter); kDropNewest refuses the new record. Sent-unacknowledged
//    records are never shed. Every shed record is counted in records_shed.
//  * seq numbers are assigned when a record is first sent, after the buffer answered Hello
//    with the worker's next seq, so shed records leave no gaps and a restarted worker
//    continues where the buffer's copy of its stream ends.
//  * A record stays queued until the buffer acknowledges it (durably written or already
//    present); unacknowledged records are resent on reconnect and after ack_timeout, with
//    identical bytes, so the buffer's (policy_version, worker, seq) dedup makes storage
//    exactly-once.
//  * Destruction stops the thread promptly (linger 0): records not yet acknowledged are
//    dropped, which loses nothing acknowledged. Call flush() first to wait for them.
//  * on_ack runs on the sender thread; keep it short.
// Thread safety: submit, flush and metrics may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "messaging/codec.h"
#include "messaging/metrics.h"
#include "messaging/security.h"

namespace updraft::messaging {

enum class ShedPolicy { kDropOldest, kDropNewest };

struct SenderOptions {
  std::string endpoint = "tcp://127.0.0.1:5557";
  uint32_t worker = 0;
  // The model the records come from, declared in the Hello: the buffer refuses records
  // inconsistent with it (RecordModel, record.h). Undeclared (the default): contract checks only.
  RecordModel model;
  size_t max_queue_bytes = size_t{256} << 20;    // pending + unacknowledged
  size_t max_inflight_bytes = size_t{64} << 20;  // sent, not yet acknowledged
  ShedPolicy shed = ShedPolicy::kDropOldest;
  std::chrono::milliseconds ack_timeout{5000};
  std::chrono::milliseconds hello_interval{250};
  // Heartbeats detect dead peers; the timeout must exceed the time one frame of
  // limits.max_message_bytes takes on the slowest link (docs/messaging.md).
  std::chrono::milliseconds heartbeat_interval{2000};
  std::chrono::milliseconds heartbeat_timeout{30000};
  DecodeLimits limits;  // max_message_bytes caps an encoded record
  std::optional<CurveClient> curve;
  void* zmq_context = nullptr;  // share the buffer's context for inproc://; else one is created
  std::function<void(uint64_t seq, uint32_t checksum)> on_ack;
};

class RecordSender {
 public:
  explicit RecordSender(SenderOptions options);
  ~RecordSender();
  RecordSender(const RecordSender&) = delete;
  RecordSender& operator=(const RecordSender&) = delete;

  // Queues r (its seq, incarnation, worker and checksum are set by the sender). Returns false
  // if r itself was not queued (shed by kDropNewest, larger than the queue, or invalid).
  bool submit(RecordData&& r);
  // Waits until every queued record is acknowledged, shed or refused. True when drained.
  bool flush(std::chrono::milliseconds timeout);
  const SenderMetrics& metrics() const { return metrics_; }
  uint64_t incarnation() const { return incarnation_; }

 private:
  struct Inflight {
    EncodedMessage msg;
    uint32_t checksum = 0;
    std::chrono::steady_clock::time_point last_sent{};
    bool sent = false;
  };
  void run();
  void handle_incoming(void* socket);
  void send_due(void* socket);
  void update_gauges();  // REQUIRES: mu_ held

  SenderOptions options_;
  uint64_t incarnation_;
  SenderMetrics metrics_;
  std::unique_ptr<class ZmqContext> own_context_;
  void* context_;
  std::unique_ptr<class WakeFd> wake_;

  std::mutex mu_;
  std::condition_variable drained_cv_;
  std::deque<RecordData> pending_;
  size_t pending_bytes_ = 0;
  size_t inflight_bytes_ = 0;
  size_t inflight_count_ = 0;
  bool stop_ = false;

  // Sender-thread state.
  std::map<uint64_t, Inflight> inflight_;
  bool have_seq_ = false;
  uint64_t next_seq_ = 0;
  bool need_hello_ = true;
  std::chrono::steady_clock::time_point last_hello_{};
  std::thread thread_;
};

}  // namespace updraft::messaging
