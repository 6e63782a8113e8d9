// One request's exchange with the origin; see origin_exchange.h.
#include "worker/origin_exchange.h"

#include <algorithm>
#include <exception>

#include "admission/admission.h"
#include "common/log.h"
#include "http/response.h"
#include "worker/callbacks.h"
#include "worker/upstream_pool.h"

namespace concert::worker {

// Anything thrown on the origin side closes the client connection.
#define CONCERT_ORIGIN_GUARD(exchange, body) \
  guarded([&] { body; }, [exchange](const char* what) { (exchange)->client_.abortConnection(what); });

OriginExchange::OriginExchange(event_base* base, UpstreamPool& pool, const config::Config& config, Client& client)
    : base_(base), pool_(pool), config_(config), client_(client) {}

OriginExchange::~OriginExchange() {
  detached_ = false;
  drop(false);
  if (response_timer_) event_free(response_timer_);
}

bool OriginExchange::init() {
  response_timer_ = evtimer_new(base_, &OriginExchange::onResponseTimer, this);
  return response_timer_ != nullptr;
}

bool OriginExchange::start(const http::Headers& extra, uint64_t* sent) {
  extra_ = &extra;
  sent_ = sent;
  response_started_ = false;
  paused_ = false;
  close_after_ = false;
  retried_ = false;
  request_sent_ = false;
  detached_ = false;
  event_stream_ = false;
  dial_failures_ = 0;
  sent_us_ = 0;
  return connect(true);
}

Stream* OriginExchange::origin() {
  return upstream_ ? &upstream_->stream : nullptr;
}

void OriginExchange::requestSent() {
  request_sent_ = true;
  sent_us_ = monotonicUs();
  armResponseTimer();
}

bool OriginExchange::connect(bool allow_idle) {
  phase_ = Phase::AwaitHead;
  UpstreamConn* conn = allow_idle ? pool_.takeIdle() : nullptr;
  if (!conn) {
    std::string error;
    conn = pool_.dial(&error);
    if (!conn) {
      client_.originFailed(OriginError::Connect);
      fail(502, error);
      return false;
    }
  }
  upstream_ = conn;
  conn->parser.reset();
  conn->stream.setCallbacks(&OriginExchange::onRead, &OriginExchange::onWrite, &OriginExchange::onEvent, this);
  conn->stream.setWriteLowWater(kLowWater);
  conn->stream.setReadLimit(kHighWater);
  conn->stream.enableRead();
  scratch_.clear();
  buildUpstreamRequestHead(client_.request(), config_, scratch_);
  conn->stream.write(scratch_);
  return true;
}

void OriginExchange::armResponseTimer() {
  if (phase_ != Phase::AwaitHead || !upstream_) return;
  armTimer(monotonicMs() + config_.upstream_timeout);
}

// One timer per exchange, armed lazily: the head deadline while awaiting the
// head; in the body and in a tunnel it fires at most once per idle limit and
// compares the last read time, so a busy response never touches the timer.
void OriginExchange::armTimer(Millis deadline) {
  timeval tv = toTimeval(std::max<Millis>(deadline - monotonicMs(), 0));
  evtimer_add(response_timer_, &tv);
  timer_at_ = deadline;
}

void OriginExchange::ensureTimer(Millis deadline) {
  if (timer_at_ == 0 || deadline < timer_at_) armTimer(deadline);
}

Millis OriginExchange::bodyIdleLimit() const {
  // A detached exchange only waits for the origin to finish its work.
  if (detached_) return config_.upstream_read_timeout;
  return phase_ == Phase::Tunnel || event_stream_ ? config_.tunnel_timeout : config_.upstream_read_timeout;
}

void OriginExchange::releaseOrigin(bool reusable) {
  if (response_timer_) evtimer_del(response_timer_);
  timer_at_ = 0;
  if (!upstream_) return;
  UpstreamConn* conn = upstream_;
  upstream_ = nullptr;
  paused_ = false;
  if (reusable)
    pool_.giveBack(conn);
  else
    pool_.discard(conn);
}

void OriginExchange::drop(bool reusable) {
  if (detached_) return;
  releaseOrigin(reusable);
  phase_ = Phase::None;
  response_started_ = false;
  close_after_ = false;
  retried_ = false;
  request_sent_ = false;
  event_stream_ = false;
}

bool OriginExchange::detach() {
  if (detached_) return true;
  // The origin has not received the whole request: cut it at once.
  if (!upstream_ || !request_sent_ || upstream_->stream.pendingOutput() > 0) return false;
  // A tunnel or an event stream has no end of work to wait for.
  if ((phase_ != Phase::AwaitHead && phase_ != Phase::Body) || event_stream_) return false;
  detached_ = true;
  if (phase_ == Phase::Body) {
    if (paused_) {
      paused_ = false;
      upstream_->stream.enableRead();
    }
    ensureTimer(last_read_ms_ + config_.upstream_read_timeout);
  }
  // What the origin sent already is dropped now, the rest as it comes.
  readResponse();
  return true;
}

void OriginExchange::abandon() {
  if (detached_) finishDetached(false);
}

void OriginExchange::finishDetached(bool reusable) {
  detached_ = false;
  drop(reusable);  // the origin connection is pooled or closed before the slot goes
  client_.originReleased();
}

// ------------------------------------------------------------ callbacks

void OriginExchange::onRead(Stream&, void* arg) {
  auto* x = static_cast<OriginExchange*>(arg);
  CONCERT_ORIGIN_GUARD(x, x->readResponse())
}

void OriginExchange::onWrite(Stream&, void* arg) {
  auto* x = static_cast<OriginExchange*>(arg);
  if (x->detached_) return;
  CONCERT_ORIGIN_GUARD(x, {
    if (x->phase_ == Phase::Tunnel)
      x->tunnelPump();
    else
      x->client_.originWritable();
  })
}

void OriginExchange::onEvent(Stream&, short events, void* arg) {
  auto* x = static_cast<OriginExchange*>(arg);
  CONCERT_ORIGIN_GUARD(x, x->originEvent(events))
}

void OriginExchange::onResponseTimer(evutil_socket_t, short, void* arg) {
  auto* x = static_cast<OriginExchange*>(arg);
  x->timer_at_ = 0;
  CONCERT_ORIGIN_GUARD(x, x->onTimer(monotonicMs()))
}

void OriginExchange::onTimer(Millis now) {
  if (!upstream_) return;
  const http::Request& request = client_.request();
  switch (phase_) {
    case Phase::None: return;
    case Phase::AwaitHead:
      if (detached_) {
        LOG_INFO("origin gave no answer to %s %s within -upstream-read-timeout after its client left; closing it",
                 request.method.c_str(), request.path.c_str());
        finishDetached(false);
      } else {
        headTimedOut();
      }
      return;
    case Phase::Body:
    case Phase::Tunnel: {
      const Millis limit = bodyIdleLimit();
      // Reading is paused for a slow client: its send timeout decides.
      if (paused_ && !detached_) {
        armTimer(now + limit);
        return;
      }
      if (now - last_read_ms_ < limit) {
        armTimer(last_read_ms_ + limit);
        return;
      }
      if (detached_) {
        LOG_INFO("origin silent for %lld ms in its response to %s %s after its client left; closing it",
                 static_cast<long long>(limit), request.method.c_str(), request.path.c_str());
        finishDetached(false);
        return;
      }
      client_.timedOut(phase_ == Phase::Tunnel || event_stream_ ? TimeoutPhase::Tunnel : TimeoutPhase::UpstreamRead);
      // What was relayed is flushed, then the client connection closes
      // without the end of the body: the truncation shows in the framing.
      client_.exchangeDone(false);
      return;
    }
  }
}

// No response head within -upstream-timeout: the client gets 504. When the
// origin has the whole request it may still be working on it, so the
// exchange detaches and keeps the slot until the origin answers (dropped) or
// stays silent for -upstream-read-timeout more.
void OriginExchange::headTimedOut() {
  const http::Request& request = client_.request();
  client_.originFailed(OriginError::Timeout);
  if (!request_sent_ || upstream_->stream.pendingOutput() > 0) {
    fail(504, "timeout awaiting response headers");
    return;
  }
  LOG_ERROR("upstream error %s %s: timeout awaiting response headers (the request keeps its slot until the origin "
            "is done)",
            request.method.c_str(), request.path.c_str());
  detached_ = true;
  armTimer(monotonicMs() + config_.upstream_read_timeout);
  client_.exchangeFailed(504);
}

void OriginExchange::onChunk(void* arg, const char* data, size_t len) {
  auto* x = static_cast<OriginExchange*>(arg);
  if (len == 0 || x->detached_) return;
  Stream& out = x->client_.clientStream();
  if (x->framing_ == ClientFraming::Chunked) {
    out.writeChunk(data, len);
  } else {
    out.write(data, len);
  }
  *x->sent_ += len;
}

// ------------------------------------------------------------ the response

void OriginExchange::originEvent(short events) {
  if (!upstream_ || (events & Stream::kConnected)) return;  // a connect: the request head is queued already
  if (detached_) {
    // The origin ended the response (a body delimited by the close) or its
    // connection: either way its work on the request is over.
    if (phase_ == Phase::Body && body_ == BodyFraming::UntilClose) upstream_->stream.consumeAll();
    finishDetached(false);
    return;
  }
  Stream& client = client_.clientStream();
  if (phase_ == Phase::Tunnel) {
    // The origin ended the tunnel: hand the client what is left, then close.
    client.writeFrom(upstream_->stream, upstream_->stream.input().size());
    client_.exchangeDone(false);
    return;
  }
  if (phase_ == Phase::Body && body_ == BodyFraming::UntilClose && (events & Stream::kEof) &&
      !(events & Stream::kError)) {
    relayBody();
    if (!upstream_) return;
    size_t n = upstream_->stream.input().size();
    if (n > 0) {  // the client is slow: move the tail regardless of the watermark
      if (framing_ == ClientFraming::Chunked) client.writeChunkHeader(n);
      client.writeFrom(upstream_->stream, n);
      if (framing_ == ClientFraming::Chunked) client.write("\r\n", 2);
      *sent_ += n;
    }
    if (framing_ == ClientFraming::Chunked) client.write("0\r\n\r\n", 5);
    complete();
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

  // Only an idempotent request without a body is ever sent twice: a body's
  // bytes went with the connection that failed, and a POST the origin may
  // have acted on must not be repeated (a form reaches the origin once or
  // not at all).
  const http::Request& sent = client_.request();
  const bool idempotent = sent.method == "GET" || sent.method == "HEAD" || sent.method == "OPTIONS" ||
                          sent.method == "PUT" || sent.method == "DELETE" || sent.method == "TRACE";
  const bool replayable = idempotent && !sent.hasBody();
  const bool opened = upstream_->stream.connected() || upstream_->reused;
  if (!response_started_ && !opened) {
    // Connecting failed: the next resolved address (if any) gets a try.
    client_.originFailed(OriginError::Connect);
    pool_.connectFailed(upstream_);
    if (++dial_failures_ < pool_.addressCount() && replayable) {
      releaseOrigin(false);
      if (connect(false)) armResponseTimer();
      return;
    }
  }
  if (!response_started_) {
    // A kept-alive connection the origin closed before answering: the request
    // never reached it, so a bodiless request is retried once on a fresh one.
    if (phase_ == Phase::AwaitHead && upstream_->reused && upstream_->parser.idle() && !retried_ && replayable) {
      retried_ = true;
      releaseOrigin(false);
      if (connect(false)) armResponseTimer();
      return;
    }
    if (opened) client_.originFailed(OriginError::Reset);
    fail(502, reason);
    return;
  }
  client_.originFailed(OriginError::Reset);
  const http::Request& request = client_.request();
  LOG_ERROR("upstream error %s %s: %s after the response head", request.method.c_str(), request.path.c_str(),
            reason.c_str());
  // What was relayed is flushed, then the connection closes without the end
  // of the body: the client sees the truncation in the framing.
  client_.exchangeDone(false);
}

void OriginExchange::fail(int status, const std::string& reason) {
  const http::Request& request = client_.request();
  LOG_ERROR("upstream error %s %s: %s", request.method.c_str(), request.path.c_str(), reason.c_str());
  drop(false);
  client_.exchangeFailed(status);
}

void OriginExchange::readResponse() {
  last_read_ms_ = monotonicMs();
  if (phase_ == Phase::Tunnel) {
    tunnelPump();
    return;
  }
  const http::Request& request = client_.request();
  while (upstream_ && phase_ == Phase::AwaitHead) {
    const Buffer& in = upstream_->stream.input();
    if (in.empty()) return;
    size_t consumed = 0;
    http::MessageParser& parser = upstream_->parser;
    http::ParseStatus s = parser.feedHead(in.data(), in.size(), &consumed);
    upstream_->stream.consume(consumed);
    if (s == http::ParseStatus::NeedMore) continue;
    if (s == http::ParseStatus::Error) {
      if (detached_) {
        finishDetached(false);
        return;
      }
      std::string reason = "malformed response head: ";
      reason.append(parser.errorReason());
      fail(502, reason);
      return;
    }
    http::ResponseHead& head = parser.response();
    if (head.status == 101 || head.status >= 200) {
      client_.originAnswered(head.status, sent_us_ == 0 ? 0 : monotonicUs() - sent_us_);
      client_.responseHead(head, detached_);
    }
    if (detached_ && (head.status == 101 || (head.status >= 200 && isEventStream(head)))) {
      finishDetached(false);  // nothing left to wait for
      return;
    }
    if (head.status == 101) {
      if (request.upgrade) {
        startTunnel();
      } else {
        fail(502, "101 without an Upgrade request");
      }
      return;
    }
    if (head.status < 200) {  // 100 / 103: interim, not relayed
      parser.reset();
      continue;
    }
    framing_ = chooseClientFraming(head, request);
    event_stream_ = isEventStream(head);
    if (!detached_) {
      close_after_ =
          !request.keep_alive || client_.draining() || framing_ == ClientFraming::Close || !client_.requestBodyDone();
      if (event_stream_) client_.longLivedOpened();
      scratch_.clear();
      buildClientResponseHead(head, request, framing_, close_after_, *extra_, scratch_, admission::originOnlyHeaders());
      client_.clientStream().write(scratch_);
      response_started_ = true;
      client_.responseStarted(head.status);
    }
    phase_ = Phase::Body;
    body_ = BodyFraming::Length;
    remaining_ = 0;
    if (framing_ != ClientFraming::None) {
      if (head.chunked) {
        body_ = BodyFraming::Chunked;
      } else if (head.transfer_encoding || head.content_length < 0) {
        body_ = BodyFraming::UntilClose;
      } else {
        remaining_ = head.content_length;
      }
    }
    if (body_ == BodyFraming::Length && remaining_ == 0) {
      complete();
      return;
    }
    // From here the idle limit applies (the head deadline may be later).
    ensureTimer(last_read_ms_ + bodyIdleLimit());
  }
  if (upstream_ && phase_ == Phase::Body) relayBody();
}

void OriginExchange::clientWritable() {
  if (!paused_ || !upstream_) return;
  paused_ = false;
  upstream_->stream.enableRead();
  relayBody();
}

void OriginExchange::relayBody() {
  Stream& client = client_.clientStream();
  while (upstream_ && phase_ == Phase::Body) {
    if (!detached_ && client.pendingOutput() >= kHighWater) {
      // The client reads slower than the origin sends: stop reading the
      // origin until the client's buffer drains (clientWritable).
      if (!paused_) {
        paused_ = true;
        upstream_->stream.disableRead();
      }
      return;
    }
    Stream& origin = upstream_->stream;
    // What the client's output has room for: it never grows past the mark.
    const size_t room = detached_ ? SIZE_MAX : kHighWater - client.pendingOutput();
    size_t avail = std::min(origin.input().size(), room);
    if (avail == 0) return;
    switch (body_) {
      case BodyFraming::Length: {
        size_t n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(avail), remaining_));
        if (detached_) {
          origin.consume(n);
        } else {
          client.writeFrom(origin, n);
          *sent_ += n;
        }
        remaining_ -= static_cast<int64_t>(n);
        if (remaining_ == 0) {
          complete();
          return;
        }
        break;
      }
      case BodyFraming::UntilClose:
        if (detached_) {
          origin.consume(origin.input().size());
          break;
        }
        if (framing_ == ClientFraming::Chunked) client.writeChunkHeader(avail);
        client.writeFrom(origin, avail);
        if (framing_ == ClientFraming::Chunked) client.write("\r\n", 2);
        *sent_ += avail;
        break;
      case BodyFraming::Chunked: {
        size_t consumed = 0;  // the chunks' data within `room`; their framing on top
        http::ParseStatus s = upstream_->parser.feedChunked(origin.input().data(), avail, &consumed,
                                                            &OriginExchange::onChunk, this);
        origin.consume(consumed);
        if (s == http::ParseStatus::Error) {
          const http::Request& request = client_.request();
          LOG_ERROR("upstream error %s %s: malformed chunked body", request.method.c_str(), request.path.c_str());
          if (detached_)
            finishDetached(false);
          else
            client_.exchangeDone(false);
          return;
        }
        if (s == http::ParseStatus::BodyDone) {
          if (!detached_ && framing_ == ClientFraming::Chunked) client.write("0\r\n\r\n", 5);
          complete();
          return;
        }
        break;
      }
    }
  }
}

void OriginExchange::complete() {
  phase_ = Phase::None;
  const bool body_done = client_.requestBodyDone();
  bool reusable = false;
  if (upstream_) {
    const http::ResponseHead& head = upstream_->parser.response();
    reusable = head.keep_alive && body_ != BodyFraming::UntilClose && body_done && upstream_->stream.input().empty() &&
               upstream_->stream.pendingOutput() == 0;
    if (paused_) upstream_->stream.enableRead();
  }
  if (detached_) {
    finishDetached(reusable);
    return;
  }
  const bool keep_alive = !close_after_ && body_done;
  drop(reusable);
  client_.exchangeDone(keep_alive);
}

// ------------------------------------------------------------ tunnels

void OriginExchange::startTunnel() {
  const http::ResponseHead& head = upstream_->parser.response();
  client_.longLivedOpened();
  scratch_.clear();
  buildClientResponseHead(head, client_.request(), ClientFraming::None, false, *extra_, scratch_,
                          admission::originOnlyHeaders());
  client_.clientStream().write(scratch_);
  response_started_ = true;
  phase_ = Phase::Tunnel;
  armTimer(monotonicMs() + config_.tunnel_timeout);
  client_.responseStarted(101);
  client_.tunnelOpened();
  tunnelPump();
}

void OriginExchange::tunnelPump() {
  if (!upstream_) return;
  last_read_ms_ = monotonicMs();  // traffic either way keeps a tunnel open
  Stream& client = client_.clientStream();
  Stream& origin = upstream_->stream;
  // Each direction moves only while its destination is below the watermark;
  // a full destination stops reading its source until it drains.
  if (origin.pendingOutput() < kHighWater) {
    origin.writeFrom(client, std::min(client.input().size(), kHighWater - origin.pendingOutput()));
    client.enableRead();
  } else {
    client.disableRead();
  }
  if (client.pendingOutput() < kHighWater) {
    const size_t n = std::min(origin.input().size(), kHighWater - client.pendingOutput());
    *sent_ += n;
    client.writeFrom(origin, n);
    origin.enableRead();
  } else {
    origin.disableRead();
  }
}

}  // namespace concert::worker
