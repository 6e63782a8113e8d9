// llhttp wrapper: see parser.h for the phases. llhttp is compiled
// without LLHTTP_STRICT_MODE by the Debian sources, so the strictness
// Concert wants that llhttp leaves out (bare LF, obs-fold, exact
// "chunked", Host rules, version set) is checked here.
#include "http/parser.h"

#include <cstring>

#include "http/path.h"

namespace concert::http {

namespace {

inline MessageParser* self(llhttp_t* p) {
  return static_cast<MessageParser*>(p->data);
}

inline bool isTchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != 0;
}

inline int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The last coding of a Transfer-Encoding list (possibly spread over headers).
std::string_view lastCoding(const Headers& headers) {
  std::string_view last;
  for (const Header& h : headers) {
    if (!equalsIgnoreCase(h.name, "Transfer-Encoding")) continue;
    std::string_view v = h.value;
    size_t comma = v.rfind(',');
    last = trim(comma == std::string_view::npos ? v : v.substr(comma + 1));
  }
  return last;
}

bool validHost(std::string_view host) {
  if (host.empty()) return false;
  for (unsigned char c : host) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) continue;
    if (std::strchr("-._~%!$&'()*+,;=:[]", c) == nullptr || c == 0) return false;
  }
  return true;
}

}  // namespace

bool headerHasToken(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    size_t comma = value.find(',');
    std::string_view item = trim(value.substr(0, comma));
    if (equalsIgnoreCase(item, token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

bool percentDecodePath(std::string_view raw, std::string& out) {
  out.clear();
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    char c = raw[i];
    if (c != '%') {
      out += c;
      continue;
    }
    if (i + 2 >= raw.size()) return false;
    int hi = hexValue(raw[i + 1]), lo = hexValue(raw[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

const llhttp_settings_t* MessageParser::settings() {
  static const llhttp_settings_t s = [] {
    llhttp_settings_t v;
    llhttp_settings_init(&v);
    v.on_url = &MessageParser::onUrl;
    v.on_header_field = &MessageParser::onHeaderField;
    v.on_header_value = &MessageParser::onHeaderValue;
    v.on_headers_complete = &MessageParser::onHeadersComplete;
    v.on_body = &MessageParser::onBody;
    v.on_message_complete = &MessageParser::onMessageComplete;
    return v;
  }();
  return &s;
}

MessageParser::MessageParser(Kind kind) : kind_(kind) {
  llhttp_init(&parser_, kind == Kind::Request ? HTTP_REQUEST : HTTP_RESPONSE, settings());
  parser_.data = this;
  headers_ = kind == Kind::Request ? &request_.headers : &response_.headers;
  reset();
}

void MessageParser::reset() {
  llhttp_reset(&parser_);
  parser_.data = this;
  if (kind_ == Kind::Request) {
    // Keep the strings' capacity: a kept-alive connection parses many heads.
    std::string peer = std::move(request_.peer_ip);
    bool tls = request_.tls;
    bool admin_listener = request_.admin_listener;
    request_.method.clear();
    request_.target.clear();
    request_.path.clear();
    request_.raw_path.clear();
    request_.query.clear();
    recycleHeaders(request_.headers);
    request_.http_major = 1;
    request_.http_minor = 1;
    request_.content_length = -1;
    request_.chunked = false;
    request_.keep_alive = true;
    request_.expect_continue = false;
    request_.upgrade = false;
    request_.client_ip.clear();
    request_.peer_trusted = false;
    request_.client_https = false;
    request_.client_keyed = false;
    request_.abuse_exempt = false;
    request_.peer_ip = std::move(peer);
    request_.tls = tls;
    request_.admin_listener = admin_listener;
  } else {
    recycleHeaders(response_.headers);
    Headers headers = std::move(response_.headers);
    response_ = ResponseHead{};
    response_.headers = std::move(headers);
  }
  in_body_ = false;
  last_was_value_ = false;
  head_done_ = false;
  message_done_ = false;
  prev_char_ = 0;
  first_line_ = true;
  head_bytes_ = 0;
  header_bytes_ = 0;
  error_status_ = 0;
  error_reason_ = "";
}

// Header strings keep their heap buffers across messages: the next head's
// headers reuse them instead of allocating two strings per header line.
void MessageParser::recycleHeaders(Headers& headers) {
  for (Header& h : headers) {
    h.name.clear();
    h.value.clear();
    if (spare_.size() < kMaxSpareHeaders) spare_.push_back(std::move(h));
  }
  headers.clear();
}

void MessageParser::newHeader() {
  if (spare_.empty()) {
    headers_->emplace_back();
    return;
  }
  headers_->push_back(std::move(spare_.back()));
  spare_.pop_back();
}

ParseStatus MessageParser::fail(int status, const char* reason) {
  error_status_ = status;
  error_reason_ = reason;
  return ParseStatus::Error;
}

int MessageParser::onUrl(llhttp_t* p, const char* at, size_t len) {
  MessageParser* m = self(p);
  if (m->request_.target.size() + len > kMaxUriBytes) {
    m->error_status_ = 414;
    m->error_reason_ = "URI too long";
    return HPE_USER;
  }
  m->request_.target.append(at, len);
  return 0;
}

int MessageParser::onHeaderField(llhttp_t* p, const char* at, size_t len) {
  MessageParser* m = self(p);
  if (m->in_body_) return 0;  // trailers: dropped
  m->header_bytes_ += len;
  size_t limit = m->kind_ == Kind::Request ? kMaxRequestHeaderBytes : kMaxResponseHeaderBytes;
  if (m->header_bytes_ > limit) {
    m->error_status_ = 431;
    m->error_reason_ = "header section too large";
    return HPE_USER;
  }
  if (m->headers_->empty() || m->last_was_value_) {
    m->newHeader();
    m->header_bytes_ += 4;  // ": " and CRLF
  }
  m->headers_->back().name.append(at, len);
  m->last_was_value_ = false;
  return 0;
}

int MessageParser::onHeaderValue(llhttp_t* p, const char* at, size_t len) {
  MessageParser* m = self(p);
  if (m->in_body_) return 0;
  m->header_bytes_ += len;
  size_t limit = m->kind_ == Kind::Request ? kMaxRequestHeaderBytes : kMaxResponseHeaderBytes;
  if (m->header_bytes_ > limit) {
    m->error_status_ = 431;
    m->error_reason_ = "header section too large";
    return HPE_USER;
  }
  if (m->headers_->empty()) return HPE_USER;
  m->headers_->back().value.append(at, len);
  m->last_was_value_ = true;
  return 0;
}

int MessageParser::onHeadersComplete(llhttp_t* p) {
  MessageParser* m = self(p);
  if (m->in_body_) return 0;  // end of trailers
  m->head_done_ = true;
  return HPE_PAUSED;
}

int MessageParser::onBody(llhttp_t* p, const char* at, size_t len) {
  MessageParser* m = self(p);
  if (m->sink_) m->sink_(m->sink_arg_, at, len);
  return 0;
}

int MessageParser::onMessageComplete(llhttp_t* p) {
  MessageParser* m = self(p);
  m->message_done_ = true;
  return HPE_PAUSED;
}

bool MessageParser::checkLineEnds(const char* data, size_t len) {
  // llhttp's non-strict build accepts bare LF, obs-fold and runs of spaces in
  // the request line; Concert refuses all three.
  char prev = prev_char_;
  for (size_t i = 0; i < len; ++i) {
    char c = data[i];
    if (c == '\n' && prev != '\r') return false;
    if ((c == ' ' || c == '\t') && prev == '\n') return false;  // obs-fold or whitespace before a name
    if (first_line_) {
      if (c == '\t' || (c == ' ' && prev == ' ')) return false;
      if (c == '\n') first_line_ = false;
    }
    prev = c;
  }
  if (len) prev_char_ = data[len - 1];
  return true;
}

ParseStatus MessageParser::feedHead(const char* data, size_t len, size_t* consumed) {
  *consumed = 0;
  if (error_status_) return ParseStatus::Error;
  llhttp_errno_t err = llhttp_execute(&parser_, data, len);
  size_t used = len;
  if (err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE) used = static_cast<size_t>(llhttp_get_error_pos(&parser_) - data);
  head_bytes_ += used;
  *consumed = used;
  if (kind_ == Kind::Request && !checkLineEnds(data, used)) return fail(400, "bare LF in head");
  if (err == HPE_OK) return ParseStatus::NeedMore;
  if ((err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE) && head_done_) {
    llhttp_resume(&parser_);
    return kind_ == Kind::Request ? finishRequestHead() : finishResponseHead();
  }
  if (error_status_) return ParseStatus::Error;  // 414 / 431 set by a callback
  if (kind_ == Kind::Request && err == HPE_INVALID_VERSION && !std::strstr(llhttp_get_error_reason(&parser_), "CRLF"))
    return fail(505, "unsupported HTTP version");
  return fail(400, llhttp_errno_name(err));
}

ParseStatus MessageParser::feedChunked(const char* data, size_t len, size_t* consumed, BodySink sink, void* arg) {
  in_body_ = true;
  sink_ = sink;
  sink_arg_ = arg;
  llhttp_errno_t err = llhttp_execute(&parser_, data, len);
  sink_ = nullptr;
  sink_arg_ = nullptr;
  if (err == HPE_OK) {
    *consumed = len;
    return ParseStatus::NeedMore;
  }
  if (err == HPE_PAUSED && message_done_) {
    *consumed = static_cast<size_t>(llhttp_get_error_pos(&parser_) - data);
    llhttp_resume(&parser_);
    return ParseStatus::BodyDone;
  }
  *consumed = 0;
  return fail(400, llhttp_errno_name(err));
}

ParseStatus MessageParser::finishRequestHead() {
  Request& r = request_;
  r.http_major = parser_.http_major;
  r.http_minor = parser_.http_minor;
  if (r.http_major != 1 || r.http_minor > 1) return fail(505, "unsupported HTTP version");
  r.method = llhttp_method_name(static_cast<llhttp_method_t>(parser_.method));
  if (parser_.method == HTTP_CONNECT) return fail(405, "CONNECT is not served");

  for (const Header& h : r.headers) {
    if (h.name.empty()) return fail(400, "empty header name");
    for (unsigned char c : h.name)
      if (!isTchar(c)) return fail(400, "bad header name");
    for (unsigned char c : h.value)
      if (c == '\r' || c == '\n' || c == 0) return fail(400, "obsolete line folding");
  }

  // Host: exactly one on HTTP/1.1, at most one on 1.0, and well-formed.
  int hosts = 0;
  for (const Header& h : r.headers)
    if (equalsIgnoreCase(h.name, "Host")) {
      ++hosts;
      if (!validHost(trim(h.value))) return fail(400, "bad Host");
    }
  if (hosts > 1) return fail(400, "repeated Host");
  if (hosts == 0 && r.http_minor == 1) return fail(400, "missing Host");

  // Framing: llhttp already refused duplicate or malformed Content-Length.
  bool has_te = hasHeader(r.headers, "Transfer-Encoding");
  bool has_cl = hasHeader(r.headers, "Content-Length");
  if (has_te && has_cl) return fail(400, "both Content-Length and Transfer-Encoding");
  if (has_te) {
    if (r.http_minor == 0) return fail(400, "Transfer-Encoding on HTTP/1.0");
    std::string te = joinHeader(r.headers, "Transfer-Encoding");
    if (!equalsIgnoreCase(trim(te), "chunked")) return fail(400, "unsupported Transfer-Encoding");
    r.chunked = true;
  } else if (has_cl) {
    if (!(parser_.flags & F_CONTENT_LENGTH)) return fail(400, "bad Content-Length");
    r.content_length = static_cast<int64_t>(parser_.content_length);
  }

  // Target: origin-form, or absolute-form reduced to its path and query.
  std::string_view target = r.target;
  if (target.empty()) return fail(400, "empty target");
  if (target.front() != '/') {
    size_t scheme_end = target.find("://");
    std::string_view scheme = scheme_end == std::string_view::npos ? std::string_view{} : target.substr(0, scheme_end);
    if (!equalsIgnoreCase(scheme, "http") && !equalsIgnoreCase(scheme, "https")) return fail(400, "bad request target");
    std::string_view rest = target.substr(scheme_end + 3);
    size_t slash = rest.find_first_of("/?");
    if (slash == std::string_view::npos || slash == 0) return fail(400, "bad request target");
    target = rest.substr(slash);
    if (target.front() == '?') return fail(400, "bad request target");
  }
  for (unsigned char c : target)
    if (c <= 0x20 || c == 0x7f || c == '#') return fail(400, "bad request target");
  size_t q = target.find('?');
  r.raw_path.assign(target.substr(0, q));
  if (q != std::string_view::npos) r.query.assign(target.substr(q + 1));
  // Every escape as sent must be well-formed, even one a ".." removes.
  if (!percentDecodePath(r.raw_path, r.path)) return fail(400, "bad percent-encoding");
  // One path from here on: the router, the guards and the forwarded head all
  // see the path without its dot-segments (see http/path.h).
  switch (normalisePath(r.raw_path, path_scratch_)) {
    case PathNormalisation::Unchanged: break;
    case PathNormalisation::Normalised:
      r.raw_path.swap(path_scratch_);
      percentDecodePath(r.raw_path, r.path);  // cannot fail: the escapes were checked above
      break;
    case PathNormalisation::AboveRoot: return fail(400, "path climbs above the root");
    case PathNormalisation::NotAbsolute: return fail(400, "bad request target");
  }
  // "%2F" stays opaque in the forwarded path but is a '/' in the decoded one
  // the router matches, and origins also split at '\\' (raw or "%5C") and
  // drop ";parameters": a "." or ".." that only becomes a segment read that
  // way ("/static%2F..%2Fcheckout", "/static\\..\\checkout",
  // "/static/..;/checkout") would route one path and reach the origin as
  // another, so it is refused.
  if (hasHiddenDotSegment(r.path)) return fail(400, "dot-segment behind an encoded slash, backslash or ;parameters");

  std::string_view connection;
  std::string conn_joined = joinHeader(r.headers, "Connection");
  connection = conn_joined;
  if (r.http_minor == 1)
    r.keep_alive = !headerHasToken(connection, "close");
  else
    r.keep_alive = headerHasToken(connection, "keep-alive");
  r.expect_continue = r.http_minor == 1 && equalsIgnoreCase(trim(r.header("Expect")), "100-continue");
  r.upgrade = headerHasToken(connection, "upgrade") && hasHeader(r.headers, "Upgrade");
  return ParseStatus::HeadDone;
}

ParseStatus MessageParser::finishResponseHead() {
  ResponseHead& r = response_;
  r.status = parser_.status_code;
  r.http_major = parser_.http_major;
  r.http_minor = parser_.http_minor;
  if (r.http_major != 1) return fail(502, "unsupported origin HTTP version");
  // llhttp accepts any three digits (and none); a status below 100 would be
  // taken for an interim response and its body parsed as the next head.
  if (r.status < 100 || r.status > 999) return fail(502, "bad status from origin");
  for (const Header& h : r.headers)
    for (unsigned char c : h.value)
      if (c == '\r' || c == '\n' || c == 0) return fail(502, "obsolete line folding from origin");
  r.transfer_encoding = hasHeader(r.headers, "Transfer-Encoding");
  if (r.transfer_encoding) {
    r.chunked = equalsIgnoreCase(lastCoding(r.headers), "chunked");
  } else if (parser_.flags & F_CONTENT_LENGTH) {
    r.content_length = static_cast<int64_t>(parser_.content_length);
  }
  std::string connection = joinHeader(r.headers, "Connection");
  if (r.http_minor >= 1)
    r.keep_alive = !headerHasToken(connection, "close");
  else
    r.keep_alive = headerHasToken(connection, "keep-alive");
  return ParseStatus::HeadDone;
}

}  // namespace concert::http
