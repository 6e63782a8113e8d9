// The page guard over a real in-process segment: fast path, queueing (HTML
// and JSON byte-exact), breaker, resume, release, the slot wait.
#include <doctest/doctest.h>

#include "admission/pass.h"
#include "fixture.h"
#include "admission/answers.h"

using namespace concert;
using namespace concert::admission;
using namespace concert::http;
using concert::test::Site;

namespace {

// Fewer than 20 admissions from the line in these rooms: no ETA yet.
const std::string kQueuedJson =
    "{\"eta_seconds\":null,\"hint\":\"keep the room_ticket cookie and retry to hold your position\",\"queued\":true,"
    "\"retry_after_seconds\":5,\"status_url\":\"/queue/status\"}";
const std::string kFullJson = "{\"error\":\"waiting room is full\",\"queued\":false,\"retry_after_seconds\":5}";

Headers browser() {
  return {{"Accept", "text/html,application/xhtml+xml,*/*;q=0.8"}};
}

Headers withTicket(const std::string& ticket, Headers h = {}) {
  h.push_back({"Cookie", "theme=dark; room_ticket=" + ticket});
  return h;
}

}  // namespace

TEST_CASE("page guard: fast path admits and issues a pass") {
  Site room(test::baseConfig(2));
  auto guard = makePageGuard(room.ctx());
  Admission a = guard->admit(test::get("/hello"), 1000);
  REQUIRE(a.kind == Admission::Kind::Proceed);
  CHECK(guard->outcome() == Outcome::Admitted);
  CHECK(room.segment->pages().occupancy() == 1);
  auto cookies = test::setCookies(a.response_headers);
  REQUIRE(cookies.size() == 1);
  CHECK(cookies[0].rfind("concert_admit=", 0) == 0);
  CHECK(cookies[0].find("; Max-Age=600; HttpOnly; SameSite=Lax") != std::string::npos);
  std::string pass = test::setCookieValue(a.response_headers, "concert_admit");
  CHECK(pass.size() == 54);
  CHECK(admission::verifyPass(test::kTestSecret, pass, unixSeconds()));
  CHECK(test::setCookieValue(a.response_headers, "room_ticket").empty());
  guard->release();
  guard->release();  // idempotent
  CHECK(room.segment->pages().occupancy() == 0);
}

TEST_CASE("page guard: pass refreshed only past half-life") {
  Site room(test::baseConfig(2));
  admission::PassId id;
  id.fill(7);
  SUBCASE("fresh pass: no Set-Cookie") {
    std::string fresh = admission::mintPass(test::kTestSecret, id, unixSeconds() + 590);
    auto guard = makePageGuard(room.ctx());
    Admission a = guard->admit(test::get("/", {{"Cookie", "concert_admit=" + fresh}}), 1000);
    REQUIRE(a.kind == Admission::Kind::Proceed);
    CHECK(test::setCookies(a.response_headers).empty());
  }
  SUBCASE("pass minted 3/4 ttl ago: same id, new expiry") {
    std::string old = admission::mintPass(test::kTestSecret, id, unixSeconds() + 150);
    auto guard = makePageGuard(room.ctx());
    Admission a = guard->admit(test::get("/", {{"Cookie", "concert_admit=" + old}}), 1000);
    REQUIRE(a.kind == Admission::Kind::Proceed);
    auto pass =
        admission::verifyPass(test::kTestSecret, test::setCookieValue(a.response_headers, "concert_admit"), unixSeconds());
    REQUIRE(pass);
    CHECK(pass->id == id);
    CHECK(pass->expiry >= unixSeconds() + 599);
  }
  SUBCASE("forged pass: replaced by a new one") {
    auto guard = makePageGuard(room.ctx());
    Admission a = guard->admit(test::get("/", {{"Cookie", "concert_admit=forged"}}), 1000);
    auto pass =
        admission::verifyPass(test::kTestSecret, test::setCookieValue(a.response_headers, "concert_admit"), unixSeconds());
    REQUIRE(pass);
    CHECK(pass->id != id);
  }
}

TEST_CASE("page guard: queued responses, JSON and HTML") {
  Site room(test::baseConfig(1));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);

  auto api = makePageGuard(room.ctx());
  Admission a = api->admit(test::get("/gated"), 1000);
  REQUIRE(a.kind == Admission::Kind::Respond);
  CHECK(api->outcome() == Outcome::Queued);
  CHECK(a.response.status == 429);
  CHECK(a.response.body == kQueuedJson);
  CHECK(test::headerValue(a.response.headers, "Content-Type") == "application/json; charset=utf-8");
  CHECK(test::headerValue(a.response.headers, "Retry-After") == "5");
  CHECK(test::headerValue(a.response.headers, "Cache-Control") == "no-store");
  std::string ticket = test::setCookieValue(a.response.headers, "room_ticket");
  CHECK(ticket.size() == 32);
  CHECK(test::setCookieValue(a.response.headers, "room_probe") == "1");
  CHECK(test::setCookieValue(a.response.headers, "concert_admit").empty());
  api->release();

  auto html = makePageGuard(room.ctx());
  Admission b = html->admit(test::get("/gated", browser()), 1000);
  REQUIRE(b.kind == Admission::Kind::Respond);
  CHECK(b.response.status == 200);
  CHECK(test::headerValue(b.response.headers, "Content-Type") == "text/html; charset=utf-8");
  CHECK(b.response.body.find("aria-atomic=\"true\">2</span>") != std::string::npos);
  CHECK(b.response.body.find("{{.") == std::string::npos);
  CHECK(b.response.body.find("var SKIP_URL = \"\";") != std::string::npos);
  CHECK(test::setCookieValue(b.response.headers, "room_ticket").size() == 32);
  CHECK(test::setCookieValue(b.response.headers, "room_probe") == "1");
  CHECK(test::setCookieValue(b.response.headers, "concert_admit").empty());
  html->release();

  CHECK(room.segment->stats().snapshot().queued_total == 2);
  CHECK(room.segment->pages().occupancy() == 1);

  SUBCASE("a waiting ticket re-renders at the same place with both cookies") {
    auto again = makePageGuard(room.ctx());
    Admission c = again->admit(test::get("/gated", withTicket(ticket)), 2000);
    REQUIRE(c.kind == Admission::Kind::Respond);
    CHECK(c.response.status == 429);
    CHECK(test::setCookieValue(c.response.headers, "room_ticket") == ticket);
    CHECK(test::setCookieValue(c.response.headers, "room_probe") == "1");
    CHECK(room.segment->stats().snapshot().queued_total == 2);
  }
  SUBCASE("resume once ready: admitted on the same ticket") {
    holder->release();
    auto again = makePageGuard(room.ctx());
    Admission c = again->admit(test::get("/gated", withTicket(ticket)), 2000);
    REQUIRE(c.kind == Admission::Kind::Proceed);
    CHECK(again->outcome() == Outcome::Admitted);
    CHECK(room.segment->pages().occupancy() == 1);
    again->release();
    CHECK(room.segment->pages().occupancy() == 0);
  }
}

TEST_CASE("page guard: api-json off serves the HTML page to API clients") {
  config::Config c = test::baseConfig(1);
  c.api_json = false;
  Site room(std::move(c));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);
  auto api = makePageGuard(room.ctx());
  Admission a = api->admit(test::get("/x", {{"Accept", "application/json"}}), 1000);
  CHECK(a.response.status == 200);
  CHECK(test::headerValue(a.response.headers, "Content-Type") == "text/html; charset=utf-8");
}

TEST_CASE("page guard: custom template and skip URL") {
  config::Config c = test::baseConfig(1);
  c.html_template = "<p>pos={{.Position}} skip={{.SkipURL}} again={{.Position}}</p>";
  c.skip_url = "https://pay.example/skip";
  SUBCASE("no rate: SkipURL empty") {
    Site room(c);
    CHECK(renderWaitingPage(*room.config, 3, common::Language::English, std::nullopt) == "<p>pos=3 skip= again=3</p>");
    CHECK(renderWaitingPage(*room.config, 0, common::Language::English, std::nullopt) == "<p>pos=1 skip= again=1</p>");
  }
  SUBCASE("rate > 0: SkipURL substituted") {
    c.rate = 1.5;
    Site room(c);
    CHECK(renderWaitingPage(*room.config, 4, common::Language::English, std::nullopt) ==
          "<p>pos=4 skip=https://pay.example/skip again=4</p>");
  }
}

TEST_CASE("page guard: breaker answers 503 JSON and HTML") {
  config::Config c = test::baseConfig(1);
  c.max_queue = 1;
  Site room(std::move(c));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);
  auto first = makePageGuard(room.ctx());
  Admission q = first->admit(test::get("/a"), 1000);
  CHECK(q.response.status == 429);
  std::string ticket = test::setCookieValue(q.response.headers, "room_ticket");

  auto second = makePageGuard(room.ctx());
  Admission b = second->admit(test::get("/b"), 1000);
  REQUIRE(b.kind == Admission::Kind::Respond);
  CHECK(second->outcome() == Outcome::Rejected);
  CHECK(b.response.status == 503);
  CHECK(b.response.body == kFullJson);
  CHECK(test::headerValue(b.response.headers, "Retry-After") == "5");
  CHECK(test::headerValue(b.response.headers, "Content-Type") == "application/json; charset=utf-8");
  CHECK(test::setCookies(b.response.headers).empty());

  auto third = makePageGuard(room.ctx());
  Admission h = third->admit(test::get("/b", browser()), 1000);
  CHECK(h.response.status == 503);
  CHECK(test::headerValue(h.response.headers, "Content-Type") == "text/html; charset=utf-8");
  CHECK(test::headerValue(h.response.headers, "Retry-After") == "5");
  CHECK(h.response.body.find("waiting room is full") != std::string::npos);

  // A visitor holding a live ticket is never refused by the breaker.
  auto back = makePageGuard(room.ctx());
  Admission r = back->admit(test::get("/a", withTicket(ticket)), 1500);
  CHECK(r.response.status == 429);
  CHECK(back->outcome() == Outcome::Queued);
}

TEST_CASE("page guard: release returns the slot and finishes the ticket") {
  Site room(test::baseConfig(1));
  {
    auto a = makePageGuard(room.ctx());
    REQUIRE(a->admit(test::get("/"), 1000).kind == Admission::Kind::Proceed);
    a->release();
  }
  // Destroying an unreleased guard releases too.
  {
    auto b = makePageGuard(room.ctx());
    REQUIRE(b->admit(test::get("/"), 1000).kind == Admission::Kind::Proceed);
  }
  CHECK(room.segment->pages().occupancy() == 0);
  CHECK(room.segment->tickets().queueDepth() == 0);
  auto c = makePageGuard(room.ctx());
  CHECK(c->admit(test::get("/"), 1000).kind == Admission::Kind::Proceed);
  CHECK(room.segment->stats().snapshot().queued_total == 0);
}

TEST_CASE("page guard: nobody waits for a slot held elsewhere; the line goes in when it frees") {
  Site room(test::baseConfig(1));
  // Another worker holds the only page slot (the shape of a cap shrink or
  // of another worker's request taking the last slot first).
  REQUIRE(room.segment->pages().tryAcquire(1));
  auto guard = makePageGuard(room.ctx());
  Admission a = guard->admit(test::get("/"), 1000);
  REQUIRE(a.kind == Admission::Kind::Respond);
  CHECK(a.response.status == 429);
  CHECK(room.parked(shm::Resource::PageSlot) == 0);
  const std::string ticket = test::setCookieValue(a.response.headers, "room_ticket");
  REQUIRE(ticket.size() == 32);
  guard->release();

  auto again = makePageGuard(room.ctx());
  CHECK(again->admit(test::get("/", withTicket(ticket)), 1500).response.status == 429);
  again->release();
  room.segment->pages().release(1);
  auto turn = makePageGuard(room.ctx());
  REQUIRE(turn->admit(test::get("/", withTicket(ticket)), 2000).kind == Admission::Kind::Proceed);
  CHECK(room.segment->tickets().liveQueueDepth() == 0);
  CHECK(room.segment->pages().occupancy() == 1);
  turn->release();
  CHECK(room.segment->pages().occupancy() == 0);
  CHECK(room.segment->stats().snapshot().timeouts_total == 0);
}

TEST_CASE("page guard: FIFO across a full room") {
  Site room(test::baseConfig(1));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/"), 1000).kind == Admission::Kind::Proceed);
  std::vector<std::string> tickets;
  for (int i = 0; i < 5; ++i) {
    auto g = makePageGuard(room.ctx());
    Admission a = g->admit(test::get("/"), 1000);
    REQUIRE(a.response.status == 429);
    tickets.push_back(test::setCookieValue(a.response.headers, "room_ticket"));
  }
  holder->release();
  Millis now = 2000;
  for (size_t i = 0; i < tickets.size(); ++i) {
    // Everyone behind the head of the line is still waiting...
    for (size_t j = i + 1; j < tickets.size(); ++j) {
      auto g = makePageGuard(room.ctx());
      CHECK(g->admit(test::get("/", withTicket(tickets[j])), now).response.status == 429);
    }
    // ...and the head is admitted.
    auto head = makePageGuard(room.ctx());
    REQUIRE(head->admit(test::get("/", withTicket(tickets[i])), now).kind == Admission::Kind::Proceed);
    head->release();
    now += 10;
  }
}

TEST_CASE("slot waiters: the segment flag follows the first park and the last unpark") {
  Site room(test::baseConfig(1));
  // Raise and lower the flag, then prove it through wake(): only a flagged
  // slot's eventfd is written.
  auto woken = [&room]() {
    room.segment->slots().wake(shm::Resource::AssetSlot);
    return room.segment->slots().consumeWake(0);  // as the worker does
  };
  CHECK_FALSE(woken());
  room.self->waiters.park(shm::Resource::AssetSlot);
  room.self->waiters.park(shm::Resource::AssetSlot);
  CHECK(room.parked(shm::Resource::AssetSlot) == 2);
  CHECK(woken());
  room.self->waiters.unpark(shm::Resource::AssetSlot);
  CHECK(woken());
  room.self->waiters.unpark(shm::Resource::AssetSlot);
  CHECK_FALSE(woken());
  room.self->waiters.unpark(shm::Resource::AssetSlot);  // extra unpark is harmless
  CHECK(room.parked(shm::Resource::AssetSlot) == 0);
  // Another slot's parking is its own.
  auto other = room.other(1);
  other->waiters.park(shm::Resource::AssetSlot);
  CHECK_FALSE(woken());
  other->waiters.unpark(shm::Resource::AssetSlot);
}
