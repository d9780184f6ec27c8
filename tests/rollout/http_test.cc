// The HTTP server of rollout/serve/http.h over real sockets: routing to the handler, keep-alive,
// pipelining, 100-continue, a large body, bearer tokens, the connection cap, the loopback rule,
// idle and whole-request deadlines, streams, stop. (The reader alone: http_parse_test.cc.)
#include "rollout/serve/http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "kernels/core/error.h"

namespace updraft::http {
namespace {

Response echo(const Request& r) {
  Response out;
  out.body = r.method + " " + r.path + " " + r.body;
  if (r.path == "/throw")
    throw std::runtime_error("handler failed");
  if (r.path == "/slow")
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return out;
}

ServerOptions local() {
  ServerOptions o;
  o.port = 0;
  return o;
}

TEST(HttpServer, RoutesToTheHandlerAndTurnsItsExceptionsInto500) {
  Server s(local(), echo);
  auto [status, body] = request(s.port(), "POST", "/x", "hello");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(body, "POST /x hello");
  std::tie(status, body) = request(s.port(), "GET", "/throw");
  EXPECT_EQ(status, 500);
  EXPECT_NE(body.find("handler failed"), std::string::npos);
  EXPECT_EQ(s.stats().handler_errors, 1u);
}

// Raw socket helpers: keep-alive and pipelining need one connection for several requests.
int connect_to(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

std::string read_until_closed(int fd) {
  std::string in;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    in.append(buf, static_cast<size_t>(n));
  return in;
}

TEST(HttpServer, PipelinedRequestsOnOneConnectionAreAnsweredInOrder) {
  Server s(local(), echo);
  const int fd = connect_to(s.port());
  const std::string reqs =
      "POST /one HTTP/1.1\r\nContent-Length: 1\r\n\r\nAPOST /two HTTP/1.1\r\nContent-Length: 1\r\n\r\nB"
      "GET /three HTTP/1.1\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, reqs.data(), reqs.size(), 0), static_cast<ssize_t>(reqs.size()));
  const std::string in = read_until_closed(fd);
  ::close(fd);
  const size_t a = in.find("POST /one A"), b = in.find("POST /two B"), c = in.find("GET /three ");
  ASSERT_NE(a, std::string::npos) << in;
  ASSERT_NE(b, std::string::npos) << in;
  ASSERT_NE(c, std::string::npos) << in;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_NE(in.find("Connection: close"), std::string::npos);
}

TEST(HttpServer, ExpectContinueIsAnsweredBeforeTheBody) {
  Server s(local(), echo);
  const int fd = connect_to(s.port());
  const std::string head = "POST /e HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n\r\n";
  ::send(fd, head.data(), head.size(), 0);
  char buf[64];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "HTTP/1.1 100 Continue\r\n\r\n");
  ::send(fd, "ok", 2, 0);
  const std::string in = read_until_closed(fd);
  ::close(fd);
  EXPECT_NE(in.find("POST /e ok"), std::string::npos) << in;
}

TEST(HttpServer, BadRequestsGetTheirStatusAndTheConnectionCloses) {
  Server s(local(), echo);
  const int fd = connect_to(s.port());
  const std::string bad = "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  ::send(fd, bad.data(), bad.size(), 0);
  const std::string in = read_until_closed(fd);
  ::close(fd);
  EXPECT_EQ(in.rfind("HTTP/1.1 501 ", 0), 0u) << in;
  EXPECT_EQ(s.stats().bad_requests, 1u);
}

TEST(HttpServer, BearerTokenGuardsEverythingButHealth) {
  ServerOptions o = local();
  o.bearer_token = "s3cret";
  Server s(o, echo);
  EXPECT_EQ(request(s.port(), "POST", "/generate", "{}").first, 401);
  EXPECT_EQ(request(s.port(), "POST", "/generate", "{}", {{"Authorization", "Bearer s3cre"}}).first, 401);
  EXPECT_EQ(request(s.port(), "POST", "/generate", "{}", {{"Authorization", "Bearer s3cret!"}}).first, 401);
  EXPECT_EQ(request(s.port(), "POST", "/generate", "{}", {{"Authorization", "Bearer s3cret"}}).first, 200);
  EXPECT_EQ(request(s.port(), "GET", "/health").first, 200);
  EXPECT_EQ(request(s.port(), "POST", "/health").first, 401);
  EXPECT_EQ(s.stats().unauthorized, 4u);
}

TEST(HttpServer, NonLoopbackNeedsAllowRemoteAndAToken) {
  ServerOptions o = local();
  o.host = "0.0.0.0";
  EXPECT_THROW(Server(o, echo), Error);
  o.allow_remote = true;
  EXPECT_THROW(Server(o, echo), Error);  // still no token
  o.bearer_token = "t";
  Server s(o, echo);
  EXPECT_EQ(request(s.port(), "GET", "/health").first, 200);
  o = local();
  o.host = "example.org";
  EXPECT_THROW(Server(o, echo), Error);
}

TEST(HttpServer, ConnectionsBeyondTheCapAreRefusedWith503) {
  ServerOptions o = local();
  o.max_connections = 2;
  Server s(o, echo);
  const int a = connect_to(s.port()), b = connect_to(s.port());
  // Both held open (no request yet); wait until the server has taken them.
  for (int i = 0; i < 100 && s.stats().open_connections < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(request(s.port(), "GET", "/x").first, 503);
  EXPECT_EQ(s.stats().refused_connections, 1u);
  ::close(a);
  ::close(b);
  for (int i = 0; i < 200 && s.stats().open_connections > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(request(s.port(), "GET", "/x").first, 200);
}

TEST(HttpServer, IdleConnectionsAreClosedAndAHalfRequestGets408) {
  ServerOptions o = local();
  o.idle_timeout = std::chrono::milliseconds(200);
  Server s(o, echo);
  const int fd = connect_to(s.port());
  const std::string half = "POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nab";
  ::send(fd, half.data(), half.size(), 0);
  const std::string in = read_until_closed(fd);
  ::close(fd);
  EXPECT_EQ(in.rfind("HTTP/1.1 408 ", 0), 0u) << in;
}

// A client trickling a request a byte at a time, each byte well within the idle timeout, is cut
// off when the whole request has not arrived within request_timeout (slowloris), and the slot it
// held serves others again.
TEST(HttpServer, ATricklingRequestIsCutOffAtTheRequestDeadline) {
  ServerOptions o = local();
  o.idle_timeout = std::chrono::milliseconds(5000);
  o.request_timeout = std::chrono::milliseconds(400);
  o.max_connections = 1;
  Server s(o, echo);
  const int fd = connect_to(s.port());
  const std::string req = "GET /x HTTP/1.1\r\nX-Slow: " + std::string(200, 'a') + "\r\n\r\n";
  const auto t0 = std::chrono::steady_clock::now();
  size_t sent = 0;
  for (; sent < req.size(); ++sent) {  // a byte every 20 ms: 4 s for the whole request
    pollfd answered{fd, POLLIN, 0};
    if (::poll(&answered, 1, 0) > 0)  // the server has answered: stop before a reset loses it
      break;
    if (::send(fd, req.data() + sent, 1, MSG_NOSIGNAL) != 1)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(3))
      break;
  }
  const std::string in = read_until_closed(fd);
  ::close(fd);
  EXPECT_EQ(in.rfind("HTTP/1.1 408 ", 0), 0u) << in;
  EXPECT_LT(sent, req.size()) << "the server should have closed before the request was whole";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
  for (int i = 0; i < 200 && s.stats().open_connections > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(request(s.port(), "GET", "/x").first, 200) << "the slot is free again";
}

// A streamed response goes out chunked, piece by piece, and the connection then serves the next
// request; when the client goes away mid-stream the writer says so and the stream stops.
TEST(HttpServer, StreamedResponsesAreChunkedAndNoticeAClientThatLeft) {
  std::atomic<int> pieces_after_close{-1};
  Server s(local(), [&](const Request& r) {
    Response out;
    out.content_type = "text/event-stream";
    if (r.path == "/three") {
      out.stream = [](const ChunkWriter& write) {
        for (const char* piece : {"data: a\n\n", "data: bb\n\n", "data: [DONE]\n\n"})
          write(piece);
      };
    } else {
      out.stream = [&](const ChunkWriter& write) {
        int n = 0;
        while (write("data: x\n\n") && n < 2000) {
          ++n;
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        pieces_after_close = n;
      };
    }
    return out;
  });
  const int fd = connect_to(s.port());
  const std::string two = "GET /three HTTP/1.1\r\n\r\nGET /three HTTP/1.1\r\nConnection: close\r\n\r\n";
  ::send(fd, two.data(), two.size(), 0);
  const std::string in = read_until_closed(fd);
  ::close(fd);
  const std::string body = "9\r\ndata: a\n\n\r\na\r\ndata: bb\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n";
  EXPECT_NE(in.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << in;
  EXPECT_EQ(in.find("Content-Length"), std::string::npos) << in;
  const size_t first = in.find(body);
  ASSERT_NE(first, std::string::npos) << in;
  EXPECT_NE(in.find(body, first + body.size()), std::string::npos) << "the second request was not answered: " << in;

  const int gone = connect_to(s.port());
  const std::string req = "GET /forever HTTP/1.1\r\n\r\n";
  ::send(gone, req.data(), req.size(), 0);
  char buf[256];
  ASSERT_GT(::recv(gone, buf, sizeof buf, 0), 0);
  ::close(gone);
  for (int i = 0; i < 500 && pieces_after_close < 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(pieces_after_close.load(), 0) << "the stream did not notice the client leaving";
  EXPECT_LT(pieces_after_close.load(), 2000);
}

// A body of many reads arrives whole (the reader takes body bytes as they come, and a request
// pipelined behind it is the next one).
TEST(HttpServer, ALargeBodyArrivesWholeAndThePipelinedRequestAfterIt) {
  Server s(local(), [](const Request& r) {
    Response out;
    size_t sum = 0;
    for (char c : r.body)
      sum += static_cast<unsigned char>(c);
    out.body = r.path + " " + std::to_string(r.body.size()) + " " + std::to_string(sum);
    return out;
  });
  std::string body(size_t{16} << 20, '\0');
  size_t sum = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    body[i] = static_cast<char>(i * 131 % 251);
    sum += static_cast<unsigned char>(body[i]);
  }
  const int fd = connect_to(s.port());
  const std::string reqs = "POST /big HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body +
                           "GET /after HTTP/1.1\r\nConnection: close\r\n\r\n";
  std::thread sender([&] {
    for (size_t off = 0; off < reqs.size();) {
      const ssize_t n = ::send(fd, reqs.data() + off, std::min<size_t>(reqs.size() - off, 1 << 20), MSG_NOSIGNAL);
      if (n <= 0)
        break;
      off += static_cast<size_t>(n);
    }
  });
  const std::string in = read_until_closed(fd);
  sender.join();
  ::close(fd);
  EXPECT_NE(in.find("/big " + std::to_string(body.size()) + " " + std::to_string(sum)), std::string::npos)
      << in.substr(0, 300);
  EXPECT_NE(in.find("/after 0 0"), std::string::npos) << in.substr(0, 300);
}

TEST(HttpServer, StopWaitsForARunningHandler) {
  auto s = std::make_unique<Server>(local(), echo);
  std::atomic<int> status{0};
  std::thread t([&] { status = request(s->port(), "GET", "/slow").first; });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  s->stop();
  t.join();
  EXPECT_EQ(status.load(), 200);  // answered, then closed
  EXPECT_THROW(request(s->port(), "GET", "/x"), Error);
}

}  // namespace
}  // namespace updraft::http
