// The dashboard, the admission side (dashboard.h): the gate on all four
// routes, the page's CSP naming its inline script, the history JSON, and
// where the event stream starts and what each recheck sends.
#include <doctest/doctest.h>

#include <cmath>

#include "admission/dashboard.h"
#include "fixture.h"

using namespace concert;
using namespace concert::admission;
using namespace concert::http;
using concert::test::Site;

namespace {

constexpr const char* kToken = "dash-token";

config::Config withToken() {
  config::Config c = test::baseConfig(2);
  c.admin_token = kToken;
  return c;
}

Request authorised(std::string path, Headers more = {}) {
  more.push_back({"Authorization", std::string("Bearer ") + kToken});
  return test::get(std::move(path), std::move(more));
}

shm::HistorySample sampleAt(int64_t t) {
  shm::HistorySample s;
  s.unix_seconds = t;
  s.queue_depth = t % 5;
  s.occupancy = 1;
  s.cap = 2;
  return s;
}

void record(Site& room, int n) {
  const int64_t base = 1'700'000'000 + static_cast<int64_t>(room.segment->history().written());
  for (int i = 0; i < n; ++i) room.segment->history().record(sampleAt(base + i));
}

}  // namespace

TEST_CASE("dashboard: every route is 404 without a token, 401 without the header, served with it") {
  Site open_room(test::baseConfig(2));
  CHECK(handleDashboard(open_room.ctx(), authorised("/_room/")).status == 404);
  Site room(withToken());
  CHECK(handleDashboard(room.ctx(), test::get("/_room/")).status == 401);
  CHECK(handleDashboardScript(room.ctx(), test::get("/_room/chart.js")).status == 401);
  CHECK(handleHistory(room.ctx(), test::get("/_room/history")).status == 401);
  HistoryEvents refused(room.ctx());
  EventFeed::Opening o = refused.open(test::get("/_room/history/events"), 1000);
  CHECK_FALSE(o.stream);
  CHECK(o.response.status == 401);

  Request on_admin_listener = test::get("/_room/");
  on_admin_listener.admin_listener = true;
  CHECK(handleDashboard(room.ctx(), on_admin_listener).status == 200);

  LocalResponse page = handleDashboard(room.ctx(), authorised("/_room/"));
  CHECK(page.status == 200);
  CHECK(page.body == kDashboardHtml);
  const std::string csp = test::headerValue(page.headers, "Content-Security-Policy");
  CHECK(csp.find("script-src 'self' 'sha256-") != std::string::npos);
  CHECK(csp.find("'sha256-'") == std::string::npos);  // a hash was taken
  LocalResponse script = handleDashboardScript(room.ctx(), authorised("/_room/chart.js"));
  CHECK(script.status == 200);
  CHECK(script.body.rfind("/*!\n * Chart.js", 0) == 0);
}

TEST_CASE("dashboard: a sample's JSON, null for an empty window") {
  shm::HistorySample s = sampleAt(1'700'000'123);
  s.index = 7;
  s.admissions = 3;
  s.wait_p50 = 1.23456;
  s.wait_p95 = 2.5;
  CHECK(historySampleJson(s) ==
        "{\"i\":7,\"t\":1700000123,\"queue_depth\":3,\"occupancy\":1,\"cap\":2,\"admissions\":3,"
        "\"wait_p50\":1.2346,\"wait_p95\":2.5,\"origin_p95\":null}");
  CHECK(historySamplesJson({}) == "[]");
}

TEST_CASE("dashboard: /_room/history lists every sample kept and the next index") {
  Site room(withToken());
  CHECK(handleHistory(room.ctx(), authorised("/_room/history")).body ==
        "{\"interval_seconds\":1,\"window_seconds\":10,\"capacity\":3600,\"next\":0,\"samples\":[]}");
  record(room, 3);
  LocalResponse r = handleHistory(room.ctx(), authorised("/_room/history"));
  CHECK(r.status == 200);
  CHECK(test::headerValue(r.headers, "Cache-Control") == "no-store");
  CHECK(r.body.find("\"next\":3,\"samples\":[{\"i\":0,") != std::string::npos);
  CHECK(r.body.find("{\"i\":2,") != std::string::npos);
}

TEST_CASE("dashboard: the stream starts after Last-Event-ID, else at ?from=, else at the newest sample") {
  Site room(withToken());
  record(room, 10);
  auto firstIndex = [&](const Request& request) {
    HistoryEvents events(room.ctx());
    EventFeed::Opening o = events.open(request, 1000);
    REQUIRE(o.stream);
    CHECK(test::headerValue(o.response.headers, "Content-Type") == "text/event-stream");
    REQUIRE(o.first.kind == EventFeed::Event::Kind::Samples);
    const size_t at = o.first.data.find("\"i\":");
    return std::stoi(o.first.data.substr(at + 4));
  };
  CHECK(firstIndex(authorised("/_room/history/events")) == 9);
  Request from = authorised("/_room/history/events");
  from.query = "x=1&from=4";
  CHECK(firstIndex(from) == 4);
  Request resumed = authorised("/_room/history/events", {{"Last-Event-ID", "6"}});
  resumed.query = "from=2";  // the header wins: it is where the browser got to
  CHECK(firstIndex(resumed) == 7);
  // Ids from another Concert (beyond what was written) or garbage: the newest.
  CHECK(firstIndex(authorised("/_room/history/events", {{"Last-Event-ID", "500"}})) == 9);
  from.query = "from=abc";
  CHECK(firstIndex(from) == 9);
}

TEST_CASE("dashboard: each recheck sends what was written since, with the last index as id; drain ends it") {
  Site room(withToken());
  HistoryEvents events(room.ctx());
  EventFeed::Opening o = events.open(authorised("/_room/history/events"), 1000);
  REQUIRE(o.stream);
  CHECK(o.first.kind == EventFeed::Event::Kind::None);  // nothing written yet
  CHECK(events.ticket() == EventFeed::kLast);
  CHECK(events.recheck(2000, true).kind == EventFeed::Event::Kind::None);
  record(room, 2);
  EventFeed::Event e = events.recheck(3000, true);
  CHECK(e.kind == EventFeed::Event::Kind::Samples);
  CHECK(e.id == "1");
  CHECK(e.text().rfind("id: 1\nevent: samples\ndata: [{\"i\":0,", 0) == 0);
  CHECK(e.text().find("{\"i\":1,") != std::string::npos);
  CHECK(events.recheck(3500, true).kind == EventFeed::Event::Kind::None);

  // A long way behind: at most kMaxSamplesPerEvent a recheck, in order.
  record(room, 150);
  size_t sent = 0;
  std::string last_id;
  for (int i = 0; i < 5; ++i) {
    EventFeed::Event batch = events.recheck(4000 + i, true);
    if (batch.kind == EventFeed::Event::Kind::None) break;
    size_t n = 0;
    for (size_t at = batch.data.find("\"i\":"); at != std::string::npos; at = batch.data.find("\"i\":", at + 1)) ++n;
    CHECK(n <= HistoryEvents::kMaxSamplesPerEvent);
    sent += n;
    last_id = batch.id;
  }
  CHECK(sent == 150);
  CHECK(last_id == "151");

  room.self->draining = true;
  EventFeed::Event end = events.recheck(9000, true);
  CHECK(end.kind == EventFeed::Event::Kind::End);
  CHECK(end.ends());
}
