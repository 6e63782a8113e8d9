// Routing table, in the order the original routes:
// reserved paths first (exact match only, so "/_room/stats/" is an ordinary
// page), then -bypass-cidrs and -bypass, -assets, -asset-public, -long-lived, then the gated
// catch-all.
// A reserved path with a method it does not serve is answered 405 + Allow
// instead of being proxied (deliberate improvement over the original).
#include "http/router.h"

#include <array>

namespace concert::http {

namespace {

constexpr std::string_view kRoomPrefix = "/_room/";
constexpr std::string_view kQueuePrefix = "/queue/";
constexpr std::string_view kHealthz = "/_room/healthz";

constexpr bool startsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

using L = Listener;
using S = Serve;

// Each method list: HEAD is served wherever GET is, except on a long-lived
// stream (HEAD would have no body to describe) and on /queue/promote (a link
// checker's HEAD must not spend a single-use link).
// clang-format off
constexpr std::array<Endpoint, 23> kEndpoints = {{
  // route                  path                     prefix methods               listener   serve       body   logged
  {Route::QueueStatus,      "/queue/status",         false, "GET, HEAD, OPTIONS", L::Public, S::Local,   false, false},
  {Route::QueueEvents,      "/queue/events",         false, "GET",                L::Public, S::Stream,  false, false},
  {Route::QueuePromote,     "/queue/promote",        false, "GET",                L::Public, S::Local,   false, true},
  {Route::Promote,          "/_room/promote",        false, "POST",               L::Admin,  S::Local,   true,  true},
  {Route::Healthz,          kHealthz,                false, "GET, HEAD",          L::Both,   S::Local,   false, false},
  {Route::Stats,            "/_room/stats",          false, "GET, HEAD",          L::Admin,  S::Local,   false, true},
  {Route::Cap,              "/_room/cap",            false, "POST",               L::Admin,  S::Local,   true,  true},
  {Route::Mode,             "/_room/mode",           false, "GET, HEAD, POST",    L::Admin,  S::Local,   true,  true},
  {Route::QueueList,        "/_room/queue",          false, "GET, HEAD",          L::Admin,  S::Local,   false, true},
  {Route::QueueRemove,      "/_room/queue/",         true,  "DELETE",             L::Admin,  S::Local,   false, true},
  {Route::NotFound,         "",                      false, "",                   L::Public, S::Refused, false, true},
  {Route::Metrics,          "/_room/metrics",        false, "GET, HEAD",          L::Admin,  S::Local,   false, true},
  {Route::Report,           "/_room/report",         false, "GET, HEAD",          L::Admin,  S::Local,   false, true},
  {Route::Dashboard,        "/_room/",               false, "GET, HEAD",          L::Admin,  S::Local,   false, true},
  {Route::DashboardScript,  "/_room/chart.js",       false, "GET, HEAD",          L::Admin,  S::Local,   false, true},
  {Route::History,          "/_room/history",        false, "GET, HEAD",          L::Admin,  S::Local,   false, true},
  {Route::HistoryEvents,    "/_room/history/events", false, "GET",                L::Admin,  S::Stream,  false, true},
  {Route::MethodNotAllowed, "",                      false, "",                   L::Public, S::Refused, false, true},
  {Route::Bypass,           "",                      false, "",                   L::Public, S::Proxied, false, true},
  {Route::PrivateAsset,     "",                      false, "",                   L::Public, S::Proxied, false, false},
  {Route::PublicAsset,      "",                      false, "",                   L::Public, S::Proxied, false, false},
  {Route::LongLived,        "",                      false, "",                   L::Public, S::Proxied, false, true},
  {Route::Page,             "",                      false, "",                   L::Public, S::Proxied, false, true},
}};
// clang-format on

constexpr bool wellFormed() {
  for (size_t i = 0; i < kEndpoints.size(); ++i) {
    const Endpoint& e = kEndpoints[i];
    if (static_cast<size_t>(e.route) != i) return false;  // endpoint() indexes by route
    // Only a path under these prefixes is ever looked up (route()), and only
    // /_room/ paths may be the admin listener's.
    if (!e.path.empty() && !startsWith(e.path, kRoomPrefix) && !startsWith(e.path, kQueuePrefix)) return false;
    if (e.listener != Listener::Public && !startsWith(e.path, kRoomPrefix)) return false;
    if (e.path.empty() != e.methods.empty()) return false;
  }
  return true;
}
static_assert(wellFormed());

// The reserved path `decoded_path` names, if any.
const Endpoint* reserved(std::string_view decoded_path) {
  for (const Endpoint& e : kEndpoints) {
    if (e.path.empty()) continue;
    if (e.prefix ? decoded_path.size() > e.path.size() && startsWith(decoded_path, e.path) : decoded_path == e.path)
      return &e;
  }
  return nullptr;
}

bool matchesAny(const config::PathList& rules, std::string_view path) {
  for (const config::PathRule& rule : rules)
    if (rule.matches(path)) return true;
  return false;
}

}  // namespace

bool Endpoint::serves(std::string_view method) const {
  for (std::string_view rest = methods; !rest.empty();) {
    const size_t comma = rest.find(',');
    if (rest.substr(0, comma) == method) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  }
  return false;
}

std::span<const Endpoint> endpoints() {
  return kEndpoints;
}

const Endpoint& endpoint(Route route) {
  return kEndpoints[static_cast<size_t>(route)];
}

std::string_view allowedMethods(std::string_view decoded_path) {
  const Endpoint* e = reserved(decoded_path);
  return e ? e->methods : std::string_view();
}

Route route(const config::Config& config, std::string_view method, std::string_view decoded_path,
            bool bypass_client, bool admin_listener) {
  const bool room_path = startsWith(decoded_path, kRoomPrefix);
  // A site's own pages never pay for the table.
  const Endpoint* e = room_path || startsWith(decoded_path, kQueuePrefix) ? reserved(decoded_path) : nullptr;
  // -admin-listen: the admin listener serves /_room/ and nothing else; the
  // public one everything but /_room/ (healthz stays, for load balancers).
  const Listener listener = e ? e->listener : room_path ? Listener::Admin : Listener::Public;
  if (admin_listener && listener == Listener::Public) return Route::NotFound;
  if (!admin_listener && listener == Listener::Admin && !config.admin_listen.empty()) return Route::NotFound;
  if (e) return e->serves(method) ? e->route : Route::MethodNotAllowed;
  if (admin_listener) return Route::NotFound;
  if (bypass_client || matchesAny(config.bypass, decoded_path)) return Route::Bypass;
  if (matchesAny(config.assets, decoded_path)) return Route::PrivateAsset;
  if (matchesAny(config.asset_public, decoded_path)) return Route::PublicAsset;
  if (matchesAny(config.long_lived, decoded_path)) return Route::LongLived;
  return Route::Page;
}

}  // namespace concert::http
