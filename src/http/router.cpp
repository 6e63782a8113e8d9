// Routing table, in the order the original routes:
// reserved paths first (exact match only, so "/_room/stats/" is an ordinary
// page), then -bypass-cidrs and -bypass, -assets, -asset-public, -long-lived, then the gated
// catch-all.
// A reserved path with a method it does not serve is answered 405 + Allow
// instead of being proxied (deliberate improvement over the original).
#include "http/router.h"

namespace concert::http {

namespace {

constexpr std::string_view kQueueStatus = "/queue/status";
constexpr std::string_view kQueueEvents = "/queue/events";
constexpr std::string_view kQueuePromote = "/queue/promote";
constexpr std::string_view kPromote = "/_room/promote";
constexpr std::string_view kHealthz = "/_room/healthz";
constexpr std::string_view kStats = "/_room/stats";
constexpr std::string_view kCap = "/_room/cap";
constexpr std::string_view kQueue = "/_room/queue";
constexpr std::string_view kQueueItem = "/_room/queue/";  // + a ticket reference
constexpr std::string_view kRoomPrefix = "/_room/";

bool startsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}
constexpr std::string_view kMetrics = "/_room/metrics";
constexpr std::string_view kReport = "/_room/report";
constexpr std::string_view kDashboard = "/_room/";
constexpr std::string_view kDashboardScript = "/_room/chart.js";
constexpr std::string_view kHistory = "/_room/history";
constexpr std::string_view kHistoryEvents = "/_room/history/events";
constexpr std::string_view kMode = "/_room/mode";

bool matchesAny(const config::PathList& rules, std::string_view path) {
  for (const config::PathRule& rule : rules)
    if (rule.matches(path)) return true;
  return false;
}

}  // namespace

std::string_view allowedMethods(std::string_view decoded_path) {
  if (decoded_path == kQueueStatus) return "GET, HEAD, OPTIONS";
  if (decoded_path == kQueueEvents) return "GET";
  if (decoded_path == kQueuePromote) return "GET";
  if (decoded_path == kPromote) return "POST";
  if (decoded_path == kHealthz || decoded_path == kStats) return "GET, HEAD";
  if (decoded_path == kCap) return "POST";
  if (decoded_path == kQueue) return "GET, HEAD";
  if (startsWith(decoded_path, kQueueItem) && decoded_path.size() > kQueueItem.size()) return "DELETE";
  if (decoded_path == kMetrics || decoded_path == kReport) return "GET, HEAD";
  if (decoded_path == kDashboard || decoded_path == kDashboardScript || decoded_path == kHistory) return "GET, HEAD";
  if (decoded_path == kHistoryEvents) return "GET";
  if (decoded_path == kMode) return "GET, HEAD, POST";
  return {};
}

Route route(const config::Config& config, std::string_view method, std::string_view decoded_path,
            bool bypass_client, bool admin_listener) {
  // -admin-listen: the admin listener serves /_room/ and nothing else; the
  // public one everything but /_room/ (healthz stays, for load balancers).
  const bool room_path = startsWith(decoded_path, kRoomPrefix);
  if (admin_listener && !room_path) return Route::NotFound;
  if (!admin_listener && room_path && !config.admin_listen.empty() && decoded_path != kHealthz)
    return Route::NotFound;
  const bool get_or_head = method == "GET" || method == "HEAD";
  const auto only = [](bool allowed, Route route) { return allowed ? route : Route::MethodNotAllowed; };
  if (decoded_path == kQueueStatus) return only(get_or_head || method == "OPTIONS", Route::QueueStatus);
  // A long-lived stream: HEAD would have no body to describe, OPTIONS no use.
  if (decoded_path == kQueueEvents) return only(method == "GET", Route::QueueEvents);
  // GET only: a HEAD (a link checker) must not spend a single-use link.
  if (decoded_path == kQueuePromote) return only(method == "GET", Route::QueuePromote);
  if (room_path) {  // a site's own pages never pay for the comparisons below
    if (decoded_path == kHealthz) return only(get_or_head, Route::Healthz);
    if (decoded_path == kStats) return only(get_or_head, Route::Stats);
    if (decoded_path == kCap) return only(method == "POST", Route::Cap);
    if (decoded_path == kPromote) return only(method == "POST", Route::Promote);
    if (decoded_path == kQueue) return only(get_or_head, Route::QueueList);
    if (startsWith(decoded_path, kQueueItem) && decoded_path.size() > kQueueItem.size())
      return only(method == "DELETE", Route::QueueRemove);
    if (decoded_path == kMetrics) return only(get_or_head, Route::Metrics);
    if (decoded_path == kReport) return only(get_or_head, Route::Report);
    if (decoded_path == kDashboard) return only(get_or_head, Route::Dashboard);
    if (decoded_path == kDashboardScript) return only(get_or_head, Route::DashboardScript);
    if (decoded_path == kHistory) return only(get_or_head, Route::History);
    if (decoded_path == kHistoryEvents) return only(method == "GET", Route::HistoryEvents);
    if (decoded_path == kMode) return only(get_or_head || method == "POST", Route::Mode);
    if (admin_listener) return Route::NotFound;
  }
  if (bypass_client || matchesAny(config.bypass, decoded_path)) return Route::Bypass;
  if (matchesAny(config.assets, decoded_path)) return Route::PrivateAsset;
  if (matchesAny(config.asset_public, decoded_path)) return Route::PublicAsset;
  if (matchesAny(config.long_lived, decoded_path)) return Route::LongLived;
  return Route::Page;
}

}  // namespace concert::http
