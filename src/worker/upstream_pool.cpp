// Origin connections of one worker; see upstream_pool.h for the ownership
// rules. TLS: system CA store, peer verification on, host name (or IP)
// checked by OpenSSL, SNI for names.
#include "worker/upstream_pool.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"

namespace concert::worker {

UpstreamPool::UpstreamPool(event_base* base, const config::Upstream& upstream) : base_(base), upstream_(upstream) {}

UpstreamPool::~UpstreamPool() {
  closeIdle();
  if (sweep_) event_free(sweep_);
  if (ssl_ctx_) SSL_CTX_free(ssl_ctx_);
}

bool UpstreamPool::init(std::string* error) {
  if (!sweep_) {
    sweep_ = event_new(base_, -1, EV_PERSIST, &UpstreamPool::onSweep, this);
    timeval tv{10, 0};
    event_add(sweep_, &tv);
  }
  if (upstream_.https && !ssl_ctx_) {
    ssl_ctx_ = SSL_CTX_new(TLS_client_method());
    if (!ssl_ctx_) {
      error->assign("cannot create TLS context");
      return false;
    }
    SSL_CTX_set_default_verify_paths(ssl_ctx_);
    SSL_CTX_set_verify(ssl_ctx_, SSL_VERIFY_PEER, nullptr);
    SSL_CTX_set_min_proto_version(ssl_ctx_, TLS1_2_VERSION);
  }
  if (resolve(error)) return true;
  resolve_error_ = *error;
  return false;
}

bool UpstreamPool::resolve(std::string* error) {
  last_resolve_ = monotonicMs();
  in6_addr probe6;
  in_addr probe4;
  host_is_ip_ = inet_pton(AF_INET, upstream_.host.c_str(), &probe4) == 1 ||
                inet_pton(AF_INET6, upstream_.host.c_str(), &probe6) == 1;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  addrinfo* res = nullptr;
  std::string port = std::to_string(upstream_.port);
  int rc = getaddrinfo(upstream_.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || !res) {
    error->assign("resolve ").append(upstream_.host).append(": ").append(gai_strerror(rc));
    return false;
  }
  addrs_.clear();
  current_ = 0;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    Address a{};
    std::memcpy(&a.addr, ai->ai_addr, ai->ai_addrlen);
    a.len = ai->ai_addrlen;
    addrs_.push_back(a);
  }
  freeaddrinfo(res);
  return !addrs_.empty();
}

UpstreamConn* UpstreamPool::takeIdle() {
  if (idle_.empty()) return nullptr;
  UpstreamConn* conn = idle_.back();
  idle_.pop_back();
  conn->reused = true;
  return conn;
}

UpstreamConn* UpstreamPool::dial(std::string* error) {
  // A failed start-up resolve is retried at most every kResolveRetry: the
  // blocking lookup happens only while the name does not resolve at all
  // (every request fails then anyway), never per request once it has.
  if (addrs_.empty()) {
    Millis now = monotonicMs();
    if (now - last_resolve_ < kResolveRetry) {
      *error = resolve_error_;
      return nullptr;
    }
    last_resolve_ = now;
    if (!resolve(error)) {
      resolve_error_ = *error;
      return nullptr;
    }
  }
  SSL* ssl = nullptr;
  if (upstream_.https) {
    ssl = SSL_new(ssl_ctx_);
    if (!ssl) {
      *error = "cannot create TLS session";
      return nullptr;
    }
    if (host_is_ip_) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), upstream_.host.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl, upstream_.host.c_str());
      X509_VERIFY_PARAM_set_hostflags(SSL_get0_param(ssl), X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      X509_VERIFY_PARAM_set1_host(SSL_get0_param(ssl), upstream_.host.c_str(), 0);
    }
  }
  auto* conn = new UpstreamConn(this, base_);
  conn->address = current_ % addrs_.size();
  Address& a = addrs_[conn->address];
  if (!conn->stream.connect(reinterpret_cast<sockaddr*>(&a.addr), a.len, ssl, kDialTimeout, error)) {
    delete conn;  // the stream owned (and freed) the TLS session
    return nullptr;
  }
  return conn;
}

void UpstreamPool::connectFailed(UpstreamConn* conn) {
  if (!addrs_.empty() && conn->address == current_ % addrs_.size()) current_ = (current_ + 1) % addrs_.size();
}

void UpstreamPool::giveBack(UpstreamConn* conn) {
  if (idle_.size() >= kMaxIdle) {
    // The oldest idle connection makes room: recent ones are likelier alive.
    UpstreamConn* oldest = idle_.front();
    idle_.erase(idle_.begin());
    discard(oldest);
  }
  conn->reused = false;
  conn->idle_since = monotonicMs();
  conn->parser.reset();
  conn->stream.setCallbacks(&UpstreamPool::onIdleRead, nullptr, &UpstreamPool::onIdleEvent, conn);
  conn->stream.enableRead();
  idle_.push_back(conn);
}

void UpstreamPool::discard(UpstreamConn* conn) {
  // Deleting the stream from inside one of its callbacks is safe: it notices
  // and touches nothing afterwards (stream.h).
  delete conn;
}

void UpstreamPool::removeIdle(UpstreamConn* conn) {
  auto it = std::find(idle_.begin(), idle_.end(), conn);
  if (it != idle_.end()) idle_.erase(it);
}

void UpstreamPool::closeIdle() {
  std::vector<UpstreamConn*> all;
  all.swap(idle_);
  for (UpstreamConn* conn : all) discard(conn);
}

// An idle connection must stay silent: data or EOF means it is not reusable.
void UpstreamPool::onIdleRead(Stream&, void* arg) {
  auto* conn = static_cast<UpstreamConn*>(arg);
  UpstreamPool* pool = conn->pool;
  pool->removeIdle(conn);
  pool->discard(conn);
}

void UpstreamPool::onIdleEvent(Stream&, short, void* arg) {
  auto* conn = static_cast<UpstreamConn*>(arg);
  UpstreamPool* pool = conn->pool;
  pool->removeIdle(conn);
  pool->discard(conn);
}

void UpstreamPool::onSweep(evutil_socket_t, short, void* arg) {
  auto* pool = static_cast<UpstreamPool*>(arg);
  Millis now = monotonicMs();
  while (!pool->idle_.empty() && now - pool->idle_.front()->idle_since > kIdleTimeout) {
    UpstreamConn* conn = pool->idle_.front();
    pool->idle_.erase(pool->idle_.begin());
    pool->discard(conn);
  }
}

}  // namespace concert::worker
