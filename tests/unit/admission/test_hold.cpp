// The page guard with -queue-hold over a real in-process segment: held
// requests are admitted in ticket order when slots free, a hold that runs out
// answers exactly like -queue-hold 0 and leaves the ticket in line, a client
// that goes away keeps its ticket only if it brought the cookie, rechecks keep
// the ticket seen, and a held request's Wait says which ticket it waits on.
#include <doctest/doctest.h>
#include <unistd.h>

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

Headers browser() {
  return {{"Accept", "text/html,application/xhtml+xml,*/*;q=0.8"}};
}

Headers withTicket(const std::string& ticket, Headers h = {}) {
  h.push_back({"Cookie", "room_ticket=" + ticket});
  return h;
}

config::Config holdConfig(int32_t cap, Millis hold) {
  config::Config c = test::baseConfig(cap);
  c.queue_hold = hold;
  return c;
}

// Drains a slot's eventfd; true when it had been written since the last drain.
bool woken(const Site& room, shm::WorkerSlot slot = 0) {
  return room.segment->slots().consumeWake(slot);  // as the worker does
}

// admit() must keep the request held and say the ticket it waits on.
uint64_t expectHeld(RequestGuard& guard, const Request& request, Millis now, Millis deadline) {
  Admission a = guard.admit(request, now);
  REQUIRE(a.kind == Admission::Kind::Wait);
  CHECK(a.deadline == deadline);
  CHECK(a.resource == shm::Resource::PageSlot);
  REQUIRE(a.held_ticket.has_value());
  return *a.held_ticket;
}

}  // namespace

TEST_CASE("queue-hold 0: a request that has to queue is answered at once, as before") {
  Site room(test::baseConfig(1));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);

  auto api = makePageGuard(room.ctx());
  Admission a = api->admit(test::get("/gated"), 1000);
  REQUIRE(a.kind == Admission::Kind::Respond);
  CHECK(a.response.status == 429);
  CHECK(a.response.body == kQueuedJson);
  CHECK(api->outcome() == Outcome::Queued);
  std::string ticket = test::setCookieValue(a.response.headers, "room_ticket");
  CHECK(ticket.size() == 32);
  CHECK_FALSE(a.held_ticket.has_value());
  CHECK(room.parked(shm::Resource::PageSlot) == 0);

  auto again = makePageGuard(room.ctx());
  Admission b = again->admit(test::get("/gated", withTicket(ticket, browser())), 2000);
  REQUIRE(b.kind == Admission::Kind::Respond);
  CHECK(b.response.status == 200);
  CHECK(test::setCookieValue(b.response.headers, "room_ticket") == ticket);
  CHECK_FALSE(b.held_ticket.has_value());
  holder->release();
}

TEST_CASE("queue-hold: held requests are admitted in FIFO order as slots free, across workers") {
  Site room(holdConfig(1, 5000));
  auto second = room.other(1);
  auto holder = makePageGuard(room.ctx());
  Admission first = holder->admit(test::get("/slow"), 1000);
  REQUIRE(first.kind == Admission::Kind::Proceed);
  CHECK_FALSE(first.held_ticket.has_value());  // an admission holds nothing

  auto b = makePageGuard(room.ctx());
  auto c = makePageGuard(second->context);
  const uint64_t tb = expectHeld(*b, test::get("/b"), 1000, 6000);
  const uint64_t tc = expectHeld(*c, test::get("/c", browser()), 1100, 6100);
  CHECK(tc > tb);
  CHECK(b->outcome() != Outcome::Admitted);
  // Held requests are waiting visitors: they hold tickets, nothing else.
  CHECK(room.segment->tickets().queueDepth() == 2);
  CHECK(room.segment->tickets().liveQueueDepth() == 2);
  CHECK(room.segment->stats().snapshot().queued_total == 2);
  CHECK(room.segment->pages().occupancy() == 1);
  CHECK(room.parked(shm::Resource::PageSlot) == 1);
  CHECK(second->parked(shm::Resource::PageSlot) == 1);

  // Nothing freed: rechecks keep both held, on the same tickets.
  CHECK(expectHeld(*c, test::get("/c", browser()), 1200, 6100) == tc);
  CHECK(expectHeld(*b, test::get("/b"), 1200, 6000) == tb);
  woken(room, 0);
  woken(room, 1);

  // The holder ends: both workers with held requests are woken, and only the
  // head of the line gets in.
  holder->release();
  CHECK(woken(room, 0));
  CHECK(woken(room, 1));
  CHECK(expectHeld(*c, test::get("/c", browser()), 1300, 6100) == tc);
  Admission ab = b->admit(test::get("/b"), 1300);
  REQUIRE(ab.kind == Admission::Kind::Proceed);
  CHECK_FALSE(ab.held_ticket.has_value());
  CHECK(b->outcome() == Outcome::Admitted);
  CHECK(
      admission::verifyPass(test::kTestSecret, test::setCookieValue(ab.response_headers, "concert_admit"), unixSeconds()));
  CHECK(test::setCookieValue(ab.response_headers, "room_ticket").empty());
  CHECK(room.segment->pages().occupancy() == 1);
  CHECK(room.parked(shm::Resource::PageSlot) == 0);
  CHECK(room.segment->tickets().liveQueueDepth() == 1);

  // b's slot comes back: c (on the other worker) is woken and admitted.
  CHECK(expectHeld(*c, test::get("/c", browser()), 1400, 6100) == tc);
  b->release();
  CHECK(woken(room, 1));
  Admission ac = c->admit(test::get("/c", browser()), 1500);
  REQUIRE(ac.kind == Admission::Kind::Proceed);
  CHECK(c->outcome() == Outcome::Admitted);
  CHECK(second->parked(shm::Resource::PageSlot) == 0);
  c->release();
  CHECK(room.segment->pages().occupancy() == 0);
  CHECK(room.segment->tickets().queueDepth() == 0);
  CHECK(room.segment->tickets().liveQueueDepth() == 0);
  CHECK(room.segment->stats().snapshot().timeouts_total == 0);
}

TEST_CASE("queue-hold: a hold that runs out answers the waiting room and leaves the ticket in line") {
  Site room(holdConfig(1, 2000));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);

  auto first = makePageGuard(room.ctx());
  const uint64_t t1 = expectHeld(*first, test::get("/a"), 1000, 3000);
  auto page = makePageGuard(room.ctx());
  const uint64_t t2 = expectHeld(*page, test::get("/p", browser()), 1000, 3000);

  SUBCASE("JSON 429 and the HTML page, byte for byte what -queue-hold 0 sends") {
    LocalResponse api = first->timedOut(test::get("/a"), 3000);
    CHECK(first->outcome() == Outcome::Queued);
    CHECK(api.status == 429);
    CHECK(api.body == kQueuedJson);
    CHECK(test::headerValue(api.headers, "Retry-After") == "5");
    CHECK(test::headerValue(api.headers, "Cache-Control") == "no-store");
    std::string ticket = test::setCookieValue(api.headers, "room_ticket");
    REQUIRE(ticket.size() == 32);
    CHECK(decodeTicketCookie(ticket)->ticket == t1);
    CHECK(test::setCookieValue(api.headers, "room_probe") == "1");
    CHECK(test::setCookieValue(api.headers, "concert_admit").empty());

    LocalResponse html = page->timedOut(test::get("/p", browser()), 3000);
    CHECK(page->outcome() == Outcome::Queued);
    CHECK(html.status == 200);
    CHECK(test::headerValue(html.headers, "Content-Type") == "text/html; charset=utf-8");
    CHECK(html.body == renderWaitingPage(*room.config, 2, common::Language::English, std::nullopt));
    CHECK(decodeTicketCookie(test::setCookieValue(html.headers, "room_ticket"))->ticket == t2);
    CHECK(test::setCookieValue(html.headers, "room_probe") == "1");

    first->release();
    page->release();
    CHECK(room.parked(shm::Resource::PageSlot) == 0);
    // Neither ticket was retired: both still wait, in the same order.
    CHECK(room.segment->tickets().liveQueueDepth() == 2);
    CHECK(room.segment->tickets().queueDepth() == 2);
    CHECK(room.segment->stats().snapshot().timeouts_total == 0);
    shm::TicketView view = room.segment->tickets().render(*decodeTicketCookie(ticket), 3100, room.config->token_ttl);
    CHECK(view.state == shm::TicketState::Waiting);
    CHECK(view.position == 1);

    // The visitor comes back with the cookie: held again on the same ticket,
    // and admitted once its turn comes.
    auto back = makePageGuard(room.ctx());
    CHECK(expectHeld(*back, test::get("/a", withTicket(ticket)), 4000, 6000) == t1);
    holder->release();
    Admission a = back->admit(test::get("/a", withTicket(ticket)), 4100);
    REQUIRE(a.kind == Admission::Kind::Proceed);
    CHECK(back->outcome() == Outcome::Admitted);
    back->release();
    CHECK(room.segment->tickets().liveQueueDepth() == 1);
  }
  SUBCASE("the client goes away while held: a ticket nobody has a cookie for leaves the line") {
    first->release();
    CHECK(room.parked(shm::Resource::PageSlot) == 1);  // page is still held
    CHECK(room.segment->tickets().liveQueueDepth() == 1);
    CHECK(room.segment->stats().snapshot().timeouts_total == 1);
    page->release();
    CHECK(room.parked(shm::Resource::PageSlot) == 0);
    CHECK(room.segment->tickets().liveQueueDepth() == 0);
    CHECK(room.segment->tickets().queueDepth() == 0);
    CHECK(room.segment->stats().snapshot().timeouts_total == 2);
    holder->release();
    // Nothing abandoned stands ahead of a new arrival: it goes straight in.
    auto late = makePageGuard(room.ctx());
    Admission a = late->admit(test::get("/late"), 5000);
    CHECK(a.kind == Admission::Kind::Proceed);
    late->release();
    (void)t1;
    (void)t2;
  }
  SUBCASE("the client goes away while held on a cookie it brought: the ticket stays in line") {
    LocalResponse api = first->timedOut(test::get("/a"), 3000);
    std::string ticket = test::setCookieValue(api.headers, "room_ticket");
    first->release();
    auto back = makePageGuard(room.ctx());
    CHECK(expectHeld(*back, test::get("/a", withTicket(ticket)), 3100, 5100) == t1);
    back->release();  // gone again, but the visitor holds the cookie
    page->release();  // page's ticket was never handed out: retired
    CHECK(room.segment->tickets().liveQueueDepth() == 1);
    CHECK(room.segment->stats().snapshot().timeouts_total == 1);
    shm::TicketView view = room.segment->tickets().render(*decodeTicketCookie(ticket), 3200, room.config->token_ttl);
    CHECK(view.state == shm::TicketState::Waiting);
    CHECK(view.position == 1);
    // A new arrival waits behind the kept ticket; the reaper retires it once
    // nobody has come back for a whole token-ttl, and its wake-up lets the
    // newcomer in.
    holder->release();
    auto late = makePageGuard(room.ctx());
    const uint64_t t3 = expectHeld(*late, test::get("/late"), 5000, 7000);
    CHECK(t3 > t2);
    woken(room);
    shm::SweepLimits limits;
    limits.ttl = room.config->token_ttl;
    CHECK(room.segment->tickets().sweep(3200 + room.config->token_ttl + 1, limits).expired == 1);
    CHECK(woken(room));
    Admission a = late->admit(test::get("/late"), 5100);
    CHECK(a.kind == Admission::Kind::Proceed);
    late->release();
  }
  holder->release();
}

TEST_CASE("queue-hold: every recheck touches the held ticket, so the janitor never takes it") {
  config::Config c = holdConfig(1, 3'600'000);
  c.token_ttl = 30'000;
  Site room(std::move(c));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);
  auto held = makePageGuard(room.ctx());
  // The worker rechecks held requests every 250 ms; here every 12 s or so.
  for (Millis at : {1000, 12'000, 24'000, 36'000, 50'000}) expectHeld(*held, test::get("/a"), at, 3'601'000);
  // Last touched 14 s ago: past neither the TTL nor the first-poll grace,
  // though it was issued 63 s ago.
  shm::SweepLimits limits;
  limits.ttl = 30'000;
  limits.first_poll = 15'000;
  const shm::SweepReport swept = room.segment->tickets().sweep(50'000 + 14'000, limits);
  CHECK(swept.expired == 0);
  CHECK(swept.ghosts == 0);
  CHECK(room.segment->tickets().liveQueueDepth() == 1);
  holder->release();
  CHECK(held->admit(test::get("/a"), 80'000).kind == Admission::Kind::Proceed);
  held->release();
}

TEST_CASE("queue-hold: the hold of the request a ticket was issued to is no return") {
  Site room(holdConfig(1, 3000));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);
  auto held = makePageGuard(room.ctx());
  for (Millis at : {1000, 2000, 3000}) expectHeld(*held, test::get("/a"), at, 4000);
  LocalResponse answer = held->timedOut(test::get("/a"), 4000);
  CHECK(answer.status == 429);
  held->release();
  // Never seen again: the first-poll grace counts from the answer.
  shm::SweepLimits limits;
  limits.ttl = 300'000;
  limits.first_poll = 15'000;
  CHECK(room.segment->tickets().sweep(4000 + 14'000, limits).ghosts == 0);
  CHECK(room.segment->tickets().liveQueueDepth() == 1);
  CHECK(room.segment->tickets().sweep(4000 + 15'001, limits).ghosts == 1);
  CHECK(room.segment->tickets().queueDepth() == 0);

  // A visitor who comes back with the cookie (a page request, or a poll) is
  // seen: the grace no longer applies.
  auto again = makePageGuard(room.ctx());
  for (Millis at : {20'000, 21'000, 22'000}) expectHeld(*again, test::get("/b"), at, 23'000);
  LocalResponse second = again->timedOut(test::get("/b"), 23'000);
  again->release();
  const std::string ticket = test::setCookieValue(second.headers, "room_ticket");
  auto back = makePageGuard(room.ctx());
  expectHeld(*back, test::get("/b", withTicket(ticket)), 24'000, 27'000);
  back->release();
  CHECK(room.segment->tickets().sweep(24'000 + 60'000, limits).ghosts == 0);
  CHECK(room.segment->tickets().liveQueueDepth() == 1);
  holder->release();
}

TEST_CASE("queue-hold: two held requests on one cookie; the second queues again at the back") {
  Site room(holdConfig(1, 10'000));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);
  auto first = makePageGuard(room.ctx());
  expectHeld(*first, test::get("/a"), 1000, 11'000);
  std::string ticket = test::setCookieValue(first->timedOut(test::get("/a"), 11'000).headers, "room_ticket");
  first->release();
  const uint64_t t = decodeTicketCookie(ticket)->ticket;

  auto tab1 = makePageGuard(room.ctx());
  auto tab2 = makePageGuard(room.ctx());
  CHECK(expectHeld(*tab1, test::get("/a", withTicket(ticket)), 12'000, 22'000) == t);
  CHECK(expectHeld(*tab2, test::get("/b", withTicket(ticket)), 12'000, 22'000) == t);
  holder->release();
  REQUIRE(tab1->admit(test::get("/a", withTicket(ticket)), 12'100).kind == Admission::Kind::Proceed);
  // The shared ticket is gone: the other tab takes a new one, still held
  // until the same deadline.
  const uint64_t again = expectHeld(*tab2, test::get("/b", withTicket(ticket)), 12'200, 22'000);
  CHECK(again > t);
  tab1->release();
  REQUIRE(tab2->admit(test::get("/b", withTicket(ticket)), 12'300).kind == Admission::Kind::Proceed);
  tab2->release();
  CHECK(room.segment->tickets().liveQueueDepth() == 0);
}

TEST_CASE("queue-hold: the breaker still refuses new arrivals at once") {
  config::Config c = holdConfig(1, 10'000);
  c.max_queue = 1;
  Site room(std::move(c));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);
  auto held = makePageGuard(room.ctx());
  expectHeld(*held, test::get("/a"), 1000, 11'000);
  auto refused = makePageGuard(room.ctx());
  Admission a = refused->admit(test::get("/b"), 1000);
  REQUIRE(a.kind == Admission::Kind::Respond);
  CHECK(a.response.status == 503);
  CHECK(refused->outcome() == Outcome::Rejected);
  CHECK_FALSE(a.held_ticket.has_value());
  held->release();
  holder->release();
}

TEST_CASE("queue-hold: a draining worker answers held requests with the waiting room at once") {
  Site room(holdConfig(1, 10'000));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);
  auto held = makePageGuard(room.ctx());
  const uint64_t t = expectHeld(*held, test::get("/a", browser()), 1000, 11'000);

  room.self->draining = true;
  Admission a = held->admit(test::get("/a", browser()), 1200);
  REQUIRE(a.kind == Admission::Kind::Respond);
  CHECK(a.response.status == 200);
  CHECK(held->outcome() == Outcome::Queued);
  CHECK(decodeTicketCookie(test::setCookieValue(a.response.headers, "room_ticket"))->ticket == t);
  CHECK(room.parked(shm::Resource::PageSlot) == 0);
  auto late = makePageGuard(room.ctx());
  Admission b = late->admit(test::get("/b"), 1300);
  REQUIRE(b.kind == Admission::Kind::Respond);
  CHECK(b.response.status == 429);
  CHECK_FALSE(b.held_ticket.has_value());
  room.self->draining = false;

  held->release();
  late->release();
  CHECK(room.segment->tickets().liveQueueDepth() == 2);
  holder->release();
}

TEST_CASE("queue-hold: a held ticket whose client leaves before its turn is taken wakes the held requests behind it") {
  Site room(holdConfig(1, 10'000));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);
  auto first = makePageGuard(room.ctx());
  const uint64_t t1 = expectHeld(*first, test::get("/a"), 1000, 11'000);
  auto second = room.other(2);
  auto behind = makePageGuard(second->context);
  const uint64_t t2 = expectHeld(*behind, test::get("/b"), 1000, 11'000);
  CHECK(t2 > t1);
  holder->release();
  // The first held ticket's turn has come, but its client goes away before
  // the recheck: the ticket (issued for it, no cookie out) leaves the line,
  // and the held worker hears about it.
  woken(room, 2);
  first->release();
  CHECK(woken(room, 2));
  CHECK(behind->admit(test::get("/b"), 1100).kind == Admission::Kind::Proceed);
  CHECK(room.segment->stats().snapshot().timeouts_total == 1);
  behind->release();
}
