// Connections from one worker to the origin: dialing (plain TCP or TLS with
// certificate verification and SNI), and a bounded pool of idle kept-alive
// connections for reuse.
//
// An UpstreamConn is in exactly one of two places: lent to one proxied
// exchange (its stream callbacks point at that client connection), or
// idle in the pool (callbacks point at the pool, which closes it on any byte
// or EOF from the origin, and after kIdleTimeout). Only connections whose
// last response was framed cleanly and that the origin agreed to keep alive
// are given back; everything else is discarded. The origin host is resolved
// once when the worker starts (no blocking DNS per request). Nothing here is
// shared with other processes: a worker that dies takes its sockets with it.
#pragma once

#include <event2/event.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "common/clock.h"
#include "config/config.h"
#include "http/parser.h"
#include "worker/stream.h"

namespace concert::worker {

class UpstreamPool;

struct UpstreamConn {
  UpstreamConn(UpstreamPool* owner, event_base* base)
      : pool(owner), stream(base), parser(http::MessageParser::Kind::Response) {}
  UpstreamPool* pool;
  Stream stream;
  http::MessageParser parser;
  size_t address = 0;   // index of the address dialled
  bool reused = false;  // taken from the idle pool for the current exchange
  Millis idle_since = 0;
};

class UpstreamPool {
 public:
  static constexpr size_t kMaxIdle = 256;
  static constexpr Millis kIdleTimeout = 90'000;
  static constexpr Millis kDialTimeout = 5'000;
  static constexpr Millis kResolveRetry = 5'000;

  UpstreamPool(event_base* base, const config::Upstream& upstream);
  ~UpstreamPool();
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  // Resolves the origin and prepares TLS; false with a reason on failure
  // (requests are then answered 502 until a later resolve succeeds).
  bool init(std::string* error);

  // The most recently used idle connection, or nullptr.
  UpstreamConn* takeIdle();
  // Starts a new connection. The caller sets the stream callbacks before
  // returning to the loop; the connect outcome arrives as Stream::kConnected
  // or an error/timeout event. nullptr (with *error) when it cannot start.
  UpstreamConn* dial(std::string* error);
  // The exchange ended with clean framing and keep-alive: keep it for reuse.
  void giveBack(UpstreamConn* conn);
  // Close and free (safe from inside the connection's own callbacks).
  void discard(UpstreamConn* conn);
  void closeIdle();
  // The origin resolved to several addresses: a connect failure moves new
  // dials to the next one (the caller may retry up to addressCount() times).
  void connectFailed(UpstreamConn* conn);
  size_t addressCount() const { return addrs_.size(); }

 private:
  static void onIdleEvent(Stream& stream, short events, void* arg);
  static void onIdleRead(Stream& stream, void* arg);
  static void onSweep(evutil_socket_t, short, void* arg);
  bool resolve(std::string* error);
  void removeIdle(UpstreamConn* conn);

  event_base* base_;
  const config::Upstream& upstream_;
  struct Address {
    sockaddr_storage addr;
    socklen_t len;
  };
  std::vector<Address> addrs_;
  size_t current_ = 0;  // index of the address new dials use
  Millis last_resolve_ = 0;
  std::string resolve_error_;
  SSL_CTX* ssl_ctx_ = nullptr;
  bool host_is_ip_ = false;
  std::vector<UpstreamConn*> idle_;  // oldest first
  event* sweep_ = nullptr;
};

}  // namespace concert::worker
