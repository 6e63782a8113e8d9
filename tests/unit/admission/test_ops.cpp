// /_room/healthz, /_room/stats and POST /_room/cap.
#include <doctest/doctest.h>

#include <algorithm>

#include "fixture.h"

using namespace concert;
using namespace concert::admission;
using namespace concert::http;
using concert::test::Site;

TEST_CASE("ops: healthz") {
  Site room(test::baseConfig(1));
  LocalResponse r = handleHealthz(room.ctx(), test::get("/_room/healthz"));
  CHECK(r.status == 200);
  CHECK(r.body == "ok");
  CHECK(test::headerValue(r.headers, "Content-Type") == "text/plain; charset=utf-8");
}

TEST_CASE("ops: stats keys sorted and complete") {
  Site room(test::baseConfig(1));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);
  LocalResponse r = handleStats(room.ctx(), test::get("/_room/stats"));
  CHECK(r.status == 200);
  CHECK(test::headerValue(r.headers, "Content-Type") == "application/json; charset=utf-8");
  CHECK(test::headerValue(r.headers, "Cache-Control") == "no-store");

  // Keys are the quoted words directly after '{' or ','; no value here contains either.
  std::vector<std::string> keys;
  for (size_t at = 0; at < r.body.size(); ++at) {
    if ((r.body[at] != '{' && r.body[at] != ',') || at + 1 >= r.body.size() || r.body[at + 1] != '"') continue;
    size_t end = r.body.find('"', at + 2);
    keys.push_back(r.body.substr(at + 2, end - at - 2));
  }
  std::vector<std::string> expected = {"abuse_bans_total",
                                       "abuse_strikes_total",
                                       "adaptive_active",
                                       "adaptive_base_latency",
                                       "adaptive_changes_total",
                                       "adaptive_origin_queue",
                                       "adaptive_recommended_cap",
                                       "admissions_direct_total",
                                       "admissions_held_total",
                                       "admissions_line_total",
                                       "admissions_priority_total",
                                       "admissions_session_total",
                                       "asset_cap",
                                       "asset_denied_total",
                                       "asset_global_throttled_total",
                                       "asset_in_flight",
                                       "asset_served_total",
                                       "asset_user_cap_h1",
                                       "asset_user_cap_h2",
                                       "asset_user_throttled_total",
                                       "asset_users",
                                       "banned_clients",
                                       "cap",
                                       "client_table_full_total",
                                       "connections_flooded_total",
                                       "connections_refused_total",
                                       "evicted_banned_total",
                                       "evicted_removed_total",
                                       "evicted_total",
                                       "evicted_ttl_total",
                                       "fifo_inversions_total",
                                       "generation",
                                       "ghost_evicted_total",
                                       "invitations_used_total",
                                       "live_queue_depth",
                                       "long_lived_cap",
                                       "long_lived_in_use",
                                       "long_lived_refused_total",
                                       "max_queue_depth",
                                       "missed_turns_total",
                                       "occupancy",
                                       "page_errors_total",
                                       "pass_evicted_total",
                                       "pass_table_full_total",
                                       "promoted_total",
                                       "proxy_protocol_rejected_total",
                                       "queue_depth",
                                       "queued_total",
                                       "rejected_banned_total",
                                       "rejected_busy_total",
                                       "rejected_client_limit_total",
                                       "rejected_full_total",
                                       "rejected_maintenance_total",
                                       "reloads_total",
                                       "ring_full_total",
                                       "slots_reclaimed_total",
                                       "timeouts_client_body_total",
                                       "timeouts_client_header_total",
                                       "timeouts_keepalive_total",
                                       "timeouts_queue_hold_total",
                                       "timeouts_send_total",
                                       "timeouts_total",
                                       "timeouts_tunnel_total",
                                       "timeouts_upstream_read_total",
                                       "token_ttl",
                                       "upstream",
                                       "upstream_errors_connect_total",
                                       "upstream_errors_reset_total",
                                       "upstream_errors_timeout_total",
                                       "upstream_responses_1xx_total",
                                       "upstream_responses_2xx_total",
                                       "upstream_responses_3xx_total",
                                       "upstream_responses_4xx_total",
                                       "upstream_responses_5xx_total",
                                       "utilization",
                                       "worker_restarts_total",
                                       "workers",
                                       "would_queue_total"};
  CHECK(keys == expected);
  CHECK(std::is_sorted(keys.begin(), keys.end()));
  CHECK(r.body.find("\"cap\":1,") != std::string::npos);
  CHECK(r.body.find("\"occupancy\":1,") != std::string::npos);
  CHECK(r.body.find("\"token_ttl\":\"5m0s\"") != std::string::npos);
  CHECK(r.body.find("\"upstream\":\"http://127.0.0.1:3000\"") != std::string::npos);
  CHECK(r.body.find("\"max_queue_depth\":100,") != std::string::npos);
  CHECK(r.body.find("\"workers\":1,") != std::string::npos);
  CHECK(r.body.find("\"generation\":1,") != std::string::npos);
}

TEST_CASE("ops: stats body is byte-exact, every counter under its own key") {
  Site room(test::baseConfig(1));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);
  uint64_t n = 100;
  for (shm::Counter c : shm::kAllCounters) room.segment->stats().count(c, n++);
  LocalResponse r = handleStats(room.ctx(), test::get("/_room/stats"));
  // admissions_direct_total: 129 and the holder's admission.
  CHECK(r.body ==
        "{\"abuse_bans_total\":125,\"abuse_strikes_total\":124,\"adaptive_active\":0,"
        "\"adaptive_base_latency\":\"0s\",\"adaptive_changes_total\":155,\"adaptive_origin_queue\":0,"
        "\"adaptive_recommended_cap\":0,\"admissions_direct_total\":131,"
        "\"admissions_held_total\":132,\"admissions_line_total\":131,\"admissions_priority_total\":134,"
        "\"admissions_session_total\":133,\"asset_cap\":128,\"asset_denied_total\":105,"
        "\"asset_global_throttled_total\":107,\"asset_in_flight\":0,\"asset_served_total\":104,"
        "\"asset_user_cap_h1\":8,\"asset_user_cap_h2\":128,\"asset_user_throttled_total\":106,"
        "\"asset_users\":0,\"banned_clients\":0,\"cap\":1,\"client_table_full_total\":126,"
        "\"connections_flooded_total\":153,\"connections_refused_total\":115,\"evicted_banned_total\":142,\"evicted_removed_total\":143,"
        "\"evicted_total\":101,\"evicted_ttl_total\":141,\"fifo_inversions_total\":129,\"generation\":1,"
        "\"ghost_evicted_total\":114,\"invitations_used_total\":135,\"live_queue_depth\":0,"
        "\"long_lived_cap\":10000,\"long_lived_in_use\":0,\"long_lived_refused_total\":116,"
        "\"max_queue_depth\":100,\"missed_turns_total\":113,\"occupancy\":1,\"page_errors_total\":154,\"pass_evicted_total\":123,"
        "\"pass_table_full_total\":109,\"promoted_total\":103,\"proxy_protocol_rejected_total\":128,"
        "\"queue_depth\":0,\"queued_total\":100,\"rejected_banned_total\":138,\"rejected_busy_total\":139,"
        "\"rejected_client_limit_total\":137,\"rejected_full_total\":136,\"rejected_maintenance_total\":140,"
        "\"reloads_total\":110,\"ring_full_total\":108,\"slots_reclaimed_total\":112,"
        "\"timeouts_client_body_total\":118,\"timeouts_client_header_total\":117,"
        "\"timeouts_keepalive_total\":120,\"timeouts_queue_hold_total\":152,\"timeouts_send_total\":119,"
        "\"timeouts_total\":102,\"timeouts_tunnel_total\":122,\"timeouts_upstream_read_total\":121,"
        "\"token_ttl\":\"5m0s\",\"upstream\":\"http://127.0.0.1:3000\",\"upstream_errors_connect_total\":149,"
        "\"upstream_errors_reset_total\":151,\"upstream_errors_timeout_total\":150,"
        "\"upstream_responses_1xx_total\":144,\"upstream_responses_2xx_total\":145,"
        "\"upstream_responses_3xx_total\":146,\"upstream_responses_4xx_total\":147,"
        "\"upstream_responses_5xx_total\":148,\"utilization\":0.1,\"worker_restarts_total\":111,"
        "\"workers\":1,\"would_queue_total\":127}");
}

TEST_CASE("ops: cap endpoint") {
  SUBCASE("disabled without a token") {
    Site room(test::baseConfig(1));
    LocalResponse r = handleCap(room.ctx(), test::get("/_room/cap"), "{\"cap\":3}");
    CHECK(r.status == 404);
    CHECK(r.body.empty());
  }
  config::Config c = test::baseConfig(1);
  c.admin_token = "s3cret-token";
  Site room(std::move(c));
  auto post = [](Headers h) {
    Request r = test::get("/_room/cap", std::move(h));
    r.method = "POST";
    return r;
  };
  SUBCASE("authorization") {
    CHECK(handleCap(room.ctx(), post({}), "{\"cap\":3}").status == 401);
    CHECK(handleCap(room.ctx(), post({{"Authorization", "Bearer wrong"}}), "{\"cap\":3}").status == 401);
    CHECK(handleCap(room.ctx(), post({{"Authorization", "s3cret-toke"}}), "{\"cap\":3}").status == 401);
    CHECK(handleCap(room.ctx(), post({{"Authorization", "bearer s3cret-token"}}), "{\"cap\":3}").status == 401);
    CHECK(handleCap(room.ctx(), post({{"Authorization", ""}}), "{\"cap\":3}").status == 401);
    CHECK(room.segment->pages().cap() == 1);
  }
  SUBCASE("bad bodies") {
    Headers auth{{"Authorization", "Bearer s3cret-token"}};
    LocalResponse r = handleCap(room.ctx(), post(auth), "not json");
    CHECK(r.status == 400);
    CHECK(r.body == "{\"error\":\"invalid character 'o' in literal null (expecting 'u')\"}");
    CHECK(test::headerValue(r.headers, "Content-Type") == "application/json; charset=utf-8");
    CHECK(handleCap(room.ctx(), post(auth), "").body == "{\"error\":\"unexpected end of JSON input\"}");
    CHECK(handleCap(room.ctx(), post(auth), "{\"cap\":\"3\"}").status == 400);
    CHECK(handleCap(room.ctx(), post(auth), "{\"cap\":3000000000}").status == 400);
    CHECK(handleCap(room.ctx(), post(auth), "{}").body == "{\"error\":\"room: invalid capacity 0: must be >= 1\"}");
    CHECK(handleCap(room.ctx(), post(auth), "{\"cap\":-5}").body ==
          "{\"error\":\"room: invalid capacity -5: must be >= 1\"}");
    CHECK(room.segment->pages().cap() == 1);
  }
  SUBCASE("success, bare or Bearer token") {
    LocalResponse r = handleCap(room.ctx(), post({{"Authorization", "s3cret-token"}}), "{\"cap\":3}");
    CHECK(r.status == 200);
    CHECK(r.body == "{\"cap\":3,\"occupancy\":0}");
    CHECK(room.segment->pages().cap() == 3);
    r = handleCap(room.ctx(), post({{"Authorization", "Bearer s3cret-token"}}), " {\"cap\": 2} ");
    CHECK(r.status == 200);
    CHECK(room.segment->pages().cap() == 2);
  }
}
