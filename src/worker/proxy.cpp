// The origin side of a client connection: head rewriting,
// the exchange with a pooled origin connection, response streaming with
// backpressure both ways, Upgrade tunnels, and the 502/504 answers.
//
// Framing is always Concert's decision: the request goes to the origin with
// Content-Length when the client sent one and chunked otherwise; the response
// goes to the client with the origin's Content-Length, or chunked (HTTP/1.1
// client) or close-delimited (HTTP/1.0 client) when the origin's length is
// unknown. A failure before the response head reached the client is answered
// 502 (or 504 for the response-head timeout); after that the client
// connection is closed, so a truncated body is never mistaken for a whole one.
#include "worker/proxy.h"

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "admission/admission.h"
#include "admission/cookies.h"
#include "worker/connection.h"
#include "http/response.h"
#include "worker/upstream_pool.h"
#include "worker/worker.h"

namespace concert::worker {

// ------------------------------------------------------------ pure rewriting

bool isHopByHop(std::string_view name) {
  return http::equalsIgnoreCase(name, "Connection") || http::equalsIgnoreCase(name, "Keep-Alive") ||
         http::equalsIgnoreCase(name, "Proxy-Connection") || http::equalsIgnoreCase(name, "Proxy-Authenticate") ||
         http::equalsIgnoreCase(name, "Proxy-Authorization") || http::equalsIgnoreCase(name, "TE") ||
         http::equalsIgnoreCase(name, "Trailer") || http::equalsIgnoreCase(name, "Transfer-Encoding") ||
         http::equalsIgnoreCase(name, "Upgrade");
}

namespace {

// Is `name` one of the tokens listed in the message's Connection headers?
bool namedByConnection(const http::Headers& headers, std::string_view name) {
  for (const http::Header& h : headers)
    if (http::equalsIgnoreCase(h.name, "Connection") && http::headerHasToken(h.value, name)) return true;
  return false;
}

bool startsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && http::equalsIgnoreCase(s.substr(0, prefix.size()), prefix);
}

void appendHeader(std::string& out, std::string_view name, std::string_view value) {
  out += name;
  out += ": ";
  out += value;
  out += "\r\n";
}

}  // namespace

std::string upstreamTarget(const config::Upstream& upstream, const http::Request& request) {
  std::string out;
  const std::string& a = upstream.path;
  const std::string& b = request.raw_path;
  out.reserve(a.size() + b.size() + upstream.query.size() + request.query.size() + 2);
  if (a.empty()) {
    out = b;
  } else {
    const bool a_slash = a.back() == '/';
    const bool b_slash = !b.empty() && b.front() == '/';
    out = a;
    if (a_slash && b_slash)
      out.append(b, 1);
    else if (!a_slash && !b_slash)
      out.append(1, '/').append(b);
    else
      out += b;
  }
  if (out.empty()) out.push_back('/');
  if (!upstream.query.empty() || !request.query.empty()) {
    out += '?';
    out += upstream.query;
    if (!upstream.query.empty() && !request.query.empty()) out += '&';
    out += request.query;
  }
  return out;
}

void buildUpstreamRequestHead(const http::Request& request, const config::Config& config, std::string& out) {
  out += request.method;
  out += ' ';
  out += upstreamTarget(config.upstream, request);
  out += " HTTP/1.1\r\n";
  const bool has_host = http::hasHeader(request.headers, "Host");
  const std::string_view inbound_host = request.header("Host");
  appendHeader(out, "Host",
               (config.preserve_host && has_host) ? inbound_host : std::string_view(config.upstream.host_port));
  bool cookie_done = false;
  for (const http::Header& h : request.headers) {
    const std::string_view name = h.name;
    if (http::equalsIgnoreCase(name, "Host") || http::equalsIgnoreCase(name, "Content-Length") ||
        http::equalsIgnoreCase(name, "Expect") || http::equalsIgnoreCase(name, "Forwarded") ||
        startsWithIgnoreCase(name, "X-Forwarded-") || isHopByHop(name) || namedByConnection(request.headers, name))
      continue;
    if (http::equalsIgnoreCase(name, "Cookie")) {
      if (cookie_done) continue;
      cookie_done = true;
      std::optional<std::string> kept = admission::stripConcertCookies(http::joinHeader(request.headers, "Cookie", "; "));
      if (kept) appendHeader(out, "Cookie", *kept);
      continue;
    }
    appendHeader(out, name, h.value);
  }
  for (const http::Header& h : request.headers)
    if (http::equalsIgnoreCase(h.name, "TE") && http::headerHasToken(h.value, "trailers")) {
      appendHeader(out, "TE", "trailers");
      break;
    }
  appendHeader(out, "X-Forwarded-For", request.peer_ip);
  if (has_host) appendHeader(out, "X-Forwarded-Host", inbound_host);
  appendHeader(out, "X-Forwarded-Proto", request.tls ? "https" : "http");
  if (request.chunked)
    appendHeader(out, "Transfer-Encoding", "chunked");
  else if (request.content_length >= 0)
    appendHeader(out, "Content-Length", std::to_string(request.content_length));
  if (request.upgrade) {
    appendHeader(out, "Connection", "Upgrade");
    appendHeader(out, "Upgrade", request.header("Upgrade"));
  }
  out += "\r\n";
}

ClientFraming chooseClientFraming(const http::ResponseHead& origin, const http::Request& request) {
  if (request.method == "HEAD" || origin.status < 200 || origin.status == 204 || origin.status == 304)
    return ClientFraming::None;
  if (!origin.transfer_encoding && origin.content_length >= 0) return ClientFraming::Length;
  return request.http_minor >= 1 ? ClientFraming::Chunked : ClientFraming::Close;
}

void buildClientResponseHead(const http::ResponseHead& origin, const http::Request& request, ClientFraming framing,
                             bool close_client, const http::Headers& extra, std::string& out) {
  out += "HTTP/1.1 ";
  out += std::to_string(origin.status);
  out += ' ';
  out += http::reasonPhrase(origin.status);
  out += "\r\n";
  bool has_date = false;
  for (const http::Header& h : origin.headers) {
    const std::string_view name = h.name;
    if (isHopByHop(name) || http::equalsIgnoreCase(name, "Content-Length") || namedByConnection(origin.headers, name))
      continue;
    if (!has_date && http::equalsIgnoreCase(name, "Date")) has_date = true;
    appendHeader(out, name, h.value);
  }
  for (const http::Header& h : extra) appendHeader(out, h.name, h.value);
  switch (framing) {
    case ClientFraming::None:
      // HEAD and 304 keep the length the body would have had.
      if (origin.content_length >= 0 && !origin.transfer_encoding && origin.status != 204 && origin.status >= 200)
        appendHeader(out, "Content-Length", std::to_string(origin.content_length));
      break;
    case ClientFraming::Length: appendHeader(out, "Content-Length", std::to_string(origin.content_length)); break;
    case ClientFraming::Chunked: appendHeader(out, "Transfer-Encoding", "chunked"); break;
    case ClientFraming::Close: break;
  }
  if (!has_date) appendHeader(out, "Date", http::httpDate());
  if (origin.status == 101) {
    appendHeader(out, "Connection", "Upgrade");
    appendHeader(out, "Upgrade", http::findHeader(origin.headers, "Upgrade"));
  } else if (close_client) {
    appendHeader(out, "Connection", "close");
  } else if (request.http_minor == 0) {
    appendHeader(out, "Connection", "keep-alive");
  }
  out += "\r\n";
}

// ------------------------------------------------------------ the exchange

#define CONCERT_UPSTREAM_GUARD(conn, body)                                          \
  try {                                                                             \
    body;                                                                           \
  } catch (const std::exception& e) {                                               \
    LOG_ERROR("proxy for %s: %s", (conn)->request_.peer_ip.c_str(), e.what());      \
    (conn)->close();                                                                \
  } catch (...) {                                                                   \
    LOG_ERROR("proxy for %s: unknown exception", (conn)->request_.peer_ip.c_str()); \
    (conn)->close();                                                                \
  }

void ClientConnection::startProxy() {
  state_ = State::Proxying;
  sink_ = Sink::Upstream;
  up_phase_ = UpPhase::AwaitHead;
  response_started_ = false;
  upstream_paused_ = false;
  close_after_response_ = false;
  dial_failures_ = 0;
  if (request_.expect_continue && !body_done_) {
    static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    client_.write(kContinue, sizeof kContinue - 1);
  }
  if (!connectUpstream(true)) return;
  if (body_done_)
    armResponseTimer();
  else
    pumpBody();
}

bool ClientConnection::connectUpstream(bool allow_idle) {
  UpstreamPool& pool = worker_.upstreams();
  UpstreamConn* conn = allow_idle ? pool.takeIdle() : nullptr;
  if (!conn) {
    std::string error;
    conn = pool.dial(&error);
    if (!conn) {
      upstreamFailed(502, error);
      return false;
    }
  }
  upstream_ = conn;
  conn->parser.reset();
  conn->stream.setCallbacks(&ClientConnection::onUpstreamRead, &ClientConnection::onUpstreamWrite,
                            &ClientConnection::onUpstreamEvent, this);
  conn->stream.setWriteLowWater(kLowWater);
  conn->stream.enableRead();
  sendRequestHead();
  return true;
}

void ClientConnection::sendRequestHead() {
  scratch_.clear();
  buildUpstreamRequestHead(request_, worker_.config(), scratch_);
  upstream_->stream.write(scratch_);
}

void ClientConnection::armResponseTimer() {
  if (up_phase_ != UpPhase::AwaitHead || !upstream_) return;
  Millis ms = worker_.config().upstream_timeout;
  if (ms <= 0) return;
  timeval tv;
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  evtimer_add(response_timer_, &tv);
}

void ClientConnection::dropUpstream(bool reusable) {
  if (response_timer_) evtimer_del(response_timer_);
  if (!upstream_) return;
  UpstreamConn* conn = upstream_;
  upstream_ = nullptr;
  upstream_paused_ = false;
  if (reusable)
    worker_.upstreams().giveBack(conn);
  else
    worker_.upstreams().discard(conn);
}

void ClientConnection::onUpstreamRead(Stream&, void* arg) {
  auto* c = static_cast<ClientConnection*>(arg);
  if (c->closed_) return;
  CONCERT_UPSTREAM_GUARD(c, c->upstreamRead())
}

void ClientConnection::onUpstreamWrite(Stream&, void* arg) {
  auto* c = static_cast<ClientConnection*>(arg);
  if (c->closed_) return;
  CONCERT_UPSTREAM_GUARD(c, {
    if (c->state_ == State::Proxying && !c->body_done_)
      c->pumpBody();
    else if (c->state_ == State::Tunnel)
      c->tunnelPump();
  })
}

void ClientConnection::onUpstreamEvent(Stream&, short events, void* arg) {
  auto* c = static_cast<ClientConnection*>(arg);
  if (c->closed_) return;
  CONCERT_UPSTREAM_GUARD(c, c->upstreamEvent(events))
}

void ClientConnection::onResponseTimer(evutil_socket_t, short, void* arg) {
  auto* c = static_cast<ClientConnection*>(arg);
  if (c->closed_) return;
  CONCERT_UPSTREAM_GUARD(c, {
    if (c->up_phase_ == UpPhase::AwaitHead && c->upstream_) c->upstreamFailed(504, "timeout awaiting response headers");
  })
}

void ClientConnection::onChunkToClient(void* arg, const char* data, size_t len) {
  auto* c = static_cast<ClientConnection*>(arg);
  if (len == 0) return;
  Stream& out = c->client_;
  if (c->client_framing_ == ClientFraming::Chunked) {
    out.writeChunkHeader(len);
    out.write(data, len);
    out.write("\r\n", 2);
  } else {
    out.write(data, len);
  }
  c->bytes_sent_ += len;
}

void ClientConnection::upstreamEvent(short events) {
  if (events & Stream::kConnected) return;  // the request head is already queued on the stream
  if (state_ == State::Tunnel) {
    // The origin ended the tunnel: hand the client what is left, then close.
    client_.writeFrom(upstream_->stream, upstream_->stream.input().size());
    endRequest(false);
    return;
  }
  if (up_phase_ == UpPhase::Body && up_body_ == UpBody::UntilClose && (events & Stream::kEof) &&
      !(events & Stream::kError)) {
    relayResponseBody();
    if (closed_) return;
    size_t n = upstream_->stream.input().size();
    if (n > 0) {  // the client is slow: move the tail regardless of the watermark
      if (client_framing_ == ClientFraming::Chunked) client_.writeChunkHeader(n);
      client_.writeFrom(upstream_->stream, n);
      if (client_framing_ == ClientFraming::Chunked) client_.write("\r\n", 2);
      bytes_sent_ += n;
    }
    if (client_framing_ == ClientFraming::Chunked) client_.write("0\r\n\r\n", 5);
    responseComplete();
    return;
  }

  std::string reason;
  if (events & Stream::kTimeout) {
    reason = upstream_->stream.connected() ? "timeout" : "dial timeout";
  } else if (events & Stream::kError) {
    reason = upstream_->stream.errorReason();
  } else {
    reason = "origin closed the connection";
  }

  if (!response_started_ && !upstream_->stream.connected() && !upstream_->reused) {
    // Connecting failed: the next resolved address (if any) gets a try, as
    // long as no request byte is lost with this connection.
    UpstreamPool& pool = worker_.upstreams();
    pool.connectFailed(upstream_);
    if (++dial_failures_ < pool.addressCount() && body_mode_ == BodyMode::None) {
      dropUpstream(false);
      if (connectUpstream(false)) armResponseTimer();
      return;
    }
  }
  if (!response_started_) {
    // A kept-alive connection the origin closed before answering: the request
    // never reached it, so a bodiless request is retried once on a fresh one.
    if (up_phase_ == UpPhase::AwaitHead && upstream_->reused && upstream_->parser.idle() && !retried_ &&
        body_mode_ == BodyMode::None) {
      retried_ = true;
      dropUpstream(false);
      if (connectUpstream(false)) armResponseTimer();
      return;
    }
    upstreamFailed(502, reason);
    return;
  }
  LOG_ERROR("upstream error %s %s: %s after the response head", request_.method.c_str(), request_.path.c_str(),
            reason.c_str());
  // What was relayed is flushed, then the connection closes without the end
  // of the body: the client sees the truncation in the framing.
  endRequest(false);
}

void ClientConnection::upstreamFailed(int status, const std::string& reason) {
  LOG_ERROR("upstream error %s %s: %s", request_.method.c_str(), request_.path.c_str(), reason.c_str());
  dropUpstream(false);
  up_phase_ = UpPhase::None;
  state_ = State::ReadingHead;
  respondLocal(status == 504 ? http::plainText(504, "upstream timed out\n") : http::plainText(502, "upstream unavailable\n"),
               !body_done_);
}

void ClientConnection::upstreamRead() {
  if (state_ == State::Tunnel) {
    tunnelPump();
    return;
  }
  while (!closed_ && upstream_ && up_phase_ == UpPhase::AwaitHead) {
    const Buffer& in = upstream_->stream.input();
    if (in.empty()) return;
    size_t consumed = 0;
    http::MessageParser& parser = upstream_->parser;
    http::ParseStatus s = parser.feedHead(in.data(), in.size(), &consumed);
    upstream_->stream.consume(consumed);
    if (s == http::ParseStatus::NeedMore) continue;
    if (s == http::ParseStatus::Error) {
      std::string reason = "malformed response head: ";
      reason.append(parser.errorReason());
      upstreamFailed(502, reason);
      return;
    }
    http::ResponseHead& head = parser.response();
    if (head.status == 101) {
      if (request_.upgrade) {
        startTunnel();
      } else {
        upstreamFailed(502, "101 without an Upgrade request");
      }
      return;
    }
    if (head.status < 200) {  // 100 / 103: interim, not relayed
      parser.reset();
      continue;
    }
    evtimer_del(response_timer_);
    client_framing_ = chooseClientFraming(head, request_);
    close_after_response_ =
        !request_.keep_alive || worker_.draining() || client_framing_ == ClientFraming::Close || !body_done_;
    scratch_.clear();
    buildClientResponseHead(head, request_, client_framing_, close_after_response_, extra_headers_, scratch_);
    client_.write(scratch_);
    status_ = head.status;
    response_started_ = true;
    up_phase_ = UpPhase::Body;
    up_body_ = UpBody::Length;
    up_remaining_ = 0;
    if (client_framing_ != ClientFraming::None) {
      if (head.chunked) {
        up_body_ = UpBody::Chunked;
      } else if (head.transfer_encoding || head.content_length < 0) {
        up_body_ = UpBody::UntilClose;
      } else {
        up_remaining_ = head.content_length;
      }
    }
    if (up_body_ == UpBody::Length && up_remaining_ == 0) {
      responseComplete();
      return;
    }
  }
  if (!closed_ && up_phase_ == UpPhase::Body) relayResponseBody();
}

void ClientConnection::relayResponseBody() {
  if (!upstream_) return;
  while (!closed_ && upstream_ && up_phase_ == UpPhase::Body) {
    if (client_.pendingOutput() >= kHighWater) {
      // The client reads slower than the origin sends: stop reading the
      // origin until the client's buffer drains (onClientWrite).
      if (!upstream_paused_) {
        upstream_paused_ = true;
        upstream_->stream.disableRead();
      }
      return;
    }
    Stream& origin = upstream_->stream;
    size_t avail = origin.input().size();
    if (avail == 0) return;
    switch (up_body_) {
      case UpBody::Length: {
        size_t n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(avail), up_remaining_));
        client_.writeFrom(origin, n);
        bytes_sent_ += n;
        up_remaining_ -= static_cast<int64_t>(n);
        if (up_remaining_ == 0) {
          responseComplete();
          return;
        }
        break;
      }
      case UpBody::UntilClose:
        if (client_framing_ == ClientFraming::Chunked) client_.writeChunkHeader(avail);
        client_.writeFrom(origin, avail);
        if (client_framing_ == ClientFraming::Chunked) client_.write("\r\n", 2);
        bytes_sent_ += avail;
        break;
      case UpBody::Chunked: {
        size_t consumed = 0;
        http::ParseStatus s = upstream_->parser.feedChunked(origin.input().data(), avail, &consumed,
                                                      &ClientConnection::onChunkToClient, this);
        origin.consume(consumed);
        if (s == http::ParseStatus::Error) {
          LOG_ERROR("upstream error %s %s: malformed chunked body", request_.method.c_str(), request_.path.c_str());
          endRequest(false);
          return;
        }
        if (s == http::ParseStatus::BodyDone) {
          if (client_framing_ == ClientFraming::Chunked) client_.write("0\r\n\r\n", 5);
          responseComplete();
          return;
        }
        break;
      }
    }
  }
}

void ClientConnection::responseComplete() {
  up_phase_ = UpPhase::None;
  bool reusable = false;
  if (upstream_) {
    const http::ResponseHead& head = upstream_->parser.response();
    reusable = head.keep_alive && up_body_ != UpBody::UntilClose && body_done_ && upstream_->stream.input().empty() &&
               upstream_->stream.pendingOutput() == 0;
    if (upstream_paused_) upstream_->stream.enableRead();
  }
  dropUpstream(reusable);
  endRequest(!close_after_response_ && body_done_);
}

void ClientConnection::startTunnel() {
  evtimer_del(response_timer_);
  evtimer_del(head_timer_);
  const http::ResponseHead& head = upstream_->parser.response();
  scratch_.clear();
  buildClientResponseHead(head, request_, ClientFraming::None, false, extra_headers_, scratch_);
  client_.write(scratch_);
  status_ = 101;
  response_started_ = true;
  up_phase_ = UpPhase::None;
  state_ = State::Tunnel;
  body_done_ = true;
  tunnelPump();
}

void ClientConnection::tunnelPump() {
  if (!upstream_) return;
  Stream& origin = upstream_->stream;
  // Each direction moves only while its destination is below the watermark;
  // a full destination stops reading its source until it drains.
  if (origin.pendingOutput() < kHighWater) {
    origin.writeFrom(client_, client_.input().size());
    client_.enableRead();
  } else {
    client_.disableRead();
  }
  if (client_.pendingOutput() < kHighWater) {
    bytes_sent_ += origin.input().size();
    client_.writeFrom(origin, origin.input().size());
    origin.enableRead();
  } else {
    origin.disableRead();
  }
}

}  // namespace concert::worker
