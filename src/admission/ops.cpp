// The ops endpoints:
// GET /_room/healthz, GET /_room/stats, POST /_room/cap, GET|POST /_room/mode.
//
// Every number comes from the shared segment, so the answer is the same
// whichever worker's connection it lands on. The only writes are the runtime
// page cap (shm::PageSemaphore::setCap) and the room's mode
// (shm::Modes::set), which the segment applies atomically for every worker;
// each stays until a reload changes `cap` or `mode` in the configuration.
#include <openssl/crypto.h>

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "admission/admission.h"
#include "admission/abuse.h"
#include "admission/answers.h"
#include "admission/cap_body.h"
#include "admission/mode_body.h"
#include "common/json.h"
#include "common/log.h"

namespace concert::admission {
namespace {

// Constant-time equality that does not leak where the strings first differ;
// the length of the configured token is not secret enough to hide.
bool tokenMatches(std::string_view presented, std::string_view expected) {
  if (presented.size() != expected.size()) return false;
  return CRYPTO_memcmp(presented.data(), expected.data(), expected.size()) == 0;
}

}  // namespace

std::optional<http::LocalResponse> adminRefusal(const AdmissionContext& context, const http::Request& request) {
  if (request.admin_listener) return std::nullopt;
  const config::Config& config = *context.config;
  if (config.admin_token.empty()) return emptyResponse(404);
  std::string_view presented = request.header("Authorization");
  if (presented.substr(0, 7) == "Bearer ") presented.remove_prefix(7);
  if (!http::hasHeader(request.headers, "Authorization")) return emptyResponse(401);
  if (!tokenMatches(presented, config.admin_token)) {
    strike(context, request, Strike::AdminToken, monotonicMs());
    return emptyResponse(401);
  }
  return std::nullopt;
}

http::LocalResponse handleHealthz(const AdmissionContext&, const http::Request&) {
  http::LocalResponse r;
  r.headers.push_back(http::Header{"Content-Type", std::string(kTextType)});
  r.body = "ok";
  return r;
}

http::LocalResponse handleStats(const AdmissionContext& context, const http::Request&) {
  const config::Config& config = *context.config;
  shm::StatsSnapshot s = context.segment->stats().snapshot();
  // Every counter of the table (shm/counters.h) under its key, and the
  // gauges and settings below; keys in sorted order, as Go's encoding/json
  // writes a map.
  using Value = std::variant<int64_t, uint64_t, double, std::string>;
  std::vector<std::pair<std::string_view, Value>> fields = {
      {"asset_cap", int64_t{s.asset_cap}},
      {"asset_in_flight", s.asset_in_flight},
      {"asset_user_cap_h1", int64_t{config.asset_user_cap_h1}},
      {"asset_user_cap_h2", int64_t{config.asset_user_cap_h2}},
      {"asset_users", s.asset_users},
      {"banned_clients", s.banned_clients},
      {"cap", int64_t{s.cap}},
      {"generation", uint64_t{s.generation}},
      {"live_queue_depth", s.live_queue_depth},
      {"long_lived_cap", int64_t{s.long_lived_cap}},
      {"long_lived_in_use", s.long_lived_in_use},
      {"max_queue_depth", config.max_queue},
      {"occupancy", s.occupancy},
      {"queue_depth", s.queue_depth},
      {"token_ttl", config::goDurationString(config.token_ttl)},
      {"upstream", config.upstream.raw},
      {"utilization", s.utilization},
      {"workers", uint64_t{s.workers}},
  };
  for (shm::Counter c : shm::kAllCounters) fields.emplace_back(shm::counterKey(c), s.counter(c));
  if (s.cluster) {
    // -cluster (shm/cluster.h): cap is the room's, occupancy this host's.
    const shm::ClusterLine& cluster = context.segment->cluster();
    fields.emplace_back("cluster_engine_up", int64_t{s.cluster_engine_up ? 1 : 0});
    fields.emplace_back("cluster_engine_round_trips_total", cluster.roundTrips());
    fields.emplace_back("cluster_hosts", int64_t{s.cluster_hosts});
    fields.emplace_back("cluster_slots_reserved", s.cluster_slots_reserved);
  }
  std::sort(fields.begin(), fields.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  common::JsonObject body;
  for (const auto& [key, value] : fields) std::visit([&body, key](const auto& v) { body.add(key, v); }, value);
  return jsonResponse(200, body.str());
}

http::LocalResponse handleCap(const AdmissionContext& context, const http::Request& request, const std::string& body) {
  if (std::optional<http::LocalResponse> refused = adminRefusal(context, request)) return std::move(*refused);

  CapBody parsed = parseCapBody(body);
  if (!parsed.error.empty()) return jsonResponse(400, common::JsonObject().add("error", parsed.error).str());
  if (parsed.cap < 1) {
    std::string message = "room: invalid capacity " + std::to_string(parsed.cap) + ": must be >= 1";
    return jsonResponse(400, common::JsonObject().add("error", message).str());
  }
  if (context.segment->cluster().enabled()) {
    context.segment->cluster().setCap(parsed.cap);  // the room's: the cluster agent takes it to every host
    LOG_INFO("page cap set to %d via /_room/cap (for every host of the room)", parsed.cap);
  } else {
    context.segment->pages().setCap(parsed.cap);
    LOG_INFO("page cap set to %d via /_room/cap", parsed.cap);
  }
  return jsonResponse(200, common::JsonObject()
                               .add("cap", static_cast<int64_t>(parsed.cap))
                               .add("occupancy", context.segment->pages().occupancy())
                               .str());
}

http::LocalResponse handleMode(const AdmissionContext& context, const http::Request& request, std::string_view body) {
  if (std::optional<http::LocalResponse> refused = adminRefusal(context, request)) return std::move(*refused);
  shm::Modes& modes = context.segment->modes();
  if (request.method == "POST") {
    ModeBody parsed = parseModeBody(body);
    if (!parsed.error.empty()) return jsonResponse(400, common::JsonObject().add("error", parsed.error).str());
    if (modes.set(parsed.mode) != parsed.mode)
      LOG_INFO("room mode set to %s via /_room/mode", std::string(shm::roomModeName(parsed.mode)).c_str());
  }
  return jsonResponse(200, common::JsonObject().add("mode", shm::roomModeName(modes.mode())).str());
}

}  // namespace concert::admission
