// One request's exchange with the origin, on behalf of a client connection:
// a pooled (or freshly dialled) origin connection, the request head, the
// response-head timer, the response relayed to the client with Concert's
// framing, retry on a dead kept-alive connection or a failed dial, and
// Upgrade tunnels.
//
//   start ──head sent──▶ AwaitHead ──2xx..5xx head──▶ Body ──end of body──▶ done(keep-alive?)
//     │ dial fails           │ 1xx: skipped            │ origin error: done(close)
//     ▼                      │ 101 + Upgrade ─────▶ Tunnel ──either side ends──▶ done(close)
//   failed(502)              │ timer: failed(504)      │ silent -upstream-read-timeout
//                            │                         │ (an event stream: -tunnel-timeout): done(close)
//                            │ error: retry once (bodiless, reused conn) / next address / failed(502)
//
// Detached: the origin has the whole request and keeps working on it even
// when its client is gone (PHP does), so its page slot must stay taken until
// the origin is done. When the client leaves (detach()) or gets a 504 (the
// head timer), the exchange goes on without it: the rest of the response is
// read and dropped, for at most -upstream-read-timeout of silence, then the
// origin connection is pooled or closed and Client::originReleased() says the
// slot may go. A request the origin has not received whole, a tunnel and an
// event stream are cut on both sides at once instead.
//
// The request body is the client connection's to pump: it writes into
// origin() and calls requestSent() when the last byte is queued (that arms
// the response-head timer). The exchange writes the response to the client
// stream directly and reports back through Client: a failure before any
// response byte (the connection answers 502/504 itself), the origin's
// response head before anything of it goes out (the client's guard may
// change the headers added to it), the response head going out, the end of
// the exchange, a tunnel. The headers the origin addresses to Concert never
// reach the client (admission::originOnlyHeaders). Framing is always
// Concert's decision: a failure after the response head closes the client
// connection, so a truncated body is never mistaken for a whole one.
#pragma once

#include <event2/event.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.h"
#include "http/request.h"
#include "worker/rewrite.h"
#include "worker/stream.h"
#include "worker/timeouts.h"

namespace concert::worker {

class UpstreamPool;
struct UpstreamConn;

// What went wrong with the origin, as counted (upstream_errors_*_total).
enum class OriginError {
  Connect,  // an attempt to open an origin connection failed (each address tried)
  Timeout,  // no response head within -upstream-timeout: the client gets 504
  Reset,    // an open origin connection broke before or during a response a client waits for
};

// Buffer limits (bytes): reading from one side stops while the other side's
// output holds kHighWater, and resumes below kLowWater. A relay moves at
// most what the destination's output has room for under kHighWater, and an
// origin connection reads at most kHighWater ahead of it, so a response
// toward a client that stopped reading holds one block (stream.h) on each
// side: about 32 KiB in all, whatever the response's size (HAProxy's
// tune.bufsize is the same 16 KiB per direction).
constexpr size_t kHighWater = 16 * 1024;
constexpr size_t kLowWater = 8 * 1024;
// A connection waiting in line reads this far ahead at most (connection.h).
constexpr size_t kWaitingReadAhead = 4 * 1024;

class OriginExchange {
 public:
  // The client connection's side of the exchange.
  class Client {
   public:
    virtual const http::Request& request() const = 0;
    virtual Stream& clientStream() = 0;
    virtual bool requestBodyDone() const = 0;
    virtual bool draining() const = 0;
    // The origin can take more request body.
    virtual void originWritable() = 0;
    // The response head went out to the client.
    virtual void responseStarted(int status) = 0;
    // The exchange is over: the response was relayed whole (`keep_alive`:
    // the client connection may carry another request) or cut off after its
    // head (the client connection must close).
    virtual void exchangeDone(bool keep_alive) = 0;
    // Nothing reached the client: answer `status` (502 or 504) locally.
    virtual void exchangeFailed(int status) = 0;
    // 101 Switching Protocols went out: the connection is now a tunnel.
    virtual void tunnelOpened() = 0;
    // The response is long-lived (a 101 tunnel or an event stream): called
    // before responseStarted().
    virtual void longLivedOpened() = 0;
    // A detached exchange is over: the origin connection is closed or back
    // in the pool, the request's slots may be returned.
    virtual void originReleased() = 0;
    // The origin was silent too long after its head (UpstreamRead) or a
    // tunnel had no traffic (Tunnel): counted and logged by the client; the
    // exchange then ends with exchangeDone(false).
    virtual void timedOut(TimeoutPhase phase) = 0;
    // Something unexpected was thrown in an origin callback: close at once.
    virtual void abortConnection(const char* what) = 0;
    // The origin's final response head (101, or 200..599) arrived: called
    // once, right after originAnswered() and before anything of it goes out,
    // also for a detached exchange. The `extra` headers given to start() may
    // be changed here; they are read after it.
    virtual void responseHead(const http::ResponseHead& head, bool detached) = 0;
    // The origin's final response head arrived (101, or 200..599; an interim
    // 100/103 does not count), `micros` after the whole request was queued
    // toward the origin (requestSent(); 0 if the head came first). Also for a
    // detached exchange: the origin answered, whoever is left to hear it.
    virtual void originAnswered(int status, int64_t micros) = 0;
    // An origin error, once where it happened (see OriginError); a kept-alive
    // connection found closed and retried is not one.
    virtual void originFailed(OriginError kind) = 0;

   protected:
    ~Client() = default;
  };

  OriginExchange(event_base* base, UpstreamPool& pool, const config::Config& config, Client& client);
  ~OriginExchange();
  OriginExchange(const OriginExchange&) = delete;
  OriginExchange& operator=(const OriginExchange&) = delete;

  bool init();  // false: out of memory for the timer

  // Connect and queue the request head; `extra` (the guard's Set-Cookie, as
  // Client::responseHead leaves it) is added to the response head, and every response byte relayed is added to
  // `*sent` (both must outlive the exchange). False when it failed at once
  // (the client was told through exchangeFailed).
  bool start(const http::Headers& extra, uint64_t* sent);
  Stream* origin();    // where the request body goes; null when none
  void requestSent();  // the whole request is queued: the response-head timer starts
  void clientWritable();  // the client's buffer drained: relay more
  void tunnelPump();      // move tunnel bytes both ways, within the watermarks
  // End the exchange; the origin connection goes back to the pool only when
  // `reusable` (clean framing, keep-alive, nothing left in either direction).
  // Does nothing to a detached exchange.
  void drop(bool reusable = false);
  // The client is gone: go on without it if the origin has the whole
  // request (true: Client::originReleased() follows, possibly before this
  // returns); false: nothing to wait for, drop() it.
  bool detach();
  bool detached() const { return detached_; }
  // Ends a detached exchange now (the worker stops): originReleased() follows.
  void abandon();

  bool responseStarted() const { return response_started_; }

 private:
  enum class Phase { None, AwaitHead, Body, Tunnel };
  enum class BodyFraming { Length, Chunked, UntilClose };

  static void onRead(Stream& stream, void* arg);
  static void onWrite(Stream& stream, void* arg);
  static void onEvent(Stream& stream, short events, void* arg);
  static void onResponseTimer(evutil_socket_t, short, void* arg);
  static void onChunk(void* arg, const char* data, size_t len);
  void onTimer(Millis now);
  void headTimedOut();
  void finishDetached(bool reusable);
  void armTimer(Millis deadline);
  void ensureTimer(Millis deadline);  // fires no later than `deadline`
  Millis bodyIdleLimit() const;

  bool connect(bool allow_idle);
  void releaseOrigin(bool reusable);
  void readResponse();
  void originEvent(short events);
  void relayBody();
  void complete();
  void fail(int status, const std::string& reason);
  void startTunnel();
  void armResponseTimer();

  event_base* base_;
  UpstreamPool& pool_;
  const config::Config& config_;
  Client& client_;
  UpstreamConn* upstream_ = nullptr;
  event* response_timer_ = nullptr;
  const http::Headers* extra_ = nullptr;
  Phase phase_ = Phase::None;
  BodyFraming body_ = BodyFraming::Length;
  ClientFraming framing_ = ClientFraming::None;
  int64_t remaining_ = 0;
  bool retried_ = false;
  size_t dial_failures_ = 0;
  bool close_after_ = false;
  bool paused_ = false;
  bool response_started_ = false;
  bool request_sent_ = false;  // the whole request is queued toward the origin
  bool detached_ = false;
  bool event_stream_ = false;  // the response is text/event-stream
  Millis last_read_ms_ = 0;    // the origin's last bytes (a tunnel: either side's)
  Millis timer_at_ = 0;        // when the armed timer fires; 0 = not armed
  int64_t sent_us_ = 0;        // monotonicUs() at requestSent(); 0 = not yet
  uint64_t* sent_ = nullptr;
  std::string scratch_;
};

}  // namespace concert::worker
