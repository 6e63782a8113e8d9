// Asking Redis Sentinels where the engine is (sentinel.h).
#include "cluster/sentinel.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

namespace concert::cluster {

namespace {

timeval toTimeval(Millis ms) {
  ms = std::max<Millis>(ms, 1);
  return timeval{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
}

struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};

bool isText(const redisReply* r) {
  return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

// One sentinel's answer: the master's address, or why there is none.
SentinelAnswer askOne(const config::ClusterEndpoint& sentinel, const std::string& master, Millis timeout) {
  SentinelAnswer out;
  const std::string who = "sentinel " + endpointText(sentinel.host, sentinel.port);
  const Millis deadline = monotonicMs() + timeout;
  std::unique_ptr<redisContext, ContextFree> c(
      redisConnectWithTimeout(sentinel.host.c_str(), sentinel.port, toTimeval(timeout)));
  if (!c || c->err) {
    out.error = who + ": " + (c ? c->errstr : "out of memory");
    return out;
  }
  if (redisSetTimeout(c.get(), toTimeval(deadline - monotonicMs())) != REDIS_OK) {
    out.error = who + ": " + c->errstr;
    return out;
  }
  std::unique_ptr<redisReply, ReplyFree> reply(static_cast<redisReply*>(
      redisCommand(c.get(), "SENTINEL get-master-addr-by-name %b", master.data(), master.size())));
  if (!reply) {
    out.error = who + ": " + (c->err ? c->errstr : "no answer");
    return out;
  }
  const redisReply* r = reply.get();
  if (r->type == REDIS_REPLY_ERROR) {
    out.error = who + ": " + std::string(r->str, r->len);
    return out;
  }
  if (r->type == REDIS_REPLY_NIL) {
    out.error = who + ": does not know " + master;
    return out;
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !isText(r->element[0]) || !isText(r->element[1])) {
    out.error = who + ": unexpected answer";
    return out;
  }
  const std::string host(r->element[0]->str, r->element[0]->len);
  const std::string port(r->element[1]->str, r->element[1]->len);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (host.empty() || port.empty() || *end != '\0' || p < 1 || p > 65535) {
    out.error = who + ": unexpected address " + host + " " + port;
    return out;
  }
  out.ok = true;
  out.host = host;
  out.port = static_cast<uint16_t>(p);
  return out;
}

}  // namespace

std::string endpointText(const std::string& host, uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

SentinelAnswer askSentinels(const std::vector<config::ClusterEndpoint>& sentinels, const std::string& master,
                            Millis timeout) {
  SentinelAnswer out;
  for (const config::ClusterEndpoint& sentinel : sentinels) {
    SentinelAnswer one = askOne(sentinel, master, timeout);
    if (one.ok) return one;
    out.error += (out.error.empty() ? "" : "; ") + one.error;
  }
  if (out.error.empty()) out.error = "no sentinel listed";
  return out;
}

}  // namespace concert::cluster
