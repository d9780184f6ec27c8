// The HTTP/1.1 server of the request API (design.md §11): enough of the protocol for JSON
// request/response APIs driven by RL frameworks and their streams, safe on untrusted input.
// Parsing is Boost.Beast's (maintained, fuzzed upstream); this file's part is the connection
// handling Beast leaves to its user: the connection cap, the idle and whole-request deadlines,
// the bearer token and the loopback rule.
//
// Protocol subset. Requests are read by Boost.Beast's HTTP/1.1 parser (RequestReader): a
// request line (method, origin-form target, HTTP/1.0 or 1.1), header fields, and a body framed
// by Content-Length (none: empty body). Transfer-Encoding is refused (501), as are obsolete line
// folding, header names that are not tokens, conflicting Content-Lengths and bare CR/LF quirks
// (400; identical repeated Content-Lengths are one, as RFC 9110 allows). Limits: header section
// bytes (431) and body bytes (413), checked before anything is buffered beyond them. "Expect:
// 100-continue" is answered before the body is read. Connections persist (HTTP/1.1 default,
// "Connection: close" and HTTP/1.0 without keep-alive end them after the response); requests on
// one connection are served in order. Responses carry Content-Length, or are chunked streams.
//
// parse_request() reads one request from given bytes with a fresh reader, so the parsing can be
// fuzzed and tested without sockets.
//
// Server. Binds host:port (port 0: any free port, see port()); loopback only unless
// allow_remote, and then only with a bearer token (a request API that starts generations must
// not be open to the network). With a token, every request but a GET of public_paths must carry
// "Authorization: Bearer <token>" (compared in constant time), else 401. One thread accepts,
// one thread serves each connection, at most max_connections at once (the next is answered
// 503 and closed); a connection idle for idle_timeout is closed, and one whose request has not
// arrived whole within request_timeout of its first byte gets 408 and is closed. The handler runs on the
// connection's thread and may block (a generation); an exception from it becomes a 500 with
// its message. stop() (and the destructor) closes the listening socket, shuts every
// connection down and joins the threads: a handler still running finishes first, so the
// caller must unblock its handlers before (RolloutService::shutdown does).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace updraft::http {

struct Request {
  std::string method;  // as sent (methods are case-sensitive)
  std::string target;  // the request target, e.g. /generate?x=1
  std::string path;    // target up to '?'
  std::string query;   // after '?', undecoded
  std::map<std::string, std::string> headers;  // names lower-cased; repeated fields joined by ", "
  std::string body;
  bool keep_alive = true;
  bool expect_continue = false;
  std::string header(const std::string& lower_name) const;  // "" when absent
};

// Sends one piece of a streamed body; false once the client is gone (nothing more is sent).
using ChunkWriter = std::function<bool(std::string_view)>;

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra fields
  // A streamed body (server-sent events): when set, `body` is ignored, the head goes out with
  // "Transfer-Encoding: chunked", and the server calls stream() on the connection's thread,
  // sending each piece it writes as a chunk, then the last chunk once it returns.
  std::function<void(const ChunkWriter&)> stream;
};

const char* status_text(int status);
// The error "type" of an error body for a status, as OpenAI names them (invalid_request_error,
// authentication_error, not_found_error, server_error).
const char* error_type(int status);
// The response's bytes; keep_alive decides the Connection field.
std::string serialize(const Response& r, bool keep_alive);

struct Limits {
  size_t max_header_bytes = 16 << 10;  // request line + header fields + blank line
  size_t max_body_bytes = size_t{64} << 20;
};

struct ParseResult {
  enum Kind { kIncomplete, kComplete, kBad } kind = kIncomplete;
  size_t consumed = 0;    // kComplete: bytes of this request (the rest is the next one)
  bool headers_done = false;  // kIncomplete: the header section is complete (body pending)
  int status = 0;         // kBad: the status to answer with
  std::string reason;     // kBad: why
};

// Reads one request as its bytes arrive, on Boost.Beast's HTTP/1.1 parser (a maintained
// parser; the limits are checked before anything beyond them is buffered). feed() takes what it
// can from the front of *buf (body bytes are consumed as they come, so a large body is read in
// linear time; the rest of *buf is the next request's). kComplete: *out is the request;
// kIncomplete with headers_done: *out holds the header fields (expect_continue tells whether
// the client waits for "100 Continue"); kBad: answer `status` and close. One reader per request.
class RequestReader {
 public:
  explicit RequestReader(const Limits& limits);
  ~RequestReader();
  RequestReader(const RequestReader&) = delete;
  RequestReader& operator=(const RequestReader&) = delete;
  ParseResult feed(std::string* buf, Request* out);
  bool started() const { return started_; }  // a byte of this request has arrived

 private:
  ParseResult header_checks(Request* out);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  size_t max_header_ = 0;
  bool started_ = false;
};

// The request at the start of `data` with a fresh reader (consumed: its bytes).
ParseResult parse_request(std::string_view data, const Limits& limits, Request* out);

using Handler = std::function<Response(const Request&)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 30000;  // 0: any free port
  bool allow_remote = false;  // bind a non-loopback address (requires bearer_token)
  std::string bearer_token;   // empty: no authorization
  std::vector<std::string> public_paths = {"/health"};  // GET without the token (no data behind them)
  int max_connections = 64;
  std::chrono::milliseconds idle_timeout{60000};
  // A request must arrive whole (header and body) within this of its first byte, else 408 and
  // the connection closes: a client trickling bytes cannot hold a connection slot for longer.
  std::chrono::milliseconds request_timeout{20000};
  Limits limits;
};

struct ServerStats {
  uint64_t connections = 0, requests = 0, bad_requests = 0, unauthorized = 0, refused_connections = 0,
           handler_errors = 0;
  int64_t open_connections = 0;
};

class Server {
 public:
  // Binds and starts accepting; throws updraft::Error when it cannot (address in use, a
  // non-loopback host without allow_remote and a token, ...).
  Server(ServerOptions options, Handler handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const { return port_; }
  ServerStats stats() const;
  void stop();

 private:
  struct Conn {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  void accept_loop();
  void serve(Conn* c);
  bool authorized(const Request& r) const;
  void reap(bool all);
  void drain_refused(bool all);  // acceptor thread

  ServerOptions options_;
  Handler handler_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::list<std::unique_ptr<Conn>> conns_;
  std::list<std::pair<int, std::chrono::steady_clock::time_point>> refused_;  // answered 503, closing
  ServerStats stats_;
  std::thread acceptor_;
};

// A JSON-free helper for tests and tools: one request over a fresh connection to
// 127.0.0.1:port; returns (status, body). Throws updraft::Error on a transport failure.
std::pair<int, std::string> request(uint16_t port, const std::string& method, const std::string& target,
                                    const std::string& body = "",
                                    const std::vector<std::pair<std::string, std::string>>& headers = {},
                                    std::chrono::milliseconds timeout = std::chrono::milliseconds(60000));

}  // namespace updraft::http
