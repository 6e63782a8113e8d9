// The routing table and the request header helpers.
#include <doctest/doctest.h>

#include "config/config.h"
#include "http/request.h"
#include "http/router.h"

using namespace concert;
using namespace concert::http;

namespace {

config::PathRule exact(const char* p) {
  return {p, false};
}
config::PathRule prefix(const char* p) {
  return {p, true};
}

config::Config routedConfig() {
  config::Config c;
  c.bypass = {exact("/favicon.ico"), prefix("/webhooks/")};
  c.assets = {prefix("/static/"), exact("/app.js")};
  c.asset_public = {prefix("/public/")};
  return c;
}

}  // namespace

TEST_CASE("reserved paths route to local handlers with their methods") {
  config::Config c = routedConfig();
  CHECK(route(c, "GET", "/queue/status") == Route::QueueStatus);
  CHECK(route(c, "HEAD", "/queue/status") == Route::QueueStatus);
  CHECK(route(c, "OPTIONS", "/queue/status") == Route::QueueStatus);
  CHECK(route(c, "GET", "/queue/events") == Route::QueueEvents);
  CHECK(route(c, "GET", "/_room/healthz") == Route::Healthz);
  CHECK(route(c, "HEAD", "/_room/healthz") == Route::Healthz);
  CHECK(route(c, "GET", "/_room/stats") == Route::Stats);
  CHECK(route(c, "HEAD", "/_room/stats") == Route::Stats);
  CHECK(route(c, "POST", "/_room/cap") == Route::Cap);
  CHECK(route(c, "POST", "/_room/mode") == Route::Mode);
  CHECK(route(c, "GET", "/_room/mode") == Route::Mode);
  CHECK(route(c, "HEAD", "/_room/mode") == Route::Mode);
  CHECK(route(c, "PUT", "/_room/mode") == Route::MethodNotAllowed);
  CHECK(allowedMethods("/_room/mode") == "GET, HEAD, POST");
}

TEST_CASE("a reserved path with another method is 405, with the right Allow") {
  config::Config c = routedConfig();
  CHECK(route(c, "POST", "/_room/stats") == Route::MethodNotAllowed);
  CHECK(route(c, "DELETE", "/_room/healthz") == Route::MethodNotAllowed);
  CHECK(route(c, "GET", "/_room/cap") == Route::MethodNotAllowed);
  CHECK(route(c, "POST", "/queue/status") == Route::MethodNotAllowed);
  CHECK(route(c, "HEAD", "/queue/events") == Route::MethodNotAllowed);
  CHECK(route(c, "POST", "/queue/events") == Route::MethodNotAllowed);
  CHECK(route(c, "OPTIONS", "/queue/events") == Route::MethodNotAllowed);
  CHECK(allowedMethods("/_room/stats") == "GET, HEAD");
  CHECK(allowedMethods("/_room/healthz") == "GET, HEAD");
  CHECK(allowedMethods("/_room/cap") == "POST");
  CHECK(allowedMethods("/queue/status") == "GET, HEAD, OPTIONS");
  CHECK(allowedMethods("/queue/events") == "GET");
  CHECK(allowedMethods("/other") == "");
}

TEST_CASE("the line's admin paths: /_room/queue lists, /_room/queue/<ticket> deletes") {
  config::Config c = routedConfig();
  CHECK(route(c, "GET", "/_room/queue") == Route::QueueList);
  CHECK(route(c, "HEAD", "/_room/queue") == Route::QueueList);
  CHECK(route(c, "DELETE", "/_room/queue") == Route::MethodNotAllowed);
  CHECK(route(c, "DELETE", "/_room/queue/42") == Route::QueueRemove);
  CHECK(route(c, "POST", "/_room/promote") == Route::Promote);
  CHECK(route(c, "GET", "/_room/promote") == Route::MethodNotAllowed);
  CHECK(route(c, "GET", "/queue/promote") == Route::QueuePromote);
  CHECK(route(c, "HEAD", "/queue/promote") == Route::MethodNotAllowed);
  CHECK(allowedMethods("/queue/promote") == "GET");
  CHECK(allowedMethods("/_room/promote") == "POST");
  CHECK(route(c, "GET", "/_room/queue/42") == Route::MethodNotAllowed);
  CHECK(route(c, "DELETE", "/_room/queue/") == Route::Page);  // no ticket named
  CHECK(allowedMethods("/_room/queue") == "GET, HEAD");
  CHECK(allowedMethods("/_room/queue/42") == "DELETE");
}

TEST_CASE("-admin-listen: /_room/ only there, the public listener keeps healthz and the site") {
  config::Config c = routedConfig();
  c.admin_listen = "127.0.0.1:8081";
  // Public listener.
  CHECK(route(c, "GET", "/_room/stats") == Route::NotFound);
  CHECK(route(c, "POST", "/_room/cap") == Route::NotFound);
  CHECK(route(c, "GET", "/_room/queue") == Route::NotFound);
  CHECK(route(c, "GET", "/_room/") == Route::NotFound);
  CHECK(route(c, "GET", "/_room/unknown") == Route::NotFound);
  CHECK(route(c, "GET", "/_room/healthz") == Route::Healthz);
  CHECK(route(c, "GET", "/queue/status") == Route::QueueStatus);
  CHECK(route(c, "GET", "/shop") == Route::Page);
  CHECK(route(c, "GET", "/_room/stats", true) == Route::NotFound);  // bypass clients too
  // Admin listener.
  CHECK(route(c, "GET", "/_room/stats", false, true) == Route::Stats);
  CHECK(route(c, "POST", "/_room/cap", false, true) == Route::Cap);
  CHECK(route(c, "GET", "/_room/healthz", false, true) == Route::Healthz);
  CHECK(route(c, "GET", "/_room/unknown", false, true) == Route::NotFound);
  CHECK(route(c, "GET", "/shop", false, true) == Route::NotFound);
  CHECK(route(c, "GET", "/queue/status", false, true) == Route::NotFound);
  // Without -admin-listen the public listener serves /_room/ as before.
  c.admin_listen.clear();
  CHECK(route(c, "GET", "/_room/stats") == Route::Stats);
  CHECK(route(c, "GET", "/_room/unknown") == Route::Page);
}

TEST_CASE("reserved paths match exactly: trailing slash and subpaths are pages") {
  config::Config c = routedConfig();
  CHECK(route(c, "GET", "/_room/stats/") == Route::Page);
  CHECK(route(c, "POST", "/_room/stats/") == Route::Page);
  CHECK(route(c, "GET", "/_room/other") == Route::Page);
  CHECK(route(c, "GET", "/_room") == Route::Page);
  CHECK(route(c, "GET", "/queue/status/") == Route::Page);
  CHECK(route(c, "GET", "/queue/events/") == Route::Page);
  CHECK(route(c, "GET", "/queue/event") == Route::Page);
  CHECK(route(c, "GET", "/Queue/Status") == Route::Page);
  CHECK(route(c, "GET", "/foo/") == Route::Page);
}

TEST_CASE("bypass, assets and public assets, any method, in that order") {
  config::Config c = routedConfig();
  CHECK(route(c, "GET", "/favicon.ico") == Route::Bypass);
  CHECK(route(c, "POST", "/webhooks/stripe") == Route::Bypass);
  CHECK(route(c, "GET", "/webhooks/paypal/ipn") == Route::Bypass);
  CHECK(route(c, "GET", "/webhooks") == Route::Page);  // a prefix rule does not match its bare name
  CHECK(route(c, "GET", "/webhooksfoo") == Route::Page);
  CHECK(route(c, "GET", "/static/a.css") == Route::PrivateAsset);
  CHECK(route(c, "PUT", "/static/") == Route::PrivateAsset);
  CHECK(route(c, "GET", "/static") == Route::Page);
  CHECK(route(c, "GET", "/app.js") == Route::PrivateAsset);
  CHECK(route(c, "GET", "/app.js/") == Route::Page);
  CHECK(route(c, "GET", "/public/logo.png") == Route::PublicAsset);
  CHECK(route(c, "GET", "/") == Route::Page);
  CHECK(route(c, "GET", "/anything/else") == Route::Page);

  config::Config both;  // the loader forbids overlaps, but the order is still bypass first
  both.bypass = {exact("/x")};
  both.assets = {exact("/x")};
  CHECK(route(both, "GET", "/x") == Route::Bypass);
}

TEST_CASE("routing sees the decoded path only") {
  config::Config c = routedConfig();
  CHECK(route(c, "GET", "/static/a b.css") == Route::PrivateAsset);
  CHECK(route(c, "GET", "/_room/healthz") == Route::Healthz);
}

TEST_CASE("header helpers are case-insensitive and keep order") {
  Headers h = {{"Content-Type", "text/html"}, {"accept", "text/html"}, {"ACCEPT", "*/*"}, {"X-Empty", ""}};
  CHECK(equalsIgnoreCase("Content-Length", "content-length"));
  CHECK_FALSE(equalsIgnoreCase("Content-Length", "content-lengt"));
  CHECK(findHeader(h, "content-type") == "text/html");
  CHECK(findHeader(h, "Accept") == "text/html");
  CHECK(findHeader(h, "missing") == "");
  CHECK(hasHeader(h, "x-empty"));
  CHECK_FALSE(hasHeader(h, "x-missing"));
  CHECK(joinHeader(h, "accept") == "text/html,*/*");
  CHECK(joinHeader(h, "accept", "; ") == "text/html; */*");
  CHECK(joinHeader(h, "missing") == "");
  Request r;
  r.headers = h;
  CHECK(r.header("CONTENT-TYPE") == "text/html");
}

TEST_CASE("a client in -bypass-cidrs: every path but the reserved ones is Bypass") {
  const config::Config c = routedConfig();
  CHECK(route(c, "GET", "/", true) == Route::Bypass);
  CHECK(route(c, "POST", "/checkout", true) == Route::Bypass);
  CHECK(route(c, "GET", "/static/a.css", true) == Route::Bypass);
  CHECK(route(c, "GET", "/public/x", true) == Route::Bypass);
  CHECK(route(c, "GET", "/_room/healthz", true) == Route::Healthz);
  CHECK(route(c, "GET", "/_room/stats", true) == Route::Stats);
  CHECK(route(c, "GET", "/queue/status", true) == Route::QueueStatus);
  CHECK(route(c, "GET", "/queue/events", true) == Route::QueueEvents);
  CHECK(route(c, "POST", "/_room/cap", true) == Route::Cap);
  CHECK(route(c, "DELETE", "/_room/stats", true) == Route::MethodNotAllowed);
  CHECK(route(c, "GET", "/", false) == Route::Page);
}

TEST_CASE("the dashboard's paths: the page, its script and its data, exact matches only") {
  config::Config c = routedConfig();
  CHECK(route(c, "GET", "/_room/") == Route::Dashboard);
  CHECK(route(c, "HEAD", "/_room/") == Route::Dashboard);
  CHECK(route(c, "GET", "/_room/chart.js") == Route::DashboardScript);
  CHECK(route(c, "HEAD", "/_room/chart.js") == Route::DashboardScript);
  CHECK(route(c, "GET", "/_room/history") == Route::History);
  CHECK(route(c, "HEAD", "/_room/history") == Route::History);
  CHECK(route(c, "GET", "/_room/history/events") == Route::HistoryEvents);
  CHECK(route(c, "HEAD", "/_room/history/events") == Route::MethodNotAllowed);
  CHECK(route(c, "POST", "/_room/") == Route::MethodNotAllowed);
  CHECK(route(c, "POST", "/_room/history") == Route::MethodNotAllowed);
  CHECK(allowedMethods("/_room/") == "GET, HEAD");
  CHECK(allowedMethods("/_room/history/events") == "GET");
  CHECK(route(c, "GET", "/_room//") == Route::Page);
  CHECK(route(c, "GET", "/_room/history/") == Route::Page);
  CHECK(route(c, "GET", "/_room/chart.min.js") == Route::Page);
}

TEST_CASE("one endpoint table: every route once, in the enum's order, and route() agrees with it") {
  const config::Config c = routedConfig();
  size_t i = 0;
  for (const Endpoint& e : endpoints()) {
    CAPTURE(i);
    CHECK(static_cast<size_t>(e.route) == i);
    CHECK(&endpoint(e.route) == &e);
    ++i;
    if (e.path.empty()) {
      CHECK(e.methods.empty());
      continue;
    }
    const std::string path = std::string(e.path) + (e.prefix ? "7" : "");
    CHECK(allowedMethods(path) == e.methods);
    for (const char* method : {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"}) {
      CAPTURE(path);
      CAPTURE(method);
      CHECK(route(c, method, path) == (e.serves(method) ? e.route : Route::MethodNotAllowed));
      // Served on the admin listener exactly when the path is under /_room/.
      const bool on_admin = e.listener != Listener::Public;
      CHECK((route(c, method, path, false, true) != Route::NotFound) == on_admin);
    }
  }
  CHECK(i == static_cast<size_t>(Route::Page) + 1);
}

TEST_CASE("the endpoint table says how each route is served and which are logged") {
  CHECK(endpoint(Route::QueueStatus).serve == Serve::Local);
  CHECK(endpoint(Route::QueueEvents).serve == Serve::Stream);
  CHECK(endpoint(Route::HistoryEvents).serve == Serve::Stream);
  CHECK(endpoint(Route::NotFound).serve == Serve::Refused);
  CHECK(endpoint(Route::MethodNotAllowed).serve == Serve::Refused);
  for (Route r : {Route::Bypass, Route::PrivateAsset, Route::PublicAsset, Route::LongLived, Route::Page})
    CHECK(endpoint(r).serve == Serve::Proxied);
  for (Route r : {Route::Cap, Route::Mode, Route::Promote}) CHECK(endpoint(r).collects_body);
  CHECK_FALSE(endpoint(Route::QueueRemove).collects_body);
  // Polls, the waiting page's stream, health checks and assets stay out of the access log.
  size_t unlogged = 0;
  for (const Endpoint& e : endpoints()) unlogged += e.logged ? 0 : 1;
  CHECK(unlogged == 5);
  for (Route r : {Route::QueueStatus, Route::QueueEvents, Route::Healthz, Route::PrivateAsset, Route::PublicAsset})
    CHECK_FALSE(endpoint(r).logged);
  CHECK(endpoint(Route::Healthz).listener == Listener::Both);
  CHECK(endpoint(Route::QueueStatus).listener == Listener::Public);
  CHECK(endpoint(Route::Stats).listener == Listener::Admin);
  CHECK(endpoint(Route::Mode).serves("POST"));
  CHECK_FALSE(endpoint(Route::Mode).serves("PUT"));
  CHECK_FALSE(endpoint(Route::Mode).serves("GE"));
  CHECK_FALSE(endpoint(Route::QueueStatus).serves("get"));
}
