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
#include "http/client_address.h"
#include "http/proxy_protocol.h"
#include "worker/access_log.h"
#include "worker/callbacks.h"
#include "worker/timeouts.h"
#include "worker/upstream_pool.h"

namespace concert::worker {

namespace {

constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace

// Anything thrown while handling one connection closes that connection.
#define CONCERT_CALLBACK_GUARD(conn, body) guarded([&] { body; }, [conn](const char* what) { (conn)->fail(what); });

ClientConnection::ClientConnection(ConnectionHost& host, evutil_socket_t fd, std::string peer_ip, bool admin_listener)
    : host_(host),
      fd_(fd),
      client_(host.base()),
      parser_(http::MessageParser::Kind::Request),
      request_(parser_.request()),
      stream_(client_, bytes_sent_),
      exchange_(host.base(), host.upstreams(), host.config(), *this) {
  request_.peer_ip = std::move(peer_ip);
  request_.admin_listener = admin_listener;
  awaiting_proxy_header_ = host.config().proxy_protocol && !admin_listener;
}

ClientConnection::~ClientConnection() {
  if (timer_) event_free(timer_);
}

bool ClientConnection::start() {
  if (!client_.attach(fd_)) return false;
  timer_ = evtimer_new(host_.base(), &ClientConnection::onTimer, this);
  if (!timer_ || !exchange_.init()) return false;
  client_.setCallbacks(&ClientConnection::onClientRead, &ClientConnection::onClientWrite,
                       &ClientConnection::onClientEvent, this);
  client_.setReadLimit(kHighWater);
  client_.setWriteLowWater(kLowWater);
  idle_ = false;  // a new connection gets the head timeout, not the keep-alive idle one
  phase_since_ = monotonicMs();
  armTimer(phase_since_ + host_.config().client_header_timeout);
  return true;
}

// ------------------------------------------------------------ callbacks

void ClientConnection::onClientRead(Stream&, void* arg) {
  auto* c = static_cast<ClientConnection*>(arg);
  if (c->closed_) return;
  CONCERT_CALLBACK_GUARD(c, {
    switch (c->state_) {
      case State::ReadingHead: c->processInput(); break;
      case State::LocalBody:
        c->body_.readAt(monotonicMs());
        c->pumpBody();
        break;
      case State::Proxying:
        if (!c->body_.done()) {
          c->body_.readAt(monotonicMs());
          c->pumpBody();
        }
        break;
      case State::Tunnel: c->exchange_.tunnelPump(); break;
      case State::Lingering: c->client_.consumeAll(); break;
      case State::Parked:
      case State::EventStream:  // nothing is read from a waiting client but its end and one head ahead
        c->flooded();
        break;
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
        // idle keep-alive connection keeps no buffer memory, and a draining
        // worker closes it.
        if (c->idle_ && c->client_.pendingOutput() == 0 && c->client_.input().empty()) {
          c->client_.trim();
          if (c->host_.draining()) c->closeIfIdle();
        }
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

void ClientConnection::onTimer(evutil_socket_t, short, void* arg) {
  auto* c = static_cast<ClientConnection*>(arg);
  c->timer_at_ = 0;
  if (c->closed_) return;
  CONCERT_CALLBACK_GUARD(c, c->checkTimeouts(monotonicMs()))
}

// The deadlines of the current state (timeouts.h): acts on the first one
// passed, else re-arms for the earliest. States that can start sending at
// any moment are looked at again within a send timeout.
void ClientConnection::checkTimeouts(Millis now) {
  const config::Config& config = host_.config();
  Millis next = 0;
  auto due = [&next](Millis deadline) {
    if (next == 0 || deadline < next) next = deadline;
  };
  if (const Millis since = client_.stalledSince(); since != 0) {
    if (now - since >= config.send_timeout) return timedOut(TimeoutPhase::Send);
    due(since + config.send_timeout);
  }
  switch (state_) {
    case State::ReadingHead: {
      const TimeoutPhase phase = idle_ ? TimeoutPhase::Keepalive : TimeoutPhase::ClientHeader;
      const Millis deadline = phase_since_ + timeoutSetting(config, phase);
      if (now >= deadline) return timedOut(phase);
      due(deadline);
      break;
    }
    case State::LocalBody:
    case State::Proxying:
      if (!body_.done()) {
        // Body bytes not read because the origin takes them slowly are not
        // the client's delay.
        if (body_.sink() == RequestBody::Sink::Upstream && exchange_.origin() &&
            exchange_.origin()->pendingOutput() >= kHighWater)
          body_.readAt(now);
        const Millis deadline = body_.lastRead() + config.client_body_timeout;
        if (now >= deadline) return timedOut(TimeoutPhase::ClientBody);
        due(deadline);
      }
      due(now + config.send_timeout);
      break;
    case State::EventStream:
    case State::Tunnel:
    case State::Closing: due(now + config.send_timeout); break;
    case State::Lingering:
      if (now >= phase_since_ + kLingerTimeout) {
        close();
        return;
      }
      due(phase_since_ + kLingerTimeout);
      break;
    case State::Parked: break;  // the worker's recheck bounds it; leaving it re-arms
  }
  if (next != 0) armTimer(next);
}

void ClientConnection::timedOut(TimeoutPhase phase) {
  if (shm::Segment* segment = host_.admission().segment) {
    segment->stats().count(timeoutCounter(phase));
    segment->stats().count(shm::Counter::TimeoutsTotal);
  }
  const Millis limit = timeoutSetting(host_.config(), phase);
  if (phase == TimeoutPhase::Keepalive) {
    LOG_DEBUG("client %s: idle for %lld ms, closing", request_.peer_ip.c_str(), static_cast<long long>(limit));
  } else {
    LOG_INFO("client %s: %s timeout (%lld ms)%s%s, closing", request_.peer_ip.c_str(), timeoutName(phase),
             static_cast<long long>(limit), started_ms_ != 0 ? " in " : "",
             started_ms_ != 0 ? (request_.method + " " + request_.path).c_str() : "");
  }
  switch (phase) {
    case TimeoutPhase::ClientBody:
      // Nothing was answered yet: 408. The origin never got the whole
      // request, so its side is cut at once.
      if ((state_ == State::Proxying && !exchange_.responseStarted()) ||
          (state_ == State::LocalBody && body_.sink() == RequestBody::Sink::Collect)) {
        exchange_.drop();
        state_ = State::ReadingHead;
        failRequest(408);
        return;
      }
      close();
      return;
    case TimeoutPhase::UpstreamRead:
    case TimeoutPhase::Tunnel: return;  // the exchange ends the request itself
    default: close(); return;
  }
}

void ClientConnection::ensureTimer(Millis deadline) {
  if (timer_at_ == 0 || deadline < timer_at_) armTimer(deadline);
}

void ClientConnection::armTimer(Millis deadline) {
  timeval tv = toTimeval(std::max<Millis>(deadline - monotonicMs(), 0));
  evtimer_add(timer_, &tv);
  timer_at_ = deadline;
}

// ------------------------------------------------------------ heads

void ClientConnection::processInput() {
  if (in_process_) return;  // the loop below picks up the next pipelined request
  in_process_ = true;
  const Buffer& in = client_.input();
  while (!closed_ && state_ == State::ReadingHead) {
    if (in.empty()) break;
    if (awaiting_proxy_header_ && !readProxyHeader()) break;
    if (in.empty()) break;
    if (idle_) {
      idle_ = false;
      phase_since_ = monotonicMs();
      ensureTimer(phase_since_ + host_.config().client_header_timeout);
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

// The PROXY protocol header a -proxy-protocol listener expects before any
// HTTP (the peer was checked against -trusted-proxies at accept). Its source
// address stands for the peer from here on; a malformed or missing one
// closes the connection without an answer.
bool ClientConnection::readProxyHeader() {
  const Buffer& in = client_.input();
  const http::ProxyHeader header = http::parseProxyHeader(reinterpret_cast<const uint8_t*>(in.data()), in.size());
  if (header.status == http::ProxyHeaderStatus::NeedMore) return false;
  if (header.status == http::ProxyHeaderStatus::Invalid) {
    LOG_INFO("connection from %s: PROXY protocol: %s, closing", request_.peer_ip.c_str(),
             header.error ? header.error : "invalid header");
    host_.admission().segment->stats().count(shm::Counter::ProxyProtocolRejectedTotal);
    close();
    return false;
  }
  client_.consume(header.length);
  awaiting_proxy_header_ = false;
  if (header.has_source) request_.peer_ip = http::socketAddressText(reinterpret_cast<const sockaddr*>(&header.source));
  return true;
}

bool ClientConnection::identifyClient() {
  const config::Config& config = host_.config();
  http::ClientIdentity client = http::identifyClient(request_, config.trusted_proxies);
  request_.client_ip = std::move(client.ip);
  request_.peer_trusted = client.peer_trusted;
  request_.client_https = client.https;
  if (!client.address) return false;
  const bool bypass = config::cidrListContains(config.bypass_cidrs, *client.address);
  request_.client_keyed = true;
  request_.client_key = http::clientKey(*client.address);
  request_.abuse_exempt = bypass || config::cidrListContains(config.abuse_allow, *client.address);
  return bypass;
}

void ClientConnection::keyPeer() {
  const config::Config& config = host_.config();
  std::optional<config::IpAddress> peer = config::parseIpAddress(request_.peer_ip);
  if (!peer || config::cidrListContains(config.trusted_proxies, *peer)) return;
  request_.client_keyed = true;
  request_.client_key = http::clientKey(*peer);
  request_.abuse_exempt = config::cidrListContains(config.abuse_allow, *peer) ||
                          config::cidrListContains(config.bypass_cidrs, *peer);
}

void ClientConnection::dispatch() {
  started_ms_ = monotonicMs();
  started_wall_ = time(nullptr);
  status_ = 0;
  bytes_sent_ = 0;
  outcome_ = admission::Outcome::Local;
  extra_headers_.clear();
  body_.start(request_, started_ms_);
  if (!body_.done()) ensureTimer(body_.lastRead() + host_.config().client_body_timeout);

  const config::Config& config = host_.config();
  const bool bypass_client = identifyClient();
  route_ = http::route(config, request_.method, request_.path, bypass_client, request_.admin_listener);
  const http::Endpoint& endpoint = http::endpoint(route_);
  log_request_ = endpoint.logged;
  const admission::AdmissionContext& ctx = host_.admission();
  admission::Visitor visitor(ctx, request_);  // the request's cookies and tokens, read once
  if (std::optional<http::LocalResponse> refusal =
          admission::screen(ctx, request_, visitor, route_, started_ms_, started_wall_)) {
    log_request_ = true;
    outcome_ = admission::Outcome::Rejected;
    respondLocal(std::move(*refusal), true);
    return;
  }
  if (request_.content_length > config.max_body) {
    failRequest(413);
    return;
  }

  switch (endpoint.serve) {
    case http::Serve::Local:
      if (endpoint.collects_body && request_.method == "POST") {
        collectBody();
        return;
      }
      respondLocal(admission::answer(ctx, route_, request_, {}, monotonicMs()), false);
      return;
    case http::Serve::Stream: openEvents(started_ms_); return;
    case http::Serve::Refused: {
      if (route_ == http::Route::NotFound) {
        respondLocal(http::plainText(404, "not found\n"), false);
        return;
      }
      http::LocalResponse r = http::plainText(405, "method not allowed\n");
      r.headers.push_back({"Allow", std::string(http::allowedMethods(request_.path))});
      respondLocal(std::move(r), false);
      return;
    }
    case http::Serve::Proxied:
      guard_ = admission::makeGuard(ctx, route_, std::move(visitor));
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
      if (was_parked) {
        host_.unpark(this);
        normalReads();
      }
      extra_headers_ = std::move(decision.response_headers);
      startProxy();
      return;
    case admission::Admission::Kind::Respond:
      if (was_parked) {
        host_.unpark(this);
        normalReads();
      }
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
      if (!was_parked) waitReads();
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
      normalReads();
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
  EventStreamWriter::Opened opened = stream_.open(admission::makeFeed(host_.admission(), route_), request_,
                                                  body_.done() && !host_.draining(), now);
  if (!opened.stream) {
    respondLocal(std::move(opened.response), false);
    return;
  }
  status_ = opened.response.status;
  state_ = State::EventStream;
  if (opened.ended) {
    endStream();
    return;
  }
  waitReads();
  if (closed_) return;
  request_.keepForLog();
  host_.addStream(this, stream_.ticket());
  ensureTimer(now + host_.config().send_timeout);
  if (host_.draining()) recheckStream(now, false);  // ends it at once
}

bool ClientConnection::recheckStream(Millis now, bool tick, bool may_send_position) {
  if (closed_ || state_ != State::EventStream) return false;
  bool position = false;
  CONCERT_CALLBACK_GUARD(this, {
    switch (stream_.recheck(now, tick, may_send_position, position)) {
      case EventStreamWriter::Next::Open: break;
      case EventStreamWriter::Next::End: endStream(); break;
      case EventStreamWriter::Next::Backlogged: close(); break;
    }
  })
  return position;
}

void ClientConnection::endStream() {
  host_.removeStream(this);
  normalReads();
  endRequest(stream_.finish());
}

void ClientConnection::waitReads() {
  client_.setReadLimit(body_.done() ? kWaitingReadAhead : kHighWater);
  client_.trim();
  flooded();
}

void ClientConnection::normalReads() {
  client_.setReadLimit(kHighWater);
}

bool ClientConnection::flooded() {
  if (closed_ || !body_.done() || client_.input().size() < kWaitingReadAhead) return false;
  host_.admission().segment->stats().count(shm::Counter::ConnectionsFloodedTotal);
  close();
  return true;
}

// ------------------------------------------------------------ responses

void ClientConnection::failRequest(int status) {
  if (started_ms_ == 0) {  // refused before dispatch: the head itself was bad
    started_ms_ = monotonicMs();
    started_wall_ = time(nullptr);
    log_request_ = true;
    keyPeer();
  }
  admission::refused(host_.admission(), request_, status, started_ms_);
  http::LocalResponse r = http::plainText(status, std::string(http::reasonPhrase(status)) + "\n");
  if (status == 405) r.headers.push_back({"Allow", "GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH"});
  respondLocal(std::move(r), true);
}

void ClientConnection::respondLocal(http::LocalResponse&& response, bool close_after) {
  status_ = response.status;
  http::WireOptions wire;
  wire.head_request = request_.method == "HEAD";
  // A body nobody uses is never waited for: dropped when it is all here
  // already, else the answer closes the connection (a declared body that
  // never comes cannot hold it open).
  body_.dropIfBuffered(client_);
  const bool must_close = close_after || !request_.keep_alive || host_.draining() || !body_.done() || body_.failed();
  wire.close = must_close;
  wire.http10_keep_alive = !must_close && request_.http_minor == 0;
  scratch_.clear();
  http::serializeResponse(response, wire, scratch_);
  client_.write(scratch_);
  const bool bodiless = status_ < 200 || status_ == 204 || status_ == 304;
  bytes_sent_ = (wire.head_request || bodiless) ? 0 : response.body.size();
  endRequest(!must_close);
}

// ------------------------------------------------------------ request bodies

void ClientConnection::pumpBody() {
  while (!closed_ && !body_.done()) {
    Stream* origin = nullptr;
    if (body_.sink() == RequestBody::Sink::Upstream) {
      origin = exchange_.origin();
      if (!origin) return;
      if (origin->pendingOutput() >= kHighWater) return;  // resumed by originWritable
    }
    const RequestBody::Step step = body_.pump(client_, parser_, origin, host_.config().max_body);
    switch (step) {
      case RequestBody::Step::Starved: return;
      case RequestBody::Step::Moved: break;
      case RequestBody::Step::Finished: bodyFinished(); break;
      case RequestBody::Step::TooLarge:
      case RequestBody::Step::Malformed:
        if (exchange_.responseStarted() ||
            (state_ == State::LocalBody && body_.sink() == RequestBody::Sink::Discard)) {
          close();  // the answer already went out: nothing left to say
        } else {
          exchange_.drop();
          failRequest(step == RequestBody::Step::TooLarge ? 413 : 400);
        }
        return;
    }
  }
}

void ClientConnection::collectBody() {
  if (!body_.collect()) {
    failRequest(413);
    return;
  }
  state_ = State::LocalBody;
  if (body_.done()) {
    bodyFinished();
    return;
  }
  if (request_.expect_continue) client_.write(kContinue, sizeof kContinue - 1);
  pumpBody();
}

void ClientConnection::bodyFinished() {
  switch (body_.sink()) {
    case RequestBody::Sink::Collect:
      respondLocal(admission::answer(host_.admission(), route_, request_, body_.collected(), monotonicMs()), false);
      return;
    case RequestBody::Sink::Discard: endRequest(true); return;
    case RequestBody::Sink::Upstream:
      if (Stream* origin = exchange_.origin(); origin && body_.chunked()) origin->write("0\r\n\r\n", 5);
      exchange_.requestSent();
      return;
  }
}

// ------------------------------------------------------------ endings

void ClientConnection::releaseSlots() {
  // The origin still works on the whole request: the slot waits for it.
  if (exchange_.detached()) return;
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
  exchange_.drop();  // first: the origin connection is pooled or closed before the slot goes
  releaseSlots();
  logRequest();
  extra_headers_.clear();
  body_.reset();
  status_ = 0;
  bytes_sent_ = 0;
  started_ms_ = 0;
  if (!keep_alive || host_.draining()) {
    startClosing();
    return;
  }
  parser_.reset();
  state_ = State::ReadingHead;
  idle_ = true;
  phase_since_ = monotonicMs();
  ensureTimer(phase_since_ + host_.config().keepalive_timeout);
  client_.enableRead();
  processInput();
}

void ClientConnection::startClosing() {
  if (closed_) return;
  if (state_ != State::Closing) {
    state_ = State::Closing;
    client_.disableRead();
    client_.setWriteLowWater(0);
    ensureTimer(monotonicMs() + host_.config().send_timeout);  // a client that never reads its answer
  }
  if (client_.pendingOutput() > 0) return;  // onClientWrite calls back when flushed
  // Lingering close: stop sending, keep reading (and dropping) briefly so a
  // client still uploading receives our answer instead of a reset.
  state_ = State::Lingering;
  client_.shutdownWrite();
  client_.setReadLimit(0);
  client_.consumeAll();
  client_.enableRead();
  phase_since_ = monotonicMs();
  ensureTimer(phase_since_ + kLingerTimeout);
}

void ClientConnection::close() {
  if (closed_) return;
  closed_ = true;
  logRequest();
  if (state_ == State::Parked) host_.unpark(this);
  if (state_ == State::EventStream) host_.removeStream(this);
  stream_.drop();
  if (timer_) evtimer_del(timer_);
  timer_at_ = 0;
  client_.setCallbacks(nullptr, nullptr, nullptr, nullptr);
  client_.close();
  // The origin has the whole request and keeps working on it: the slot stays
  // taken until it is done (originReleased finishes the close).
  if (exchange_.detached() || (state_ == State::Proxying && exchange_.detach())) return;
  exchange_.drop();
  releaseSlots();
  host_.connectionClosed(this);
}

void ClientConnection::originReleased() {
  releaseSlots();
  if (closed_) host_.connectionClosed(this);
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
  // The last response may still be on its way out (its head sent, the rest
  // queued): closing now would cut it short. It closes once it is out
  // (onClientWrite).
  if (client_.pendingOutput() > 0) return;
  close();
}

void ClientConnection::abort() {
  if (!closed_) close();
  exchange_.abandon();  // a detached exchange ends now: originReleased() frees the rest
}

// ------------------------------------------------------------ the origin side

void ClientConnection::startProxy() {
  state_ = State::Proxying;
  body_.sendTo(RequestBody::Sink::Upstream);
  ensureTimer(monotonicMs() + host_.config().send_timeout);
  if (request_.expect_continue && !body_.done()) client_.write(kContinue, sizeof kContinue - 1);
  if (!exchange_.start(extra_headers_, &bytes_sent_)) return;
  if (body_.done())
    exchange_.requestSent();
  else
    pumpBody();
}

void ClientConnection::originWritable() {
  if (state_ == State::Proxying && !body_.done()) pumpBody();
}

void ClientConnection::exchangeFailed(int status) {
  state_ = State::ReadingHead;
  // A detached exchange still uses this connection's request: no next one.
  respondLocal(status == 504 ? http::plainText(504, "upstream timed out\n") : http::plainText(502, "upstream unavailable\n"),
               !body_.done() || exchange_.detached());
}

void ClientConnection::tunnelOpened() {
  state_ = State::Tunnel;
  body_.end();
}

void ClientConnection::longLivedOpened() {
  if (guard_) guard_->onLongLived();
}

void ClientConnection::abortConnection(const char* what) {
  LOG_ERROR("proxy for %s: %s", request_.peer_ip.c_str(), what);
  // The exchange itself failed: nothing of it is waited for.
  exchange_.abandon();
  if (closed_) return;
  state_ = State::Closing;
  close();
}

void ClientConnection::responseHead(const http::ResponseHead& head, bool detached) {
  if (guard_) guard_->onResponseHead(request_, head, detached, extra_headers_);
}

// The origin's answers and errors, counted in the segment (shm/counters.h)
// and, for answers, observed in this worker's UpstreamResponse histogram;
// a page request's also in PageFirstByte and page_errors_total.
void ClientConnection::originAnswered(int status, int64_t micros) {
  shm::Segment* segment = host_.admission().segment;
  if (!segment) return;
  static constexpr shm::Counter kByClass[] = {
      shm::Counter::UpstreamResponses1xxTotal, shm::Counter::UpstreamResponses2xxTotal,
      shm::Counter::UpstreamResponses3xxTotal, shm::Counter::UpstreamResponses4xxTotal,
      shm::Counter::UpstreamResponses5xxTotal};
  segment->stats().count(kByClass[std::clamp(status / 100, 1, 5) - 1]);
  segment->histograms().observe(shm::Histogram::UpstreamResponse, host_.admission().slot, micros);
  if (guard_ && guard_->isPage()) {
    segment->histograms().observe(shm::Histogram::PageFirstByte, host_.admission().slot, micros);
    if (status >= 500) segment->stats().count(shm::Counter::PageErrorsTotal);
  }
}

void ClientConnection::originFailed(OriginError kind) {
  shm::Segment* segment = host_.admission().segment;
  if (!segment) return;
  if (guard_ && guard_->isPage()) segment->stats().count(shm::Counter::PageErrorsTotal);
  switch (kind) {
    case OriginError::Connect: segment->stats().count(shm::Counter::UpstreamErrorsConnectTotal); return;
    case OriginError::Timeout: segment->stats().count(shm::Counter::UpstreamErrorsTimeoutTotal); return;
    case OriginError::Reset: segment->stats().count(shm::Counter::UpstreamErrorsResetTotal); return;
  }
}

void ClientConnection::fail(const char* what) {
  LOG_ERROR("connection from %s: %s", request_.peer_ip.c_str(), what);
  close();
}

}  // namespace concert::worker
