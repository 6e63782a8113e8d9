// Per-client limits, strikes and bans; see abuse.h.
#include "admission/abuse.h"

#include <cstring>

#include "admission/answers.h"
#include "admission/cookies.h"
#include "admission/pass.h"
#include "admission/priority.h"
#include "admission/room_pass.h"
#include "common/json.h"
#include "common/log.h"

namespace concert::admission {

bool strikable(const config::Config& config, const http::Request& request) {
  return config.abuse_threshold > 0 && request.client_keyed && !request.abuse_exempt;
}

namespace {

std::string durationText(Millis ms) {
  const int64_t s = ms / 1000;
  if (s % 3600 == 0) return std::to_string(s / 3600) + "h";
  if (s % 60 == 0) return std::to_string(s / 60) + "m";
  return std::to_string(s) + "s";
}

}  // namespace

void strike(const AdmissionContext& context, const http::Request& request, Strike weight, Millis now) {
  const config::Config& config = *context.config;
  if (!strikable(config, request)) return;
  shm::AbusePolicy policy;
  policy.threshold = config.abuse_threshold;
  policy.ban = config.abuse_ban;
  const shm::StrikeOutcome out =
      context.segment->strike(request.client_key.data(), static_cast<int>(weight), policy, now, context.slot);
  if (out.banned_now) {
    const std::string& who = request.client_ip.empty() ? request.peer_ip : request.client_ip;
    LOG_WARN("client %s banned for %s after %lld strikes in 10m (%lld tickets left the line)", who.c_str(),
             durationText(out.ban_for).c_str(), static_cast<long long>(out.strikes),
             static_cast<long long>(out.tickets_retired));
  }
}

bool banned(const AdmissionContext& context, const http::Request& request, Millis now) {
  if (!strikable(*context.config, request)) return false;
  const shm::ClusterLine& cluster = context.segment->cluster();
  return context.segment->clients().banned(request.client_key.data(), now) ||
         (cluster.enabled() && cluster.bannedRemotely(request.client_key.data(), unixSeconds()));
}

http::LocalResponse banResponse() {
  http::LocalResponse r;
  r.status = 403;
  r.headers.push_back(http::Header{"Content-Type", "text/plain; charset=utf-8"});
  r.headers.push_back(http::Header{"Cache-Control", "no-store"});
  r.body = "Forbidden\n";
  return r;
}

std::optional<shm::ClientTicketing> ticketing(const AdmissionContext& context, const http::Request& request) {
  const config::Config& config = *context.config;
  if (!request.client_keyed || request.abuse_exempt) return std::nullopt;
  shm::ClientTicketing t;
  std::memcpy(t.key, request.client_key.data(), sizeof t.key);
  t.max_per_client = config.max_tickets_per_client;
  return t;
}

http::LocalResponse ticketLimitResponse(const config::Config& config, const http::Request& request) {
  http::LocalResponse r;
  r.status = 429;
  r.headers.push_back(http::Header{"Cache-Control", "no-store"});
  r.headers.push_back(http::Header{"Retry-After", std::to_string(config.retry_after)});
  if (config.api_json && !wantsHtml(request)) {
    r.headers.push_back(http::Header{"Content-Type", std::string(kJsonType)});
    r.body = common::JsonObject()
                 .add("error", "too many places in line for one client")
                 .add("queued", false)
                 .add("retry_after_seconds", config.retry_after)
                 .str();
  } else {
    r.headers.push_back(http::Header{"Content-Type", std::string(kTextType)});
    r.body = "Too many places in line from your address.\n";
  }
  return r;
}

}  // namespace concert::admission
