// The HTTP server of rollout/serve/http.h: sockets, connection threads, limits and deadlines
// (the parser is http_parse.cc).
#include "rollout/serve/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "kernels/core/error.h"

namespace updraft::http {
namespace {

bool send_all(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Sends a streamed body as chunks, then the last chunk; false when the client went away (or the
// stream threw, after the head was out: nothing but closing is left to do).
bool stream_body(int fd, const Response& resp) {
  bool ok = true;
  const ChunkWriter write = [&](std::string_view piece) {
    if (ok && !piece.empty()) {
      char size[24];
      std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
      ok = send_all(fd, std::string(size) + std::string(piece) + "\r\n");
    }
    return ok;
  };
  try {
    resp.stream(write);
  } catch (const std::exception&) {
    return false;
  }
  return ok && send_all(fd, "0\r\n\r\n");
}

Response error_response(int status, const std::string& reason) {
  Response r;
  r.status = status;
  std::string escaped;
  for (char c : reason) {  // the reason is ours, but may quote client bytes
    if (c == '"' || c == '\\')
      escaped += '\\';
    if (static_cast<unsigned char>(c) < 0x20)
      c = ' ';
    escaped += c;
  }
  r.body = "{\"error\":{\"message\":\"" + escaped + "\",\"type\":\"" + error_type(status) +
           "\",\"code\":" + std::to_string(status) + "}}";
  return r;
}

bool is_loopback(const in_addr& a) { return (ntohl(a.s_addr) >> 24) == 127; }


}  // namespace

Server::Server(ServerOptions options, Handler handler) : options_(std::move(options)), handler_(std::move(handler)) {
  UPD_REQUIRE(options_.max_connections > 0) << "http: max_connections must be positive";
  in_addr addr{};
  const std::string host = options_.host == "localhost" ? "127.0.0.1" : options_.host;
  UPD_REQUIRE(::inet_pton(AF_INET, host.c_str(), &addr) == 1)
      << "http: host '" << options_.host << "' is not an IPv4 address";
  if (!is_loopback(addr)) {
    UPD_REQUIRE(options_.allow_remote && !options_.bearer_token.empty())
        << "http: binding " << options_.host
        << " (not loopback) needs an API key: anyone who can reach the port could start generations";
  }
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  UPD_REQUIRE(listen_fd_ >= 0) << "http: socket: " << std::strerror(errno);
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(options_.port);
  sa.sin_addr = addr;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(listen_fd_, 128) != 0) {
    const int e = errno;
    ::close(listen_fd_);
    UPD_FAIL() << "http: cannot listen on " << options_.host << ":" << options_.port << ": " << std::strerror(e);
  }
  socklen_t len = sizeof sa;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.sin_port);
  if (::pipe2(wake_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    UPD_FAIL() << "http: pipe: " << std::strerror(errno);
  }
  acceptor_ = std::thread([this] { accept_loop(); });
}

Server::~Server() { stop(); }

ServerStats Server::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Server::stop() {
  if (stopping_.exchange(true))
    return;
  const char b = 1;
  [[maybe_unused]] ssize_t w = ::write(wake_[1], &b, 1);
  if (acceptor_.joinable())
    acceptor_.join();
  ::close(listen_fd_);
  drain_refused(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : conns_)  // reads end (idle connections close); a running handler's answer is still sent
      ::shutdown(c->fd, SHUT_RD);
  }
  reap(true);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void Server::reap(bool all) {
  std::list<std::unique_ptr<Conn>> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (all || (*it)->done.load()) {
        finished.push_back(std::move(*it));
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : finished) {
    c->thread.join();
    ::close(c->fd);
  }
}

void Server::accept_loop() {
  while (!stopping_.load()) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    const int n = ::poll(fds, 2, refused_.empty() ? 1000 : 50);
    reap(false);
    drain_refused(false);
    if (n <= 0 || stopping_.load() || !(fds[0].revents & POLLIN))
      continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0)
      continue;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int>(conns_.size()) >= options_.max_connections) {
      ++stats_.refused_connections;
      send_all(fd, serialize(error_response(503, "too many connections"), false));
      // Closing with the request unread would reset the connection before the client reads
      // the 503: end our side, and close once the client has (or after a second).
      ::shutdown(fd, SHUT_WR);
      if (refused_.size() >= 64) {
        ::close(refused_.front().first);
        refused_.pop_front();
      }
      refused_.emplace_back(fd, std::chrono::steady_clock::now() + std::chrono::seconds(1));
      continue;
    }
    ++stats_.connections;
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    Conn* raw = c.get();
    conns_.push_back(std::move(c));
    raw->thread = std::thread([this, raw] { serve(raw); });
  }
}

void Server::drain_refused(bool all) {
  const auto now = std::chrono::steady_clock::now();
  char sink[4096];
  for (auto it = refused_.begin(); it != refused_.end();) {
    ssize_t n;
    while ((n = ::recv(it->first, sink, sizeof sink, MSG_DONTWAIT)) > 0) {
    }
    const bool closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    if (all || closed || now >= it->second) {
      ::close(it->first);
      it = refused_.erase(it);
    } else {
      ++it;
    }
  }
}

bool Server::authorized(const Request& r) const {
  if (options_.bearer_token.empty())
    return true;
  if (r.method == "GET" &&
      std::find(options_.public_paths.begin(), options_.public_paths.end(), r.path) != options_.public_paths.end())
    return true;
  const std::string got = r.header("authorization");
  const std::string want = "Bearer " + options_.bearer_token;
  unsigned diff = got.size() == want.size() ? 0u : 1u;
  for (size_t i = 0; i < want.size(); ++i)
    diff |= static_cast<unsigned>(want[i] ^ (i < got.size() ? got[i] : 0));
  return diff == 0;
}

void Server::serve(Conn* c) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.open_connections;
  }
  std::string buf;
  bool sent_continue = false;
  char chunk[64 << 10];
  // When the request being read began arriving: the whole of it must be in by request_timeout.
  auto began = std::chrono::steady_clock::now();
  auto reader = std::make_unique<RequestReader>(options_.limits);
  Request req;
  while (!stopping_.load()) {
    const ParseResult p = reader->feed(&buf, &req);
    if (p.kind == ParseResult::kBad) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.bad_requests;
      }
      send_all(c->fd, serialize(error_response(p.status, p.reason), false));
      break;
    }
    if (p.kind == ParseResult::kIncomplete) {
      if (p.headers_done && req.expect_continue && !sent_continue) {
        sent_continue = true;
        if (!send_all(c->fd, "HTTP/1.1 100 Continue\r\n\r\n"))
          break;
      }
      pollfd pfd{c->fd, POLLIN, 0};
      const bool reading = reader->started() || !buf.empty();
      auto wait = options_.idle_timeout;
      if (reading)
        wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(
                                  began + options_.request_timeout - std::chrono::steady_clock::now()));
      const int n = wait.count() > 0 ? ::poll(&pfd, 1, static_cast<int>(wait.count())) : 0;
      if (n == 0 && reading)
        send_all(c->fd, serialize(error_response(408, "request not completed in time"), false));
      if (n <= 0)
        break;
      const ssize_t got = ::recv(c->fd, chunk, sizeof chunk, 0);
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0)
        break;
      if (!reading)
        began = std::chrono::steady_clock::now();
      buf.append(chunk, static_cast<size_t>(got));
      continue;
    }
    reader = std::make_unique<RequestReader>(options_.limits);  // buf holds the next request's bytes
    began = std::chrono::steady_clock::now();
    sent_continue = false;
    Response resp;
    if (!authorized(req)) {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.unauthorized;
      resp = error_response(401, "missing or wrong bearer token");
    } else {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.requests;
      }
      try {
        resp = handler_(req);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.handler_errors;
        resp = error_response(500, e.what());
      }
    }
    const bool keep = req.keep_alive && !stopping_.load();
    if (!send_all(c->fd, serialize(resp, keep)) || (resp.stream && !stream_body(c->fd, resp)) || !keep)
      break;
    req = Request();
  }
  ::shutdown(c->fd, SHUT_RDWR);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --stats_.open_connections;
  }
  c->done.store(true);
}

std::pair<int, std::string> request(uint16_t port, const std::string& method, const std::string& target,
                                    const std::string& body,
                                    const std::vector<std::pair<std::string, std::string>>& headers,
                                    std::chrono::milliseconds timeout) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  UPD_REQUIRE(fd >= 0) << "http client: socket: " << std::strerror(errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  UPD_REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0)
      << "http client: connect to port " << port << ": " << std::strerror(errno);
  std::string out = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& [k, v] : headers)
    out += k + ": " + v + "\r\n";
  if (!body.empty() || method == "POST")
    out += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  out += "\r\n" + body;
  UPD_REQUIRE(send_all(fd, out)) << "http client: send failed: " << std::strerror(errno);
  std::string in;
  char chunk[64 << 10];
  for (;;) {
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR)
      continue;
    UPD_REQUIRE(n >= 0) << "http client: no response in time from port " << port;
    if (n == 0)
      break;
    in.append(chunk, static_cast<size_t>(n));
  }
  UPD_REQUIRE(in.size() >= 12 && in.compare(0, 5, "HTTP/") == 0) << "http client: no HTTP response";
  const int status = std::atoi(in.c_str() + 9);
  const size_t body_at = in.find("\r\n\r\n");
  UPD_REQUIRE(body_at != std::string::npos) << "http client: truncated response";
  return {status, in.substr(body_at + 4)};
}

}  // namespace updraft::http
