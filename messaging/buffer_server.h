// Buffer side of the record link: a ZeroMQ ROUTER that validates records, writes them to
// the RecordStore and acknowledges them only after the write is durable (docs/messaging.md).
//
// Contract:
//  * The constructor binds every endpoint (errors such as "address in use" throw here) and
//    starts the serving thread; the destructor stops it promptly (linger 0).
//  * Endpoints must be local (loopback tcp, inproc, ipc) unless CURVE is configured.
//  * Each loop drains what has arrived (up to max_batch_bytes / max_batch_records), writes
//    the valid, new records in one batch (durable per the store's sync policy), then acks
//    every record of the batch, duplicates included, so resends complete.
//  * A refused message is counted under its reason (BufferMetrics::rejected) and nothing of
//    it is stored. Records from a sender superseded by a newer Hello of the same worker, whose
//    worker differs from its connection's Hello, or inconsistent with the model that Hello
//    declared (ids beyond its vocabulary, aux of another width or not finite, teacher rows of
//    another width or unsorted: RecordModel, record.h) are refused and reported in an Ack, so
//    the sender drops them instead of resending.
//  * A failed store write leaves the batch unacknowledged (the senders resend) and the
//    server keeps serving.
// Thread safety: metrics() and endpoints() may be read from any thread.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "messaging/codec.h"
#include "messaging/metrics.h"
#include "messaging/record_store.h"
#include "messaging/security.h"

namespace updraft::messaging {

struct BufferServerOptions {
  std::vector<std::string> endpoints = {"tcp://127.0.0.1:5557"};
  DecodeLimits limits;
  size_t max_batch_bytes = size_t{64} << 20;
  size_t max_batch_records = 256;
  // The receive high-water mark is sized from bytes: rcv_hwm_bytes / typical_record_bytes
  // messages per connected worker (at least 4).
  size_t rcv_hwm_bytes = size_t{256} << 20;
  size_t typical_record_bytes = size_t{4} << 20;
  std::chrono::milliseconds heartbeat_interval{2000};
  std::chrono::milliseconds heartbeat_timeout{30000};
  std::optional<CurveServer> curve;
  void* zmq_context = nullptr;  // share with senders for inproc://; else one is created
};

class BufferServer {
 public:
  BufferServer(BufferServerOptions options, std::shared_ptr<RecordStore> store);
  ~BufferServer();
  BufferServer(const BufferServer&) = delete;
  BufferServer& operator=(const BufferServer&) = delete;

  // The endpoints actually bound (a tcp port given as * is resolved).
  const std::vector<std::string>& endpoints() const { return bound_; }
  const BufferMetrics& metrics() const { return metrics_; }
  uint64_t instance() const { return instance_; }
  // ZAP denials when CURVE is on (0 otherwise).
  uint64_t auth_denied() const;

 private:
  void run();
  void serve_once();

  BufferServerOptions options_;
  std::shared_ptr<RecordStore> store_;
  uint64_t instance_;
  BufferMetrics metrics_;
  std::unique_ptr<class ZmqContext> own_context_;
  void* context_ = nullptr;
  std::unique_ptr<ZapAuthenticator> zap_;
  std::unique_ptr<class ZmqSocket> socket_;
  std::vector<std::string> bound_;
  std::atomic<bool> stop_{false};
  // Serving-thread state: the worker each connection said Hello as (and the model it declared),
  // and the newest sender incarnation of each worker.
  struct Peer {
    uint32_t worker = 0;
    RecordModel model;
  };
  std::map<std::string, Peer> peers_;
  std::map<uint32_t, uint64_t> current_incarnation_;
  std::thread thread_;
};

}  // namespace updraft::messaging
