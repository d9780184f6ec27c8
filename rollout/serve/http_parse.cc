// The request reader (on Boost.Beast's HTTP parser) and response serialization of
// rollout/serve/http.h.
#include "rollout/serve/http.h"

#include <boost/beast/http.hpp>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>

#include "kernels/core/error.h"

namespace updraft::http {

namespace beast_http = boost::beast::http;

namespace {

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  return s;
}

std::string_view trim_ows(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t'))
    v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t'))
    v.remove_suffix(1);
  return v;
}

ParseResult bad(int status, std::string reason) {
  ParseResult r;
  r.kind = ParseResult::kBad;
  r.status = status;
  r.reason = std::move(reason);
  return r;
}

bool has_token(const std::string& list, const char* token) {  // comma-separated, case-insensitive
  const std::string l = lower(list);
  size_t start = 0;
  while (start <= l.size()) {
    size_t end = l.find(',', start);
    if (end == std::string::npos)
      end = l.size();
    if (trim_ows(std::string_view(l).substr(start, end - start)) == token)
      return true;
    start = end + 1;
  }
  return false;
}

}  // namespace

std::string Request::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

const char* status_text(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 422: return "Unprocessable Content";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

const char* error_type(int status) {
  if (status == 401)
    return "authentication_error";
  if (status == 404)
    return "not_found_error";
  return status >= 500 ? "server_error" : "invalid_request_error";
}

std::string serialize(const Response& r, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + status_text(r.status) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  out += r.stream ? std::string("Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n")
                  : "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  for (const auto& [k, v] : r.headers)
    out += k + ": " + v + "\r\n";
  if (r.status == 401)
    out += "WWW-Authenticate: Bearer\r\n";
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  if (!r.stream)
    out += r.body;
  return out;
}

// Boost.Beast's parser reads the request; what it accepts that we do not serve is refused
// here: a target that is not an absolute path or has non-ASCII bytes, obsolete line folding
// (Beast would fold it), and Transfer-Encoding (501; requests carry a Content-Length).
struct RequestReader::Impl {
  beast_http::request_parser<beast_http::string_body> parser;
  bool checked = false;
};

RequestReader::RequestReader(const Limits& limits) : impl_(std::make_unique<Impl>()) {
  impl_->parser.header_limit(static_cast<std::uint32_t>(std::min<size_t>(limits.max_header_bytes, UINT32_MAX)));
  impl_->parser.body_limit(limits.max_body_bytes);
  impl_->parser.eager(true);
  max_header_ = limits.max_header_bytes;
}

RequestReader::~RequestReader() = default;

ParseResult RequestReader::header_checks(Request* out) {
  const auto& m = impl_->parser.get();
  const std::string target(m.target());
  if (target.empty() || target[0] != '/')
    return bad(400, "request target must be an absolute path");
  for (char c : target)
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f)
      return bad(400, "request target has a control or non-ASCII byte");
  if (m.version() != 10 && m.version() != 11)
    return bad(505, "only HTTP/1.0 and HTTP/1.1 are served");
  if (impl_->parser.chunked() || m.find(beast_http::field::transfer_encoding) != m.end())
    return bad(501, "Transfer-Encoding is not supported; send a Content-Length");
  Request req;
  req.method = std::string(m.method_string());
  req.target = target;
  const size_t q = target.find('?');
  req.path = target.substr(0, q);
  req.query = q == std::string::npos ? "" : target.substr(q + 1);
  for (const auto& f : m) {
    auto [it, inserted] = req.headers.emplace(lower(std::string(f.name_string())), std::string(f.value()));
    if (!inserted)
      it->second += ", " + std::string(f.value());
  }
  req.keep_alive = m.keep_alive();
  req.expect_continue = has_token(req.header("expect"), "100-continue");
  *out = std::move(req);
  ParseResult r;
  r.headers_done = true;
  return r;
}

ParseResult RequestReader::feed(std::string* buf, Request* out) {
  if (!started_) {  // empty lines before the request line are ignored (RFC 9112 §2.2)
    size_t lead = 0;
    while (buf->size() - lead >= 2 && (*buf)[lead] == '\r' && (*buf)[lead + 1] == '\n')
      lead += 2;
    if (lead > 8)
      return bad(400, "empty lines before the request line");
    buf->erase(0, lead);
    started_ = !buf->empty();
  }
  if (!impl_->checked) {  // obsolete line folding, which Beast would accept, within the header
    const size_t end = buf->find("\r\n\r\n");
    const size_t scan = std::min(end == std::string::npos ? buf->size() : end + 2, max_header_);
    for (size_t i = 0; i + 2 < scan; ++i)
      if ((*buf)[i] == '\r' && (*buf)[i + 1] == '\n' && ((*buf)[i + 2] == ' ' || (*buf)[i + 2] == '\t'))
        return bad(400, "obsolete header line folding");
  }
  auto& p = impl_->parser;
  boost::system::error_code ec;
  while (!buf->empty() && !p.is_done()) {
    const size_t n = p.put(boost::asio::buffer(buf->data(), buf->size()), ec);
    buf->erase(0, n);
    if (ec == beast_http::error::need_more) {
      ec = {};
      break;
    }
    if (ec)
      return bad(ec == beast_http::error::header_limit ? 431
                 : ec == beast_http::error::body_limit ? 413
                 : ec == beast_http::error::bad_version ? 505
                                                         : 400,
                 "malformed request: " + ec.message());
    if (n == 0)
      break;
  }
  ParseResult r;
  if (p.is_header_done() && !impl_->checked) {
    impl_->checked = true;
    r = header_checks(out);
    if (r.kind == ParseResult::kBad)
      return r;
  }
  r.headers_done = p.is_header_done();
  if (!p.is_done())
    return r;
  out->body = p.get().body();
  r.kind = ParseResult::kComplete;
  return r;
}

ParseResult parse_request(std::string_view data, const Limits& limits, Request* out) {
  RequestReader reader(limits);
  std::string buf(data);
  ParseResult r = reader.feed(&buf, out);
  if (r.kind == ParseResult::kComplete)
    r.consumed = data.size() - buf.size();
  return r;
}

}  // namespace updraft::http
