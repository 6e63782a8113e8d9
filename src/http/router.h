// Routing of a parsed request head, from one table of endpoints (every
// Route, with its path, methods, listener and how it is served), in this
// order:
//   with -admin-listen, /_room/ paths but healthz on the public listener, and
//   anything but /_room/ on the admin one -> 404
//   reserved paths (/queue/status, /queue/events, /queue/promote, /_room/healthz, /_room/stats,
//   /_room/cap, /_room/mode, /_room/promote, /_room/metrics, /_room/report, /_room/queue, /_room/queue/<ticket>,
//   the dashboard's /_room/, /_room/chart.js, /_room/history and /_room/history/events)
//     -> local handlers; a wrong method -> 405 with Allow
//   a client in -bypass-cidrs, or -bypass -> proxy, no guard;  -assets -> private asset guard;
//   -asset-public -> public asset guard;  -long-lived -> page admission, then
//   the long-lived cap once the origin's tunnel or event stream opens;
//   everything else -> page admission.
// Matching uses the decoded path, after the parser removed its dot-segments
// (http/path.h), so a rule sees the path the origin is sent; the query is
// ignored.
#pragma once

#include <span>
#include <string_view>

#include "config/config.h"

namespace concert::http {

enum class Route {
  QueueStatus,       // GET or OPTIONS /queue/status
  QueueEvents,       // GET /queue/events (the waiting page's event stream)
  QueuePromote,      // GET /queue/promote?ticket=&exp=&sig= (a payment page's signed link; not HEAD)
  Promote,           // POST /_room/promote (admin)
  Healthz,           // GET /_room/healthz
  Stats,             // GET /_room/stats
  Cap,               // POST /_room/cap
  Mode,              // GET, HEAD or POST /_room/mode
  QueueList,         // GET /_room/queue?limit=N (admin)
  QueueRemove,       // DELETE /_room/queue/<ticket> (admin)
  NotFound,          // /_room/ on the public listener with -admin-listen, anything else on the admin one
  Metrics,           // GET /_room/metrics
  Report,            // GET /_room/report (admin)
  Dashboard,         // GET /_room/ (admin): the dashboard page
  DashboardScript,   // GET /_room/chart.js (admin): the charting library it draws with
  History,           // GET /_room/history (admin): the last hour's samples as JSON
  HistoryEvents,     // GET /_room/history/events (admin): each new sample, as an event stream
  MethodNotAllowed,  // a reserved path with another method (405 + Allow)
  Bypass,
  PrivateAsset,
  PublicAsset,
  LongLived,  // -long-lived: a page whose slot is returned once its tunnel or stream opens
  Page,
};

// Which listener serves a path when -admin-listen is set (without it the one
// listener serves everything).
enum class Listener {
  Public,  // the site and /queue/: 404 on the admin listener
  Admin,   // /_room/: 404 on the public listener
  Both,    // /_room/healthz, for load balancers
};

// How the data path serves a route.
enum class Serve {
  Local,    // answered at once by admission (admission::answer), a POST's body read first when collects_body
  Stream,   // an event stream answered locally (admission::makeFeed)
  Proxied,  // a guard (admission::makeGuard), then the origin
  Refused,  // 404, or 405 + Allow
};

struct Endpoint {
  Route route;
  std::string_view path;     // reserved paths only; "" for routes the configuration's path rules choose
  bool prefix;               // `path` is a prefix, and something must follow it (/_room/queue/<ticket>)
  std::string_view methods;  // the methods served, as the Allow header lists them ("" for any)
  Listener listener;
  Serve serve;
  bool collects_body;  // a POST's body (a small JSON document) is read whole before the answer
  bool logged;         // the request is written to the access log (a banned one always is)

  bool serves(std::string_view method) const;
};

// Every route, in the order of the enum.
std::span<const Endpoint> endpoints();
const Endpoint& endpoint(Route route);

// `bypass_client`: the client address (after -trusted-proxies) is in
// -bypass-cidrs; every path but the reserved ones is then Bypass.
// `admin_listener`: the request came on -admin-listen.
Route route(const config::Config& config, std::string_view method, std::string_view decoded_path,
            bool bypass_client = false, bool admin_listener = false);

// The Allow header value for a reserved path ("GET, HEAD" ...), "" otherwise.
std::string_view allowedMethods(std::string_view decoded_path);

}  // namespace concert::http
