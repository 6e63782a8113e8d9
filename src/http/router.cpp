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
constexpr std::string_view kHealthz = "/_room/healthz";
constexpr std::string_view kStats = "/_room/stats";
constexpr std::string_view kCap = "/_room/cap";
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
  if (decoded_path == kHealthz || decoded_path == kStats) return "GET, HEAD";
  if (decoded_path == kCap) return "POST";
  if (decoded_path == kMode) return "GET, HEAD, POST";
  return {};
}

Route route(const config::Config& config, std::string_view method, std::string_view decoded_path,
            bool bypass_client) {
  if (decoded_path == kQueueStatus) {
    if (method == "GET" || method == "HEAD" || method == "OPTIONS") return Route::QueueStatus;
    return Route::MethodNotAllowed;
  }
  // A long-lived stream: HEAD would have no body to describe, OPTIONS no use.
  if (decoded_path == kQueueEvents) return method == "GET" ? Route::QueueEvents : Route::MethodNotAllowed;
  if (decoded_path == kHealthz) return (method == "GET" || method == "HEAD") ? Route::Healthz : Route::MethodNotAllowed;
  if (decoded_path == kStats) return (method == "GET" || method == "HEAD") ? Route::Stats : Route::MethodNotAllowed;
  if (decoded_path == kCap) return method == "POST" ? Route::Cap : Route::MethodNotAllowed;
  if (decoded_path == kMode)
    return (method == "GET" || method == "HEAD" || method == "POST") ? Route::Mode : Route::MethodNotAllowed;
  if (bypass_client || matchesAny(config.bypass, decoded_path)) return Route::Bypass;
  if (matchesAny(config.assets, decoded_path)) return Route::PrivateAsset;
  if (matchesAny(config.asset_public, decoded_path)) return Route::PublicAsset;
  if (matchesAny(config.long_lived, decoded_path)) return Route::LongLived;
  return Route::Page;
}

}  // namespace concert::http
