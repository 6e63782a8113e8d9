// The ops endpoints:
// GET /_room/healthz, GET /_room/stats, POST /_room/cap.
//
// Every number comes from the shared segment, so the answer is the same
// whichever worker's connection it lands on. The only write is the runtime
// page cap (Segment::setPageCap), which the segment applies atomically for
// every worker; it stays until a reload changes `cap` in the configuration.
#include <openssl/crypto.h>

#include "common/json.h"
#include "common/log.h"
#include "admission/admission.h"
#include "admission/answers.h"
#include "admission/cap_body.h"

namespace concert::admission {
namespace {

// Constant-time equality that does not leak where the strings first differ;
// the length of the configured token is not secret enough to hide.
bool tokenMatches(std::string_view presented, std::string_view expected) {
  if (presented.size() != expected.size()) return false;
  return CRYPTO_memcmp(presented.data(), expected.data(), expected.size()) == 0;
}

}  // namespace

http::LocalResponse handleHealthz(const AdmissionContext&, const http::Request&) {
  http::LocalResponse r;
  r.headers.push_back(http::Header{"Content-Type", std::string(kTextType)});
  r.body = "ok";
  return r;
}

http::LocalResponse handleStats(const AdmissionContext& context, const http::Request&) {
  const config::Config& config = *context.config;
  shm::StatsSnapshot s = context.segment->snapshot();
  // Keys in sorted order, as Go's encoding/json writes a map.
  common::JsonObject body;
  body.add("asset_cap", static_cast<int64_t>(s.asset_cap))
      .add("asset_denied_total", s.asset_denied_total)
      .add("asset_global_throttled_total", s.asset_global_throttled_total)
      .add("asset_in_flight", s.asset_in_flight)
      .add("asset_served_total", s.asset_served_total)
      .add("asset_user_cap_h1", static_cast<int64_t>(config.asset_user_cap_h1))
      .add("asset_user_cap_h2", static_cast<int64_t>(config.asset_user_cap_h2))
      .add("asset_user_throttled_total", s.asset_user_throttled_total)
      .add("asset_users", s.asset_users)
      .add("cap", static_cast<int64_t>(s.cap))
      .add("evicted_total", s.evicted_total)
      .add("generation", s.generation)
      .add("live_queue_depth", s.live_queue_depth)
      .add("max_queue_depth", config.max_queue)
      .add("occupancy", s.occupancy)
      .add("pass_table_full_total", s.pass_table_full_total)
      .add("promoted_total", s.promoted_total)
      .add("queue_depth", s.queue_depth)
      .add("queued_total", s.queued_total)
      .add("reloads_total", s.reloads_total)
      .add("ring_full_total", s.ring_full_total)
      .add("slots_reclaimed_total", s.slots_reclaimed_total)
      .add("timeouts_total", s.timeouts_total)
      .add("token_ttl", config::goDurationString(config.token_ttl))
      .add("upstream", config.upstream.raw)
      .add("utilization", s.utilization)
      .add("worker_restarts_total", s.worker_restarts_total)
      .add("workers", s.workers);
  return jsonResponse(200, body.str());
}

http::LocalResponse handleCap(const AdmissionContext& context, const http::Request& request, const std::string& body) {
  const config::Config& config = *context.config;
  if (config.admin_token.empty()) return emptyResponse(404);

  std::string_view presented = request.header("Authorization");
  if (presented.substr(0, 7) == "Bearer ") presented.remove_prefix(7);
  if (!http::hasHeader(request.headers, "Authorization") || !tokenMatches(presented, config.admin_token))
    return emptyResponse(401);

  CapBody parsed = parseCapBody(body);
  if (!parsed.error.empty()) return jsonResponse(400, common::JsonObject().add("error", parsed.error).str());
  if (parsed.cap < 1) {
    std::string message = "room: invalid capacity " + std::to_string(parsed.cap) + ": must be >= 1";
    return jsonResponse(400, common::JsonObject().add("error", message).str());
  }
  context.segment->setPageCap(parsed.cap);
  LOG_INFO("page cap set to %d via /_room/cap", parsed.cap);
  return jsonResponse(200, common::JsonObject()
                               .add("cap", static_cast<int64_t>(parsed.cap))
                               .add("occupancy", context.segment->pageOccupancy())
                               .str());
}

}  // namespace concert::admission
