// GET /queue/status: every ticket state, pricing and the
// cookie refresh.
#include <doctest/doctest.h>

#include "fixture.h"

using namespace concert;
using namespace concert::admission;
using namespace concert::http;
using concert::test::Site;

namespace {

std::string queueOne(Site& room, std::unique_ptr<RequestGuard>& holder) {
  holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);
  auto g = makePageGuard(room.ctx());
  Admission a = g->admit(test::get("/"), 1000);
  REQUIRE(a.response.status == 429);
  return test::setCookieValue(a.response.headers, "room_ticket");
}

Request statusRequest(const std::string& ticket) {
  return test::get("/queue/status", {{"Cookie", "room_ticket=" + ticket}});
}

}  // namespace

TEST_CASE("status: OPTIONS, no cookie, malformed, unknown") {
  Site room(test::baseConfig(1));
  Request options = test::get("/queue/status");
  options.method = "OPTIONS";
  CHECK(handleQueueStatus(room.ctx(), options, 1000).status == 204);

  LocalResponse none = handleQueueStatus(room.ctx(), test::get("/queue/status"), 1000);
  CHECK(none.status == 200);
  CHECK(none.body == "{\"ready\":false,\"cookies_required\":true}");
  CHECK(test::headerValue(none.headers, "Content-Type") == "application/json; charset=utf-8");
  CHECK(test::headerValue(none.headers, "Cache-Control") == "no-store");

  CHECK(handleQueueStatus(room.ctx(), statusRequest("nothex"), 1000).body == "{\"ready\":true}");
  CHECK(handleQueueStatus(room.ctx(), statusRequest(std::string(32, '0')), 1000).body == "{\"ready\":true}");
  CHECK(handleQueueStatus(room.ctx(), statusRequest("00000000000000050000000000000007"), 1000).body ==
        "{\"ready\":true}");
}

TEST_CASE("status: waiting, rate limited, ready") {
  Site room(test::baseConfig(1));
  std::unique_ptr<RequestGuard> holder;
  std::string ticket = queueOne(room, holder);

  LocalResponse w = handleQueueStatus(room.ctx(), statusRequest(ticket), 5000);
  CHECK(w.status == 200);
  CHECK(w.body == "{\"ready\":false,\"position\":1,\"eta_seconds\":null,\"utilization\":0.1}");
  CHECK(test::setCookies(w.headers).empty());

  LocalResponse limited = handleQueueStatus(room.ctx(), statusRequest(ticket), 5500);
  CHECK(limited.status == 429);
  CHECK(test::headerValue(limited.headers, "Retry-After") == "1");
  CHECK(limited.body == "{\"ready\":false,\"position\":1,\"eta_seconds\":null}");
  CHECK(test::setCookies(limited.headers).empty());

  holder->release();
  LocalResponse ready = handleQueueStatus(room.ctx(), statusRequest(ticket), 7000);
  CHECK(ready.status == 200);
  CHECK(ready.body == "{\"ready\":true}");
}

TEST_CASE("status: expired ticket is ready and evicted") {
  Site room(test::baseConfig(1));
  std::unique_ptr<RequestGuard> holder;
  std::string ticket = queueOne(room, holder);
  Millis later = 1000 + room.config->token_ttl + 1000;
  CHECK(handleQueueStatus(room.ctx(), statusRequest(ticket), later).body == "{\"ready\":true}");
  CHECK(room.segment->stats().snapshot().evicted_total == 1);
  CHECK(room.segment->tickets().liveQueueDepth() == 0);
}

TEST_CASE("status: pricing and cookie refresh") {
  config::Config c = test::baseConfig(1);
  c.rate = 2;
  c.surge = 0.5;
  Site room(std::move(c));
  std::unique_ptr<RequestGuard> holder;
  queueOne(room, holder);
  auto g = makePageGuard(room.ctx());
  Admission second = g->admit(test::get("/"), 1000);
  std::string ticket = test::setCookieValue(second.response.headers, "room_ticket");
  REQUIRE(room.segment->tickets().queueDepth() == 2);

  // position 2, rate_per_pos = 2 + 2 * 0.5 = 3, skip_cost = (2 - 1) * 3
  LocalResponse w = handleQueueStatus(room.ctx(), statusRequest(ticket), 5000);
  CHECK(w.body ==
        "{\"ready\":false,\"position\":2,\"eta_seconds\":null,\"utilization\":0.1,\"skip_cost\":3,\"rate_per_pos\":3}");

  // cookies re-sent once ttl/3 has passed since they were last sent
  Millis later = 1000 + room.config->token_ttl / 3 + 1000;
  LocalResponse r = handleQueueStatus(room.ctx(), statusRequest(ticket), later);
  CHECK(r.status == 200);
  CHECK(test::setCookieValue(r.headers, "room_ticket") == ticket);
  CHECK(test::setCookieValue(r.headers, "room_probe") == "1");
}

TEST_CASE("status: rate limit on a ready ticket omits the position; pricing at the head") {
  config::Config c = test::baseConfig(1);
  c.rate = 2;
  Site room(std::move(c));
  std::unique_ptr<RequestGuard> holder;
  std::string ticket = queueOne(room, holder);

  // Head of the line: nothing to skip, so only the rate is shown.
  LocalResponse head = handleQueueStatus(room.ctx(), statusRequest(ticket), 5000);
  CHECK(head.body == "{\"ready\":false,\"position\":1,\"eta_seconds\":null,\"utilization\":0.1,\"rate_per_pos\":2}");

  holder->release();
  CHECK(handleQueueStatus(room.ctx(), statusRequest(ticket), 7000).body == "{\"ready\":true}");
  LocalResponse limited = handleQueueStatus(room.ctx(), statusRequest(ticket), 7100);
  CHECK(limited.status == 429);
  CHECK(limited.body == "{\"ready\":false}");
}

TEST_CASE("status and the JSON 429: eta_seconds from the line's pace once 20 went in") {
  Site room(test::baseConfig(1));
  // 20 admissions from the line over 50 s of waiting: two every 5 s.
  shm::LineRate& pace = room.segment->lineRate();
  for (int second = 0; second <= 50; ++second) {
    if (second % 5 == 1 || second % 5 == 3) pace.admitted();
    pace.roll(second * 1000, 5, 1);
  }
  REQUIRE(pace.admissions() == 20);
  std::unique_ptr<RequestGuard> holder;
  std::string first = queueOne(room, holder);
  auto g = makePageGuard(room.ctx());
  Admission second = g->admit(test::get("/"), 1000);
  REQUIRE(second.response.status == 429);
  CHECK(second.response.body ==
        "{\"eta_seconds\":5,\"hint\":\"keep the room_ticket cookie and retry to hold your position\","
        "\"queued\":true,\"retry_after_seconds\":5,\"status_url\":\"/queue/status\"}");
  CHECK(handleQueueStatus(room.ctx(), statusRequest(first), 5000).body ==
        "{\"ready\":false,\"position\":1,\"eta_seconds\":3,\"utilization\":0.1}");
  std::string ticket = test::setCookieValue(second.response.headers, "room_ticket");
  CHECK(handleQueueStatus(room.ctx(), statusRequest(ticket), 5000).body ==
        "{\"ready\":false,\"position\":2,\"eta_seconds\":5,\"utilization\":0.1}");
  LocalResponse limited = handleQueueStatus(room.ctx(), statusRequest(ticket), 5500);
  CHECK(limited.status == 429);
  CHECK(limited.body == "{\"ready\":false,\"position\":2,\"eta_seconds\":5}");
  CHECK(etaSeconds(*room.segment, 10) == 25);
  // The cap doubled: so does the pace, at once.
  room.segment->pages().setCap(2);
  CHECK(etaSeconds(*room.segment, 10) == 13);
}
