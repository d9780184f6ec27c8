#include "messaging/zmq_util.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace updraft::messaging {

ZmqContext::ZmqContext() : ctx_(zmq_ctx_new()) {
  UPD_REQUIRE(ctx_ != nullptr) << "ZeroMQ: zmq_ctx_new failed: " << zmq_strerror(zmq_errno());
}

ZmqContext::~ZmqContext() {
  // Sockets are closed with a bounded linger before this runs, so termination cannot hang.
  while (zmq_ctx_term(ctx_) == -1 && zmq_errno() == EINTR) {
  }
}

ZmqSocket::ZmqSocket(void* context, int type) : s_(zmq_socket(context, type)) {
  UPD_REQUIRE(s_ != nullptr) << "ZeroMQ: zmq_socket failed: " << zmq_strerror(zmq_errno());
  // Never let a close wait for unsent messages: nothing unacknowledged counts as delivered.
  set(ZMQ_LINGER, 0);
}

ZmqSocket::~ZmqSocket() {
  zmq_close(s_);
}

void ZmqSocket::set(int option, int value) {
  UPD_ZMQ_CHECK(zmq_setsockopt(s_, option, &value, sizeof(value))) << "option " << option;
}

void ZmqSocket::set(int option, int64_t value) {
  UPD_ZMQ_CHECK(zmq_setsockopt(s_, option, &value, sizeof(value))) << "option " << option;
}

void ZmqSocket::set(int option, const std::string& value) {
  UPD_ZMQ_CHECK(zmq_setsockopt(s_, option, value.data(), value.size())) << "option " << option;
}

void ZmqSocket::bind(const std::string& endpoint) {
  UPD_ZMQ_CHECK(zmq_bind(s_, endpoint.c_str())) << endpoint;
}

void ZmqSocket::connect(const std::string& endpoint) {
  UPD_ZMQ_CHECK(zmq_connect(s_, endpoint.c_str())) << endpoint;
}

std::string ZmqSocket::last_endpoint() const {
  char buf[256];
  size_t n = sizeof(buf);
  UPD_ZMQ_CHECK(zmq_getsockopt(s_, ZMQ_LAST_ENDPOINT, buf, &n));
  return std::string(buf, n > 0 && buf[n - 1] == '\0' ? n - 1 : n);
}

ZmqMessage::ZmqMessage() {
  zmq_msg_init(&m_);
}
ZmqMessage::~ZmqMessage() {
  zmq_msg_close(&m_);
}
ZmqMessage::ZmqMessage(ZmqMessage&& o) noexcept {
  zmq_msg_init(&m_);
  zmq_msg_move(&m_, &o.m_);
}

bool recv_multipart(void* socket, std::vector<ZmqMessage>& frames, size_t* total_frames, size_t max_frames) {
  frames.clear();
  size_t total = 0;
  for (;;) {
    ZmqMessage m;
    if (zmq_msg_recv(m.get(), socket, ZMQ_DONTWAIT) == -1) {
      const int e = zmq_errno();
      if (e == EAGAIN && total == 0)
        return false;
      UPD_REQUIRE(e == EINTR || e == EAGAIN) << "ZeroMQ: " << zmq_strerror(e) << " in zmq_msg_recv";
      continue;  // the rest of a multipart message is always there once its first frame is
    }
    ++total;
    const bool more = zmq_msg_more(m.get()) != 0;
    if (frames.size() < max_frames)
      frames.push_back(std::move(m));
    if (!more)
      break;
  }
  if (total_frames != nullptr)
    *total_frames = total;
  return true;
}

namespace {

void release_shared(void*, void* hint) {
  delete static_cast<std::shared_ptr<const void>*>(hint);
}

bool send_msg(void* socket, zmq_msg_t* msg, bool more) {
  for (;;) {
    if (zmq_msg_send(msg, socket, ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0)) != -1)
      return true;
    const int e = zmq_errno();
    if (e == EINTR)
      continue;
    zmq_msg_close(msg);
    if (e == EAGAIN || e == EHOSTUNREACH)
      return false;
    UPD_FAIL() << "ZeroMQ: " << zmq_strerror(e) << " in zmq_msg_send";
  }
}

}  // namespace

bool send_shared(void* socket, std::shared_ptr<const void> owner, const void* data, size_t size, bool more) {
  zmq_msg_t msg;
  auto* hint = new std::shared_ptr<const void>(std::move(owner));
  if (zmq_msg_init_data(&msg, const_cast<void*>(data), size, release_shared, hint) == -1) {
    delete hint;
    UPD_FAIL() << "ZeroMQ: " << zmq_strerror(zmq_errno()) << " in zmq_msg_init_data";
  }
  return send_msg(socket, &msg, more);
}

bool send_copy(void* socket, const void* data, size_t size, bool more) {
  zmq_msg_t msg;
  UPD_ZMQ_CHECK(zmq_msg_init_size(&msg, size));
  if (size > 0)
    std::memcpy(zmq_msg_data(&msg), data, size);
  return send_msg(socket, &msg, more);
}

bool send_framed(void* socket, MessageKind kind, const EncodedMessage& body) {
  const auto header = make_header(kind);
  if (!send_copy(socket, header.data(), header.size(), true))
    return false;
  return send_shared(socket, body.share(), body.data(), body.size(), false);
}

bool send_framed_to(void* socket, const std::string& peer, MessageKind kind, const EncodedMessage& body) {
  if (!send_copy(socket, peer.data(), peer.size(), true))
    return false;
  return send_framed(socket, kind, body);
}

bool is_local_endpoint(const std::string& ep) {
  if (ep.rfind("inproc://", 0) == 0 || ep.rfind("ipc://", 0) == 0)
    return true;
  for (const char* p : {"tcp://127.", "tcp://localhost:", "tcp://[::1]:"})
    if (ep.rfind(p, 0) == 0)
      return true;
  return false;
}

WakeFd::WakeFd() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  UPD_REQUIRE(fd_ >= 0) << "eventfd: " << std::strerror(errno);
}

WakeFd::~WakeFd() {
  close(fd_);
}

void WakeFd::wake() {
  const uint64_t one = 1;
  // A full counter (EAGAIN) already means "wake up"; nothing else can fail here.
  [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof(one));
}

void WakeFd::drain() {
  uint64_t v;
  [[maybe_unused]] ssize_t n = read(fd_, &v, sizeof(v));
}

}  // namespace updraft::messaging
