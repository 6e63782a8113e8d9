// GET /_room/metrics (the Prometheus exposition) and GET /_room/report, and
// the admission counters the page guard keeps for them.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <sstream>

#include "config/cidr.h"
#include "fixture.h"
#include "http/client_address.h"

using namespace concert;
using namespace concert::admission;
using namespace concert::http;
using concert::test::Site;

namespace {

std::vector<std::string> lines(const std::string& body) {
  std::vector<std::string> out;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

bool hasLine(const std::string& body, const std::string& line) {
  for (const std::string& l : lines(body))
    if (l == line) return true;
  return false;
}

// The family a sample's name belongs to: the name less a histogram suffix
// when the family is a histogram.
std::string familyOf(const std::string& name, const std::map<std::string, std::string>& types) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      const std::string base = name.substr(0, name.size() - s.size());
      auto it = types.find(base);
      if (it != types.end() && it->second == "histogram") return base;
    }
  }
  return name;
}

Headers bearer(const std::string& token) {
  return {{"Authorization", "Bearer " + token}};
}

}  // namespace

TEST_CASE("metrics: every family has HELP and TYPE first, its samples together, names unique") {
  Site room(test::baseConfig(1));
  const std::string body = renderMetrics(room.ctx());
  std::map<std::string, std::string> types;  // family -> type
  std::set<std::string> helped;
  std::set<std::string> closed;  // families whose samples ended
  std::string current;
  for (const std::string& l : lines(body)) {
    REQUIRE(!l.empty());
    if (l.rfind("# HELP ", 0) == 0) {
      std::string name = l.substr(7, l.find(' ', 7) - 7);
      CHECK(helped.insert(name).second);
      continue;
    }
    if (l.rfind("# TYPE ", 0) == 0) {
      std::string name = l.substr(7, l.find(' ', 7) - 7);
      std::string type = l.substr(l.find(' ', 7) + 1);
      CHECK(helped.count(name) == 1);
      CHECK(types.emplace(name, type).second);
      CHECK((type == "counter" || type == "gauge" || type == "histogram"));
      if (type == "counter") CHECK(name.size() > 6);
      if (type == "counter") CHECK(name.compare(name.size() - 6, 6, "_total") == 0);
      if (!current.empty()) closed.insert(current);
      current = name;
      continue;
    }
    const std::string name = l.substr(0, l.find_first_of("{ "));
    CHECK(name.rfind("concert_", 0) == 0);
    const std::string family = familyOf(name, types);
    CHECK_MESSAGE(family == current, l);
    CHECK(closed.count(family) == 0);
  }
  for (const char* required :
       {"concert_page_slots_in_use", "concert_page_slots_limit", "concert_queue_waiting",
        "concert_tickets_issued_total", "concert_admissions_total", "concert_rejected_total",
        "concert_tickets_evicted_total", "concert_queue_wait_seconds", "concert_upstream_response_seconds",
        "concert_upstream_responses_total", "concert_upstream_errors_total", "concert_timeouts_total",
        "concert_fifo_inversions_total", "concert_reloads_total", "concert_worker_restarts_total",
        "concert_build_info"})
    CHECK_MESSAGE(types.count(required) == 1, required);
  CHECK(types["concert_queue_wait_seconds"] == "histogram");
  CHECK(types["concert_page_slots_in_use"] == "gauge");
  CHECK(types["concert_build_info"] == "gauge");
}

TEST_CASE("metrics: every counter once, under its family and label or its own key") {
  Site room(test::baseConfig(1));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);
  // Even values far from every gauge and histogram value (the holder's
  // admission makes one of them odd): all distinct.
  uint64_t n = 5000;
  for (shm::Counter c : shm::kAllCounters) room.segment->stats().count(c, n += 2);
  const shm::StatsSnapshot s = room.segment->stats().snapshot();
  const std::string body = renderMetrics(room.ctx());

  // Each counter's value shows up exactly once, except the two that are the
  // sum of a family.
  for (shm::Counter c : shm::kAllCounters) {
    std::string value = " ";
    value += std::to_string(s.counter(c));
    int seen = 0;
    for (const std::string& l : lines(body))
      if (l[0] != '#' && l.size() > value.size() && l.compare(l.size() - value.size(), value.size(), value) == 0)
        ++seen;
    const bool sum = c == shm::Counter::EvictedTotal || c == shm::Counter::TimeoutsTotal;
    CHECK_MESSAGE(seen == (sum ? 0 : 1), shm::counterKey(c));
  }

  auto line = [&](const std::string& series, shm::Counter c) {
    std::string out = series;
    out += ' ';
    out += std::to_string(s.counter(c));
    return out;
  };
  CHECK(hasLine(body, line("concert_tickets_issued_total", shm::Counter::QueuedTotal)));
  CHECK(hasLine(body, line("concert_admissions_total{via=\"direct\"}", shm::Counter::AdmissionsDirectTotal)));
  CHECK(hasLine(body, line("concert_admissions_total{via=\"line\"}", shm::Counter::AdmissionsLineTotal)));
  CHECK(hasLine(body, line("concert_admissions_total{via=\"held\"}", shm::Counter::AdmissionsHeldTotal)));
  CHECK(hasLine(body, line("concert_admissions_total{via=\"session\"}", shm::Counter::AdmissionsSessionTotal)));
  CHECK(hasLine(body, line("concert_admissions_total{via=\"priority\"}", shm::Counter::AdmissionsPriorityTotal)));
  CHECK(hasLine(body, line("concert_rejected_total{reason=\"full\"}", shm::Counter::RejectedFullTotal)));
  CHECK(hasLine(body, line("concert_rejected_total{reason=\"client_limit\"}", shm::Counter::RejectedClientLimitTotal)));
  CHECK(hasLine(body, line("concert_rejected_total{reason=\"banned\"}", shm::Counter::RejectedBannedTotal)));
  CHECK(hasLine(body, line("concert_rejected_total{reason=\"busy\"}", shm::Counter::RejectedBusyTotal)));
  CHECK(hasLine(body, line("concert_rejected_total{reason=\"long_lived\"}", shm::Counter::LongLivedRefusedTotal)));
  CHECK(hasLine(body, line("concert_rejected_total{reason=\"maintenance\"}", shm::Counter::RejectedMaintenanceTotal)));
  CHECK(hasLine(body, line("concert_tickets_evicted_total{reason=\"ttl\"}", shm::Counter::EvictedTtlTotal)));
  CHECK(hasLine(body, line("concert_tickets_evicted_total{reason=\"ghost\"}", shm::Counter::GhostEvictedTotal)));
  CHECK(hasLine(body, line("concert_tickets_evicted_total{reason=\"missed\"}", shm::Counter::MissedTurnsTotal)));
  CHECK(hasLine(body, line("concert_tickets_evicted_total{reason=\"banned\"}", shm::Counter::EvictedBannedTotal)));
  CHECK(hasLine(body, line("concert_tickets_evicted_total{reason=\"removed\"}", shm::Counter::EvictedRemovedTotal)));
  CHECK(hasLine(body,
                line("concert_upstream_responses_total{code_class=\"1xx\"}", shm::Counter::UpstreamResponses1xxTotal)));
  CHECK(hasLine(body,
                line("concert_upstream_responses_total{code_class=\"5xx\"}", shm::Counter::UpstreamResponses5xxTotal)));
  CHECK(
      hasLine(body, line("concert_upstream_errors_total{kind=\"connect\"}", shm::Counter::UpstreamErrorsConnectTotal)));
  CHECK(
      hasLine(body, line("concert_upstream_errors_total{kind=\"timeout\"}", shm::Counter::UpstreamErrorsTimeoutTotal)));
  CHECK(hasLine(body, line("concert_upstream_errors_total{kind=\"reset\"}", shm::Counter::UpstreamErrorsResetTotal)));
  CHECK(
      hasLine(body, line("concert_timeouts_total{phase=\"client_header\"}", shm::Counter::TimeoutsClientHeaderTotal)));
  CHECK(hasLine(body, line("concert_timeouts_total{phase=\"queue_hold\"}", shm::Counter::TimeoutsQueueHoldTotal)));
  CHECK(hasLine(body, line("concert_fifo_inversions_total", shm::Counter::FifoInversionsTotal)));
  CHECK(hasLine(body, line("concert_reloads_total", shm::Counter::ReloadsTotal)));
  CHECK(hasLine(body, line("concert_worker_restarts_total", shm::Counter::WorkerRestartsTotal)));
  CHECK(hasLine(body, line("concert_ring_full_total", shm::Counter::RingFullTotal)));
  CHECK(hasLine(body, "# TYPE concert_admissions_total counter"));
  CHECK(hasLine(body, "# TYPE concert_ring_full_total counter"));

  // Gauges, as /_room/stats has them.
  CHECK(hasLine(body, "concert_page_slots_in_use 1"));
  CHECK(hasLine(body, "concert_page_slots_limit 1"));
  CHECK(hasLine(body, "concert_queue_waiting 0"));
  CHECK(hasLine(body, "concert_max_queue_depth 100"));
  CHECK(hasLine(body, "concert_workers 1"));
  CHECK(hasLine(body, "concert_generation 1"));
  CHECK(hasLine(body, "concert_token_ttl_seconds 300"));
  CHECK(hasLine(body, "concert_asset_cap 128"));
  CHECK(hasLine(body, "concert_build_info{version=\"" CONCERT_VERSION "\"} 1"));
  CHECK(hasLine(body, "# TYPE concert_page_slots_in_use gauge"));
}

TEST_CASE("metrics: histograms are cumulative, with sum and count, all slots merged") {
  Site room(test::baseConfig(1));
  auto& h = room.segment->histograms();
  h.observe(shm::Histogram::QueueWait, 0, 300'000);        // 0.3 s
  h.observe(shm::Histogram::QueueWait, 1, 2'000'000);      // 2 s, another worker
  h.observe(shm::Histogram::QueueWait, 0, 7'200'000'000);  // 2 h: +Inf
  h.observe(shm::Histogram::UpstreamResponse, 2, 1'500);   // 1.5 ms
  const std::string body = renderMetrics(room.ctx());
  CHECK(hasLine(body, "# TYPE concert_queue_wait_seconds histogram"));
  CHECK(hasLine(body, "concert_queue_wait_seconds_bucket{le=\"0.05\"} 0"));
  CHECK(hasLine(body, "concert_queue_wait_seconds_bucket{le=\"0.25\"} 0"));
  CHECK(hasLine(body, "concert_queue_wait_seconds_bucket{le=\"0.5\"} 1"));
  CHECK(hasLine(body, "concert_queue_wait_seconds_bucket{le=\"1\"} 1"));
  CHECK(hasLine(body, "concert_queue_wait_seconds_bucket{le=\"2.5\"} 2"));
  CHECK(hasLine(body, "concert_queue_wait_seconds_bucket{le=\"3600\"} 2"));
  CHECK(hasLine(body, "concert_queue_wait_seconds_bucket{le=\"+Inf\"} 3"));
  CHECK(hasLine(body, "concert_queue_wait_seconds_sum 7202.3"));
  CHECK(hasLine(body, "concert_queue_wait_seconds_count 3"));
  CHECK(hasLine(body, "concert_upstream_response_seconds_bucket{le=\"0.001\"} 0"));
  CHECK(hasLine(body, "concert_upstream_response_seconds_bucket{le=\"0.0025\"} 1"));
  CHECK(hasLine(body, "concert_upstream_response_seconds_bucket{le=\"+Inf\"} 1"));
  CHECK(hasLine(body, "concert_upstream_response_seconds_sum 0.0015"));
  CHECK(hasLine(body, "concert_upstream_response_seconds_count 1"));
}

TEST_CASE("metrics: handler answers the 0.0.4 text type") {
  Site room(test::baseConfig(1));
  LocalResponse r = handleMetrics(room.ctx(), test::get("/_room/metrics"));
  CHECK(r.status == 200);
  CHECK(test::headerValue(r.headers, "Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(r.body == renderMetrics(room.ctx()));
}

TEST_CASE("metrics: the page guard counts admissions by how and rejections by why") {
  config::Config c = test::baseConfig(1);
  c.max_queue = 1;
  c.crawler_agent_list = {"examplebot"};
  Site room(std::move(c));
  auto snap = [&] { return room.segment->stats().snapshot(); };

  auto direct = makePageGuard(room.ctx());
  REQUIRE(direct->admit(test::get("/"), 1000).kind == Admission::Kind::Proceed);
  CHECK(snap().admissions_direct_total == 1);

  auto queued = makePageGuard(room.ctx());
  Admission q = queued->admit(test::get("/"), 1000);
  REQUIRE(q.response.status == 429);
  const std::string ticket = test::setCookieValue(q.response.headers, "room_ticket");

  auto full = makePageGuard(room.ctx());
  CHECK(full->admit(test::get("/"), 1000).response.status == 503);
  auto crawler = makePageGuard(room.ctx());
  CHECK(crawler->admit(test::get("/", {{"User-Agent", "ExampleBot/1.0"}}), 1000).response.status == 503);
  CHECK(snap().rejected_full_total == 1);
  CHECK(snap().rejected_busy_total == 1);

  direct->release();
  auto turn = makePageGuard(room.ctx());
  REQUIRE(turn->admit(test::get("/", {{"Cookie", "room_ticket=" + ticket}}), 1100).kind == Admission::Kind::Proceed);
  const shm::StatsSnapshot s = snap();
  CHECK(s.admissions_direct_total == 1);
  CHECK(s.admissions_line_total == 1);
  CHECK(s.admissions_held_total == 0);
  CHECK(s.admissions_session_total == 0);
  CHECK(s.queued_total == 1);
  CHECK(s.fifo_inversions_total == 0);
  CHECK(room.segment->histograms().merged(shm::Histogram::QueueWait).count() == 1);
}

TEST_CASE("metrics: a held request's admission counts as held") {
  config::Config c = test::baseConfig(1);
  c.queue_hold = 5000;
  Site room(std::move(c));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/"), 1000).kind == Admission::Kind::Proceed);
  auto held = makePageGuard(room.ctx());
  REQUIRE(held->admit(test::get("/"), 1000).kind == Admission::Kind::Wait);
  holder->release();
  REQUIRE(held->admit(test::get("/"), 1100).kind == Admission::Kind::Proceed);
  const shm::StatsSnapshot s = room.segment->stats().snapshot();
  CHECK(s.admissions_direct_total == 1);
  CHECK(s.admissions_held_total == 1);
  CHECK(s.admissions_line_total == 0);
  CHECK(room.segment->histograms().merged(shm::Histogram::QueueWait).count() == 1);
}

TEST_CASE("report: admin only, its keys and values") {
  SUBCASE("404 while no token is set") {
    Site room(test::baseConfig(1));
    CHECK(handleReport(room.ctx(), test::get("/_room/report")).status == 404);
  }
  config::Config c = test::baseConfig(1);
  c.admin_token = "s3cret-token";
  c.max_tickets_per_client = 5;
  Site room(std::move(c));
  CHECK(handleReport(room.ctx(), test::get("/_room/report")).status == 401);
  CHECK(handleReport(room.ctx(), test::get("/_room/report", bearer("wrong"))).status == 401);

  LocalResponse empty = handleReport(room.ctx(), test::get("/_room/report", bearer("s3cret-token")));
  CHECK(empty.status == 200);
  CHECK(test::headerValue(empty.headers, "Content-Type") == "application/json; charset=utf-8");
  CHECK(empty.body ==
        "{\"fifo_inversions\":0,\"ghost_share\":0.0,\"tickets_per_client\":[],"
        "\"wait_seconds\":{\"p50\":0.0,\"p90\":0.0,\"p99\":0.0},"
        "\"capacity\":{\"cap\":1,\"recommended_cap\":null,\"unqueued_first_byte_seconds\":0.0,"
              "\"peak_pages_per_second\":0.0,\"recommended_by\":null,\"origin_status\":null,"
              "\"adaptive\":{\"configured\":false,\"active\":false,\"cap_min\":1,\"cap_max\":4,"
              "\"unqueued_first_byte_seconds\":0.0,\"origin_queue\":0.0}}}");

  // One holder; then three tickets from 10.0.0.7, one from 10.0.0.8 and one
  // from an IPv6 client (its /64).
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/"), 1000).kind == Admission::Kind::Proceed);
  std::vector<std::unique_ptr<RequestGuard>> guards;
  auto from = [&](const char* ip) {
    Request r = test::get("/");
    r.client_keyed = true;
    r.client_key = clientKey(*config::parseIpAddress(ip));
    guards.push_back(makePageGuard(room.ctx()));
    CHECK(guards.back()->admit(r, 1000).response.status == 429);
  };
  for (int i = 0; i < 3; ++i) from("10.0.0.7");
  from("10.0.0.8");
  from("2001:db8:1:2::99");
  room.segment->histograms().observe(shm::Histogram::QueueWait, 0, 300'000);
  room.segment->stats().count(shm::Counter::GhostEvictedTotal);

  LocalResponse r = handleReport(room.ctx(), test::get("/_room/report", bearer("s3cret-token")));
  CHECK(r.status == 200);
  CHECK(r.body ==
        "{\"fifo_inversions\":0,\"ghost_share\":0.2,\"tickets_per_client\":["
        "{\"client\":\"10.0.0.7\",\"tickets\":3},"
        "{\"client\":\"10.0.0.8\",\"tickets\":1},"
        "{\"client\":\"2001:db8:1:2::/64\",\"tickets\":1}],"
        "\"wait_seconds\":{\"p50\":0.375,\"p90\":0.475,\"p99\":0.4975},"
        "\"capacity\":{\"cap\":1,\"recommended_cap\":null,\"unqueued_first_byte_seconds\":0.0,"
              "\"peak_pages_per_second\":0.0,\"recommended_by\":null,\"origin_status\":null,"
              "\"adaptive\":{\"configured\":false,\"active\":false,\"cap_min\":1,\"cap_max\":4,"
              "\"unqueued_first_byte_seconds\":0.0,\"origin_queue\":0.0}}}");
}

TEST_CASE("clients: topByTickets keeps the ten busiest, most first") {
  config::Config c = test::baseConfig(1);
  c.max_tickets_per_client = 50;
  Site room(std::move(c));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/"), 1000).kind == Admission::Kind::Proceed);
  std::vector<std::unique_ptr<RequestGuard>> guards;
  // Client i (1..12) holds i tickets.
  for (int i = 1; i <= 12; ++i) {
    for (int k = 0; k < i; ++k) {
      Request r = test::get("/");
      r.client_keyed = true;
      r.client_key = clientKey(*config::parseIpAddress("192.0.2." + std::to_string(i)));
      guards.push_back(makePageGuard(room.ctx()));
      REQUIRE(guards.back()->admit(r, 1000).response.status == 429);
    }
  }
  std::vector<shm::ClientTickets> top = room.segment->clients().topByTickets(kReportClients);
  REQUIRE(top.size() == 10);
  for (size_t i = 0; i < top.size(); ++i) {
    CHECK(top[i].tickets == static_cast<int64_t>(12 - i));
    CHECK(top[i].key == clientKey(*config::parseIpAddress("192.0.2." + std::to_string(12 - i))));
  }
  CHECK(room.segment->clients().topByTickets(0).empty());
}
