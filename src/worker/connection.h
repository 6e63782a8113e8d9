// One client connection: an explicit state machine on a Stream (stream.h).
//
//   ReadingHead ──head──▶ (route) ──local──────────────▶ respond ─┐
//        ▲                   │ guard: Wait ─▶ Parked ─▶ admit()    │
//        │                   │ /queue/events ─▶ EventStream ─ end ─┤
//        │                   │ Proceed / bypass                    │
//        │                   ▼                                     │
//        │               Proxying ──101──▶ Tunnel                  │
//        │                   │ response complete                   │
//        └── keep-alive ◀────┴──────────────────────────◀──────────┘
//                            └─ close ─▶ Closing (flush) ─▶ Lingering ─▶ freed
//
// Routing is the router's endpoint table (http/router.h): a local endpoint
// is answered by admission, a POST's body collected first where the table
// says so; an event stream goes to EventStream; a proxied route gets its
// guard (admission::makeGuard), which lasts the whole exchange.
//
// EventStream: a waiting page's GET /queue/events, answered locally for as
// long as its ticket waits (or the dashboard's GET /_room/history/events,
// for as long as the dashboard is open). An EventStreamWriter
// (event_stream_writer.h) frames what the feed says; the stream ends
// (terminating chunk, then keep-alive or close) after `ready`, for a cookie
// refresh, or on drain. The worker files it by ticket
// (ConnectionHost::addStream) and calls recheckStream().
//
// The request body is a RequestBody (request_body.h): dropped, collected for
// a local endpoint, or pumped to the origin.
//
// Every phase is bounded (timeouts.h): one timer per connection, armed
// lazily — a transition re-arms it only when its deadline comes before the
// armed one, and when it fires checkTimeouts() acts on a passed deadline or
// re-arms for the next, so a busy connection rarely touches it.
//
// Requests on one connection are handled strictly one at a time; pipelined
// bytes wait in the input buffer (bounded by the read watermark). A
// connection waiting in line (Parked, EventStream) reads at most
// kWaitingReadAhead bytes ahead, one request head, in a small buffer; one
// that sends more is closed and counted (connections_flooded_total), so a
// waiting visitor costs a few KiB whatever it sends. Its own request's body,
// not read yet, is bounded by the usual mark instead. Every way a
// request ends goes through endRequest() or close(), which call
// releaseSlots(): the guard's release() runs exactly once. Memory is freed on
// the next loop turn after close(), so a callback that closed the
// connection can still look at closed_ safely. A connection whose client is
// gone while the origin still works on its whole request stays (closed_, its
// slots held) until the detached exchange reports originReleased(). The
// origin side is an
// OriginExchange (origin_exchange.h), which borrows an origin connection from
// the worker's pool and reports back through OriginExchange::Client. The
// connection reaches its worker only through ConnectionHost (host.h).
#pragma once

#include <event2/event.h>

#include <list>
#include <memory>
#include <string>
#include <string_view>

#include "admission/guard.h"
#include "common/clock.h"
#include "http/parser.h"
#include "http/request.h"
#include "http/response.h"
#include "http/router.h"
#include "worker/event_stream_writer.h"
#include "worker/host.h"
#include "worker/origin_exchange.h"
#include "worker/request_body.h"
#include "worker/stream.h"

namespace concert::worker {

constexpr Millis kLingerTimeout = 2'000;

class ClientConnection final : private OriginExchange::Client {
 public:
  // `admin_listener`: accepted on -admin-listen (no PROXY header there; the
  // admin endpoints need no token).
  ClientConnection(ConnectionHost& host, evutil_socket_t fd, std::string peer_ip, bool admin_listener = false);
  ~ClientConnection();
  ClientConnection(const ClientConnection&) = delete;
  ClientConnection& operator=(const ClientConnection&) = delete;

  bool start();  // false: could not set up (fd closed)

  // Worker-driven.
  bool isParked() const { return state_ == State::Parked && !closed_; }
  void recheckAdmission(Millis now);
  // An open event stream: ask admission what to send now; `tick` (the
  // worker's one-second walk) also sends the keep-alive comment when due.
  // True when a position event went out (`may_send_position`: the walk's
  // per-tick allowance is not used up).
  bool recheckStream(Millis now, bool tick, bool may_send_position = true);
  void closeIfIdle();  // drain: close a connection between requests
  void abort();        // grace ran out: release and close now

  // The worker's bookkeeping: where this connection sits in its list of
  // parked requests (when park_listed).
  std::list<ClientConnection*>::iterator park_pos;
  bool park_listed = false;

 private:
  enum class State { ReadingHead, Parked, LocalBody, EventStream, Proxying, Tunnel, Closing, Lingering };

  static void onClientRead(Stream& stream, void* arg);
  static void onClientWrite(Stream& stream, void* arg);
  static void onClientEvent(Stream& stream, short events, void* arg);
  static void onTimer(evutil_socket_t, short, void* arg);

  // OriginExchange::Client
  const http::Request& request() const override { return request_; }
  Stream& clientStream() override { return client_; }
  bool requestBodyDone() const override { return body_.done(); }
  bool draining() const override { return host_.draining(); }
  void originWritable() override;
  void responseStarted(int status) override { status_ = status; }
  void exchangeDone(bool keep_alive) override { endRequest(keep_alive); }
  void exchangeFailed(int status) override;
  void tunnelOpened() override;
  void longLivedOpened() override;
  void originReleased() override;
  void timedOut(TimeoutPhase phase) override;
  void abortConnection(const char* what) override;
  void responseHead(const http::ResponseHead& head, bool detached) override;
  void originAnswered(int status, int64_t micros) override;
  void originFailed(OriginError kind) override;
  void fail(const char* what);  // an exception in a client-side callback: log, close

  void processInput();
  bool readProxyHeader();  // -proxy-protocol: false while it is incomplete, or when it closed the connection
  bool identifyClient();   // the request's client (address, key, exemptions); true: in -bypass-cidrs
  void keyPeer();          // a head refused before dispatch: its untrusted peer is the client
  void dispatch();
  void runGuard(Millis now);
  void respondLocal(http::LocalResponse&& response, bool close);
  void failRequest(int status);  // a refused request: answer and close
  void pumpBody();
  void bodyFinished();
  void collectBody();  // an admin POST: its body is read whole, then answered
  void endRequest(bool keep_alive);
  void releaseSlots();  // the guard's; deferred while the exchange is detached
  void logRequest();
  void close();
  void startClosing();
  void checkTimeouts(Millis now);
  void ensureTimer(Millis deadline);  // the timer fires no later than `deadline`
  void armTimer(Millis deadline);
  void startProxy();
  void openEvents(Millis now);
  void endStream();
  // Waiting in line: the small read-ahead, or back to the usual mark.
  void waitReads();
  void normalReads();
  // A waiting connection sent more than a request head ahead: closed, counted.
  bool flooded();

  ConnectionHost& host_;
  int fd_;
  Stream client_;
  event* timer_ = nullptr;
  Millis timer_at_ = 0;     // when timer_ fires; 0 = not armed
  Millis phase_since_ = 0;  // ReadingHead: head start or idle since; Lingering: its start
  http::MessageParser parser_;
  State state_ = State::ReadingHead;
  bool closed_ = false;
  bool in_process_ = false;
  bool awaiting_proxy_header_ = false;  // -proxy-protocol: no byte of HTTP before the PROXY header

  // current request
  http::Request& request_;
  http::Route route_ = http::Route::Page;
  std::unique_ptr<admission::RequestGuard> guard_;  // a proxied route's, until the request ends
  admission::Outcome outcome_ = admission::Outcome::Local;
  http::Headers extra_headers_;  // the guard's headers for a proxied response, as onResponseHead leaves them
  bool log_request_ = false;
  int status_ = 0;
  uint64_t bytes_sent_ = 0;
  Millis started_ms_ = 0;
  time_t started_wall_ = 0;
  Millis park_deadline_ = 0;
  bool idle_ = true;  // between requests, no byte of the next one read yet

  RequestBody body_;
  EventStreamWriter stream_;  // GET /queue/events, GET /_room/history/events

  OriginExchange exchange_;
  std::string scratch_;
};

}  // namespace concert::worker
