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

shm::StatsSnapshot roomStats(const AdmissionContext& context) {
  shm::StatsSnapshot s = context.segment->stats().snapshot();
  // The Setting gauges (shm/gauges.h): the configuration in effect.
  const config::Config& config = *context.config;
  s.max_queue_depth = config.max_queue;
  s.asset_user_cap_h1 = config.asset_user_cap_h1;
  s.asset_user_cap_h2 = config.asset_user_cap_h2;
  s.token_ttl = config.token_ttl;
  return s;
}

namespace {

// A gauge's /_room/stats value by its kind (shm/gauges.h).
using StatsValue = std::variant<int64_t, uint64_t, double, std::string>;

template <shm::GaugeKind kKind, typename T>
StatsValue gaugeStatsValue(T value) {
  if constexpr (kKind == shm::GaugeKind::Duration)
    return config::goDurationString(value);
  else if constexpr (kKind == shm::GaugeKind::Flag)
    return int64_t{value ? 1 : 0};
  else
    return value;
}

}  // namespace

http::LocalResponse handleStats(const AdmissionContext& context, const http::Request&) {
  const config::Config& config = *context.config;
  const shm::StatsSnapshot s = roomStats(context);
  // Every gauge (shm/gauges.h) and counter (shm/counters.h) of the tables
  // under its key, and the upstream; keys in sorted order, as Go's
  // encoding/json writes a map.
  std::vector<std::pair<std::string_view, StatsValue>> fields;
  fields.reserve(shm::kCounterCount + 64);
  fields.emplace_back("upstream", config.upstream.raw);
#define CONCERT_GAUGE_STATS(key, kind, source, metric, help)    \
  if (shm::gaugeReported(shm::GaugeSource::source, s.cluster)) \
    fields.emplace_back(#key, gaugeStatsValue<shm::GaugeKind::kind>(s.key));
  CONCERT_GAUGES(CONCERT_GAUGE_STATS)
#undef CONCERT_GAUGE_STATS
  for (shm::Counter c : shm::kAllCounters) fields.emplace_back(shm::counterKey(c), s.counter(c));
  // -cluster (shm/cluster.h): the engine's round trips, counted by the agent.
  if (s.cluster) fields.emplace_back("cluster_engine_round_trips_total", context.segment->cluster().roundTrips());
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
    // The operator takes the cap over: -adaptive stops (before the cap is
    // set, so that it cannot overwrite this one).
    const bool adaptive = context.config->adaptive && !context.segment->capacity().adaptiveStopped();
    context.segment->capacity().stopAdaptive();
    context.segment->pages().setCap(parsed.cap);
    LOG_INFO("page cap set to %d via /_room/cap%s", parsed.cap,
             adaptive ? "; -adaptive stops until a reload that says adaptive" : "");
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
