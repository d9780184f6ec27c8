// The HTTP/1.1 request parser and response serialization of rollout/serve/http.h.
#include "rollout/serve/http.h"

#include <algorithm>
#include <cstring>

#include "kernels/core/error.h"

namespace updraft::http {
namespace {

bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
    return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

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

ParseResult parse_request(std::string_view data, const Limits& limits, Request* out) {
  // Empty lines before the request line are ignored (RFC 9112 §2.2).
  size_t lead = 0;
  while (data.size() - lead >= 2 && data[lead] == '\r' && data[lead + 1] == '\n')
    lead += 2;
  if (lead > 8)
    return bad(400, "empty lines before the request line");
  const std::string_view d = data.substr(lead);
  const size_t window = std::min(d.size(), limits.max_header_bytes);
  const size_t end = d.substr(0, window).find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (d.size() >= limits.max_header_bytes)
      return bad(431, "header section longer than " + std::to_string(limits.max_header_bytes) + " bytes");
    return {};
  }
  const std::string_view head = d.substr(0, end + 2);  // lines, each ending in CRLF
  Request req;
  size_t pos = 0;
  bool first = true;
  bool have_length = false;
  size_t content_length = 0;
  while (pos < head.size()) {
    const size_t eol = head.find("\r\n", pos);
    const std::string_view line = head.substr(pos, eol - pos);
    pos = eol + 2;
    for (char c : line)
      if (c == '\r' || c == '\n' || c == '\0')
        return bad(400, "bare CR, LF or NUL in the header section");
    if (first) {
      first = false;
      const size_t sp1 = line.find(' ');
      const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
      if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
        return bad(400, "malformed request line");
      const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                             version = line.substr(sp2 + 1);
      if (method.empty())
        return bad(400, "empty method");
      for (char c : method)
        if (!is_tchar(c))
          return bad(400, "method is not a token");
      if (target.empty() || target[0] != '/')
        return bad(400, "request target must be an absolute path");
      for (char c : target)
        if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f)
          return bad(400, "request target has a control or non-ASCII byte");
      if (version != "HTTP/1.1" && version != "HTTP/1.0")
        return bad(505, "only HTTP/1.0 and HTTP/1.1 are served");
      req.method = std::string(method);
      req.target = std::string(target);
      const size_t q = target.find('?');
      req.path = std::string(target.substr(0, q));
      req.query = q == std::string_view::npos ? "" : std::string(target.substr(q + 1));
      req.keep_alive = version == "HTTP/1.1";
      continue;
    }
    if (line.empty())
      break;
    if (line[0] == ' ' || line[0] == '\t')
      return bad(400, "obsolete header line folding");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return bad(400, "header line without a field name");
    for (size_t i = 0; i < colon; ++i)
      if (!is_tchar(line[i]))
        return bad(400, "header field name is not a token");
    const std::string name = lower(std::string(line.substr(0, colon)));
    const std::string value(trim_ows(line.substr(colon + 1)));
    if (name == "content-length") {
      if (have_length)
        return bad(400, "more than one Content-Length");
      if (value.empty() || value.size() > 19)
        return bad(400, "bad Content-Length");
      size_t v = 0;
      for (char c : value) {
        if (c < '0' || c > '9')
          return bad(400, "bad Content-Length");
        v = v * 10 + static_cast<size_t>(c - '0');
      }
      have_length = true;
      content_length = v;
    }
    if (name == "transfer-encoding")
      return bad(501, "Transfer-Encoding is not supported; send a Content-Length");
    auto [it, inserted] = req.headers.emplace(name, value);
    if (!inserted)
      it->second += ", " + value;
  }
  if (content_length > limits.max_body_bytes)
    return bad(413, "body of " + std::to_string(content_length) + " bytes is over the limit of " +
                        std::to_string(limits.max_body_bytes));
  const std::string connection = req.header("connection");
  if (has_token(connection, "close"))
    req.keep_alive = false;
  else if (has_token(connection, "keep-alive"))
    req.keep_alive = true;
  req.expect_continue = has_token(req.header("expect"), "100-continue");
  const size_t body_at = lead + end + 4;
  if (data.size() - body_at < content_length) {
    ParseResult r;
    r.headers_done = true;
    *out = std::move(req);
    return r;
  }
  req.body = std::string(data.substr(body_at, content_length));
  *out = std::move(req);
  ParseResult r;
  r.kind = ParseResult::kComplete;
  r.consumed = body_at + content_length;
  return r;
}


}  // namespace updraft::http
