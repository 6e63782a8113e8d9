// Client side of a connection: reading and validating request heads, routing,
// admission through the guard (including parking), local responses, request
// bodies, keep-alive, pipelining and closing. See connection.h for the state
// machine; the origin side is an OriginExchange (origin_exchange.cpp).
#include "worker/connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <exception>

#include "common/log.h"
#include "admission/admission.h"
#include "worker/access_log.h"
#include "worker/callbacks.h"
#include "worker/upstream_pool.h"

namespace concert::worker {

namespace {

constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace

// Anything thrown while handling one connection closes that connection.
#define CONCERT_CALLBACK_GUARD(conn, body) guarded([&] { body; }, [conn](const char* what) { (conn)->fail(what); });

ClientConnection::ClientConnection(ConnectionHost& host, evutil_socket_t fd, std::string peer_ip)
    : host_(host),
      fd_(fd),
      client_(host.base()),
      parser_(http::MessageParser::Kind::Request),
      request_(parser_.request()),
      exchange_(host.base(), host.upstreams(), host.config(), *this) {
  request_.peer_ip = std::move(peer_ip);
}

ClientConnection::~ClientConnection() {
  if (head_timer_) event_free(head_timer_);
}

bool ClientConnection::start() {
  if (!client_.attach(fd_)) return false;
  head_timer_ = evtimer_new(host_.base(), &ClientConnection::onHeadTimer, this);
  if (!head_timer_ || !exchange_.init()) return false;
  client_.setCallbacks(&ClientConnection::onClientRead, &ClientConnection::onClientWrite,
                       &ClientConnection::onClientEvent, this);
  client_.setReadLimit(kHighWater);
  client_.setWriteLowWater(kLowWater);
  idle_ = false;  // a new connection gets the head timeout, not the keep-alive idle one
  armHeadTimer(kHeadTimeout);
  return true;
}

// ------------------------------------------------------------ callbacks

void ClientConnection::onClientRead(Stream&, void* arg) {
  auto* c = static_cast<ClientConnection*>(arg);
  if (c->closed_) return;
  CONCERT_CALLBACK_GUARD(c, {
    switch (c->state_) {
      case State::ReadingHead: c->processInput(); break;
      case State::LocalBody: c->pumpBody(); break;
      case State::Proxying:
        if (!c->body_done_) c->pumpBody();
        break;
      case State::Tunnel: c->exchange_.tunnelPump(); break;
      case State::Lingering: c->client_.consumeAll(); break;
      case State::Parked:
      case State::EventStream:  // nothing is read from a stream's client but its end
      case State::Closing: break;
    }
  })
}

void ClientConnection::onClientWrite(Stream&, void* arg) {
  auto* c = static_cast<ClientConnection*>(arg);
  if (c->closed_) return;
  CONCERT_CALLBACK_GUARD(c, {
    switch (c->state_) {
      case State::Closing:
        if (c->client_.pendingOutput() == 0) c->startClosing();
        break;
      case State::Proxying:
        c->exchange_.clientWritable();
        break;
      case State::Tunnel: c->exchange_.tunnelPump(); break;
      case State::EventStream:
        // Between events a stream keeps no buffer memory (10,000 of them wait at once).
        if (c->client_.pendingOutput() == 0) c->client_.trim();
        break;
      case State::ReadingHead:
        // The response is out and no byte of the next request is here: an
        // idle keep-alive connection keeps no buffer memory.
        if (c->idle_ && c->client_.pendingOutput() == 0 && c->client_.input().empty()) c->client_.trim();
        break;
      default: break;
    }
  })
}

void ClientConnection::onClientEvent(Stream&, short events, void* arg) {
  auto* c = static_cast<ClientConnection*>(arg);
  if (c->closed_) return;
  CONCERT_CALLBACK_GUARD(c, {
    // A client that stops sending while its final response is still being
    // flushed is not gone yet; anywhere else EOF or an error means gone (the
    // original cancels the request when the client's side closes).
    if (c->state_ == State::Closing && (events & Stream::kEof) && !(events & Stream::kError)) return;
    c->close();
  })
}

void ClientConnection::onHeadTimer(evutil_socket_t, short, void* arg) {
  auto* c = static_cast<ClientConnection*>(arg);
  if (c->closed_) return;
  CONCERT_CALLBACK_GUARD(c, {
    // Slowloris, an idle keep-alive connection, or a lingering close that ran long.
    if (c->state_ == State::ReadingHead || c->state_ == State::Lingering || c->state_ == State::Closing) c->close();
  })
}

void ClientConnection::onChunkToUpstream(void* arg, const char* data, size_t len) {
  auto* c = static_cast<ClientConnection*>(arg);
  if (len == 0) return;
  c->body_total_ += static_cast<int64_t>(len);
  if (c->body_total_ > c->host_.config().max_body) {
    c->body_error_ = true;
    return;
  }
  switch (c->sink_) {
    case Sink::Upstream: {
      Stream* out = c->exchange_.origin();
      if (!out) return;
      out->writeChunk(data, len);
      break;
    }
    case Sink::Collect:
      if (c->collected_.size() + len > kMaxCapBody) {
        c->body_error_ = true;
        return;
      }
      c->collected_.append(data, len);
      break;
    case Sink::Discard: break;
  }
}

// ------------------------------------------------------------ heads

void ClientConnection::processInput() {
  if (in_process_) return;  // the loop below picks up the next pipelined request
  in_process_ = true;
  const Buffer& in = client_.input();
  while (!closed_ && state_ == State::ReadingHead) {
    if (in.empty()) break;
    if (idle_) {
      idle_ = false;
      armHeadTimer(kHeadTimeout);
    }
    size_t consumed = 0;
    http::ParseStatus s = parser_.feedHead(in.data(), in.size(), &consumed);
    client_.consume(consumed);
    if (s == http::ParseStatus::NeedMore) continue;
    if (s == http::ParseStatus::Error) {
      failRequest(parser_.errorStatus());
      break;
    }
    dispatch();
  }
  in_process_ = false;
}

void ClientConnection::dispatch() {
  evtimer_del(head_timer_);
  started_ms_ = monotonicMs();
  started_wall_ = time(nullptr);
  status_ = 0;
  bytes_sent_ = 0;
  outcome_ = admission::Outcome::Local;
  extra_headers_.clear();
  body_total_ = 0;
  body_error_ = false;
  if (request_.chunked) {
    body_mode_ = BodyMode::Chunked;
    body_done_ = false;
  } else if (request_.content_length > 0) {
    body_mode_ = BodyMode::Length;
    body_remaining_ = request_.content_length;
    body_done_ = false;
  } else {
    body_mode_ = BodyMode::None;
    body_done_ = true;
  }

  const config::Config& config = host_.config();
  route_ = http::route(config, request_.method, request_.path);
  log_request_ = !(route_ == http::Route::PrivateAsset || route_ == http::Route::PublicAsset || route_ == http::Route::QueueStatus ||
                   route_ == http::Route::QueueEvents || route_ == http::Route::Healthz);
  if (request_.content_length > config.max_body) {
    failRequest(413);
    return;
  }

  const admission::AdmissionContext& ctx = host_.admission();
  switch (route_) {
    case http::Route::QueueStatus: respondLocal(admission::handleQueueStatus(ctx, request_, monotonicMs()), false); return;
    case http::Route::QueueEvents: openEvents(started_ms_); return;
    case http::Route::Healthz: respondLocal(admission::handleHealthz(ctx, request_), false); return;
    case http::Route::Stats: respondLocal(admission::handleStats(ctx, request_), false); return;
    case http::Route::Cap:
      if (body_mode_ == BodyMode::Length && body_remaining_ > static_cast<int64_t>(kMaxCapBody)) {
        failRequest(413);
        return;
      }
      collected_.clear();
      sink_ = Sink::Collect;
      state_ = State::LocalBody;
      if (body_done_) {
        bodyFinished();
        return;
      }
      if (request_.expect_continue) client_.write(kContinue, sizeof kContinue - 1);
      pumpBody();
      return;
    case http::Route::MethodNotAllowed: {
      http::LocalResponse r = http::plainText(405, "method not allowed\n");
      r.headers.push_back({"Allow", std::string(http::allowedMethods(request_.path))});
      respondLocal(std::move(r), false);
      return;
    }
    case http::Route::Bypass:
      outcome_ = admission::Outcome::Bypass;
      startProxy();
      return;
    case http::Route::PrivateAsset:
    case http::Route::PublicAsset:
      guard_ = admission::makeAssetGuard(ctx, route_ == http::Route::PrivateAsset);
      runGuard(monotonicMs());
      return;
    case http::Route::LongLived:
    case http::Route::Page:
      guard_ = admission::makePageGuard(ctx);
      runGuard(monotonicMs());
      return;
  }
}

// ------------------------------------------------------------ admission

void ClientConnection::runGuard(Millis now) {
  admission::Admission decision = guard_->admit(request_, now);
  outcome_ = guard_->outcome();
  const bool was_parked = state_ == State::Parked;
  switch (decision.kind) {
    case admission::Admission::Kind::Proceed:
      if (was_parked) host_.unpark(this);
      extra_headers_ = std::move(decision.response_headers);
      startProxy();
      return;
    case admission::Admission::Kind::Respond:
      if (was_parked) host_.unpark(this);
      state_ = State::ReadingHead;
      respondLocal(std::move(decision.response), false);
      return;
    case admission::Admission::Kind::Wait:
      // Parked the first time, re-filed on every recheck that still waits
      // (a held request's ticket can change, or it can turn into a claimed
      // ticket waiting for a page slot).
      park_deadline_ = decision.deadline;
      state_ = State::Parked;
      host_.park(this, decision.held_ticket);
      return;
  }
}

void ClientConnection::recheckAdmission(Millis now) {
  if (closed_ || state_ != State::Parked) return;
  CONCERT_CALLBACK_GUARD(this, {
    if (now >= park_deadline_) {
      http::LocalResponse response = guard_->timedOut(request_, now);
      outcome_ = guard_->outcome();
      host_.unpark(this);
      state_ = State::ReadingHead;
      respondLocal(std::move(response), false);
    } else {
      runGuard(now);
    }
  })
  if (!closed_ && state_ == State::ReadingHead) processInput();
}

// ------------------------------------------------------------ event streams

void ClientConnection::openEvents(Millis now) {
  events_ = std::make_unique<admission::QueueEvents>(host_.admission());
  admission::QueueEvents::Opening opening = events_->open(request_, now);
  if (!opening.stream) {
    events_.reset();
    respondLocal(std::move(opening.response), false);
    return;
  }
  // A request body is never read here: the connection closes after the
  // stream rather than parse it as the next request.
  stream_chunked_ = request_.http_minor >= 1;
  stream_keep_alive_ = stream_chunked_ && request_.keep_alive && body_done_ && !host_.draining();
  status_ = opening.response.status;
  scratch_.clear();
  http::serializeStreamHead(opening.response, stream_chunked_, !stream_keep_alive_, scratch_);
  client_.write(scratch_);
  state_ = State::EventStream;
  streamWrite(opening.first.text(), now);
  if (opening.first.ends()) {
    endStream();
    return;
  }
  host_.addStream(this, events_->ticket());
  if (host_.draining()) recheckStream(now, false);  // ends it at once
}

bool ClientConnection::recheckStream(Millis now, bool tick, bool may_send_position) {
  if (closed_ || state_ != State::EventStream) return false;
  bool position = false;
  CONCERT_CALLBACK_GUARD(this, {
    admission::QueueEvents::Event event = events_->recheck(now, may_send_position);
    position = event.kind == admission::QueueEvents::Event::Kind::Position;
    if (event.kind != admission::QueueEvents::Event::Kind::None)
      streamWrite(event.text(), now);
    else if (tick && now - stream_written_ms_ >= kKeepAliveEvery)
      streamWrite(admission::kEventStreamKeepAlive, now);
    if (event.ends())
      endStream();
    else if (client_.pendingOutput() > kMaxStreamBacklog)
      close();
  })
  return position;
}

void ClientConnection::streamWrite(std::string_view text, Millis now) {
  if (stream_chunked_)
    client_.writeChunk(text);
  else
    client_.write(text);
  bytes_sent_ += text.size();
  stream_written_ms_ = now;
}

void ClientConnection::endStream() {
  host_.removeStream(this);
  events_.reset();
  if (stream_chunked_) client_.write("0\r\n\r\n", 5);
  endRequest(stream_keep_alive_);
}

// ------------------------------------------------------------ responses

void ClientConnection::failRequest(int status) {
  if (started_ms_ == 0) {  // refused before dispatch: the head itself was bad
    started_ms_ = monotonicMs();
    started_wall_ = time(nullptr);
    log_request_ = true;
  }
  http::LocalResponse r = http::plainText(status, std::string(http::reasonPhrase(status)) + "\n");
  if (status == 405) r.headers.push_back({"Allow", "GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH"});
  respondLocal(std::move(r), true);
}

void ClientConnection::respondLocal(http::LocalResponse&& response, bool close_after) {
  status_ = response.status;
  http::WireOptions wire;
  wire.head_request = request_.method == "HEAD";
  const bool unread_expected_body = !body_done_ && request_.expect_continue;
  const bool must_close =
      close_after || !request_.keep_alive || host_.draining() || unread_expected_body || body_error_;
  wire.close = must_close;
  wire.http10_keep_alive = !must_close && request_.http_minor == 0;
  scratch_.clear();
  http::serializeResponse(response, wire, scratch_);
  client_.write(scratch_);
  const bool bodiless = status_ < 200 || status_ == 204 || status_ == 304;
  bytes_sent_ = (wire.head_request || bodiless) ? 0 : response.body.size();
  if (must_close || body_done_) {
    endRequest(!must_close);
    return;
  }
  // The answer is out; the rest of the request body is read and dropped so
  // the connection can carry the next request.
  releaseGuard();
  logRequest();
  sink_ = Sink::Discard;
  state_ = State::LocalBody;
  pumpBody();
}

// ------------------------------------------------------------ request bodies

void ClientConnection::pumpBody() {
  const Buffer& in = client_.input();
  while (!closed_ && !body_done_) {
    size_t avail = in.size();
    if (avail == 0) return;
    Stream* origin = nullptr;
    if (sink_ == Sink::Upstream) {
      origin = exchange_.origin();
      if (!origin) return;
      if (origin->pendingOutput() >= kHighWater) return;  // resumed by originWritable
    }
    if (body_mode_ == BodyMode::Length) {
      size_t n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(avail), body_remaining_));
      switch (sink_) {
        case Sink::Upstream: origin->writeFrom(client_, n); break;
        case Sink::Collect:
          collected_.append(in.data(), n);
          client_.consume(n);
          break;
        case Sink::Discard: client_.consume(n); break;
      }
      body_remaining_ -= static_cast<int64_t>(n);
      body_total_ += static_cast<int64_t>(n);
      if (body_remaining_ == 0) bodyFinished();
      continue;
    }
    size_t consumed = 0;
    http::ParseStatus s = parser_.feedChunked(in.data(), in.size(), &consumed, &ClientConnection::onChunkToUpstream, this);
    client_.consume(consumed);
    if (body_error_ || s == http::ParseStatus::Error) {
      const int status = body_error_ ? 413 : 400;
      body_error_ = true;
      if (exchange_.responseStarted() || (state_ == State::LocalBody && sink_ == Sink::Discard)) {
        close();  // the answer already went out: nothing left to say
      } else {
        exchange_.drop();
        failRequest(status);
      }
      return;
    }
    if (s == http::ParseStatus::BodyDone) bodyFinished();
  }
}

void ClientConnection::bodyFinished() {
  body_done_ = true;
  switch (sink_) {
    case Sink::Collect: respondLocal(admission::handleCap(host_.admission(), request_, collected_), false); return;
    case Sink::Discard: endRequest(true); return;
    case Sink::Upstream:
      if (Stream* origin = exchange_.origin(); origin && body_mode_ == BodyMode::Chunked)
        origin->write("0\r\n\r\n", 5);
      exchange_.requestSent();
      return;
  }
}

// ------------------------------------------------------------ endings

void ClientConnection::releaseGuard() {
  if (guard_) {
    guard_->release();
    guard_.reset();
  }
}

void ClientConnection::logRequest() {
  if (!log_request_) return;
  log_request_ = false;
  if (status_ == 0) return;
  double seconds = static_cast<double>(monotonicMs() - started_ms_) / 1000.0;
  host_.accessLog().record(request_, status_, bytes_sent_, seconds, outcome_, started_wall_);
}

void ClientConnection::endRequest(bool keep_alive) {
  releaseGuard();
  logRequest();
  exchange_.drop();
  extra_headers_.clear();
  collected_.clear();
  status_ = 0;
  bytes_sent_ = 0;
  started_ms_ = 0;
  body_mode_ = BodyMode::None;
  body_done_ = true;
  body_error_ = false;
  sink_ = Sink::Discard;
  if (!keep_alive || host_.draining()) {
    startClosing();
    return;
  }
  parser_.reset();
  state_ = State::ReadingHead;
  idle_ = true;
  armHeadTimer(kIdleTimeout);
  client_.enableRead();
  processInput();
}

void ClientConnection::startClosing() {
  if (closed_) return;
  if (state_ != State::Closing) {
    state_ = State::Closing;
    client_.disableRead();
    client_.setWriteLowWater(0);
    armHeadTimer(kFlushTimeout);  // a client that never reads its answer is not waited for forever
  }
  if (client_.pendingOutput() > 0) return;  // onClientWrite calls back when flushed
  // Lingering close: stop sending, keep reading (and dropping) briefly so a
  // client still uploading receives our answer instead of a reset.
  state_ = State::Lingering;
  client_.shutdownWrite();
  client_.setReadLimit(0);
  client_.consumeAll();
  client_.enableRead();
  armHeadTimer(kLingerTimeout);
}

void ClientConnection::close() {
  if (closed_) return;
  closed_ = true;
  releaseGuard();
  logRequest();
  if (state_ == State::Parked) host_.unpark(this);
  if (state_ == State::EventStream) host_.removeStream(this);
  events_.reset();
  exchange_.drop();
  if (head_timer_) evtimer_del(head_timer_);
  client_.setCallbacks(nullptr, nullptr, nullptr, nullptr);
  client_.close();
  host_.connectionClosed(this);
}

void ClientConnection::closeIfIdle() {
  if (closed_) return;
  if (state_ != State::ReadingHead || !idle_) return;
  // A request may already sit in the socket's receive buffer, unread by the
  // loop yet. Closing now would reset it (close() with unread data sends RST)
  // and fail the request because of a drain; serve it instead: the read
  // callback fires for it and the response goes out with Connection: close.
  char probe;
  ssize_t n = recv(client_.fd(), &probe, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0 || !client_.input().empty()) return;
  close();
}

void ClientConnection::abort() {
  if (!closed_) close();
}

void ClientConnection::armHeadTimer(Millis ms) {
  timeval tv = toTimeval(ms);
  evtimer_add(head_timer_, &tv);
}

// ------------------------------------------------------------ the origin side

void ClientConnection::startProxy() {
  state_ = State::Proxying;
  sink_ = Sink::Upstream;
  if (request_.expect_continue && !body_done_) client_.write(kContinue, sizeof kContinue - 1);
  if (!exchange_.start(extra_headers_, &bytes_sent_)) return;
  if (body_done_)
    exchange_.requestSent();
  else
    pumpBody();
}

void ClientConnection::originWritable() {
  if (state_ == State::Proxying && !body_done_) pumpBody();
}

void ClientConnection::exchangeFailed(int status) {
  state_ = State::ReadingHead;
  respondLocal(status == 504 ? http::plainText(504, "upstream timed out\n") : http::plainText(502, "upstream unavailable\n"),
               !body_done_);
}

void ClientConnection::tunnelOpened() {
  evtimer_del(head_timer_);
  state_ = State::Tunnel;
  body_done_ = true;
}

void ClientConnection::abortConnection(const char* what) {
  LOG_ERROR("proxy for %s: %s", request_.peer_ip.c_str(), what);
  close();
}

void ClientConnection::fail(const char* what) {
  LOG_ERROR("connection from %s: %s", request_.peer_ip.c_str(), what);
  close();
}

}  // namespace concert::worker
