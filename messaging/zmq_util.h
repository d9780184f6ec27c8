// Thin RAII and checking layer over the ZeroMQ C API (libzmq 4.3).
//
// Every libzmq call that can fail goes through UPD_ZMQ_CHECK, which throws updraft::Error
// with zmq_strerror and file:line. Context, Socket and Message own their handles and are not
// copyable. Sockets are used by one thread at a time (a ZeroMQ rule).
#pragma once

#include <zmq.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/error.h"
#include "messaging/control.h"

// UPD_ZMQ_CHECK(zmq_bind(s, ep)) << "binding " << ep;  (the call returns -1 on failure)
#define UPD_ZMQ_CHECK(expr)                              \
  for (int upd_rc_ = (expr); upd_rc_ == -1; upd_rc_ = 0) \
  UPD_FAIL() << "ZeroMQ: " << zmq_strerror(zmq_errno()) << " in " #expr ": "

namespace updraft::messaging {

class ZmqContext {
 public:
  ZmqContext();
  ~ZmqContext();
  ZmqContext(const ZmqContext&) = delete;
  ZmqContext& operator=(const ZmqContext&) = delete;
  void* get() const { return ctx_; }

 private:
  void* ctx_;
};

class ZmqSocket {
 public:
  ZmqSocket(void* context, int type);
  ~ZmqSocket();
  ZmqSocket(const ZmqSocket&) = delete;
  ZmqSocket& operator=(const ZmqSocket&) = delete;
  void* get() const { return s_; }
  void set(int option, int value);
  void set(int option, int64_t value);
  void set(int option, const std::string& value);
  void bind(const std::string& endpoint);
  void connect(const std::string& endpoint);
  std::string last_endpoint() const;

 private:
  void* s_;
};

// One received frame.
class ZmqMessage {
 public:
  ZmqMessage();
  ~ZmqMessage();
  ZmqMessage(ZmqMessage&& o) noexcept;
  ZmqMessage& operator=(ZmqMessage&&) = delete;
  ZmqMessage(const ZmqMessage&) = delete;
  ZmqMessage& operator=(const ZmqMessage&) = delete;
  zmq_msg_t* get() { return &m_; }
  const uint8_t* data() const { return static_cast<const uint8_t*>(zmq_msg_data(const_cast<zmq_msg_t*>(&m_))); }
  size_t size() const { return zmq_msg_size(const_cast<zmq_msg_t*>(&m_)); }

 private:
  zmq_msg_t m_;
};

// Receives every frame of the next message without blocking. Returns false when none is
// waiting; throws on other errors. Frames beyond max_frames are received and dropped (the
// count in *total_frames tells the caller).
bool recv_multipart(void* socket, std::vector<ZmqMessage>& frames, size_t* total_frames, size_t max_frames = 8);

// Sends one frame without blocking, sharing `owner`'s bytes with ZeroMQ (zero copy).
// Returns false when ZeroMQ would block (high-water mark or no peer); throws otherwise.
bool send_shared(void* socket, std::shared_ptr<const void> owner, const void* data, size_t size, bool more);
// Sends a copy of the bytes without blocking; same return convention.
bool send_copy(void* socket, const void* data, size_t size, bool more);

// Sends [header][body] (DEALER, PUB) or [peer][header][body] (ROUTER) without blocking, the body
// shared with ZeroMQ; same return convention (once the first frame is queued ZeroMQ takes the rest).
bool send_framed(void* socket, MessageKind kind, const EncodedMessage& body);
bool send_framed_to(void* socket, const std::string& peer, MessageKind kind, const EncodedMessage& body);

// True for tcp:// endpoints on the loopback interface, and for inproc:// and ipc://.
bool is_local_endpoint(const std::string& endpoint);

// Lets a caller's thread wait on a socket and be woken by another thread (an eventfd).
class WakeFd {
 public:
  WakeFd();
  ~WakeFd();
  WakeFd(const WakeFd&) = delete;
  WakeFd& operator=(const WakeFd&) = delete;
  int fd() const { return fd_; }
  void wake();
  void drain();

 private:
  int fd_;
};

}  // namespace updraft::messaging
