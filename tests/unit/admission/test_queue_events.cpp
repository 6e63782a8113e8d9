// GET /queue/events, the admission side: what a stream's opening and each
// recheck say, over a real in-process segment. Answers without a stream
// match /queue/status; the first event carries /queue/status's body; rechecks
// touch the ticket without spending the poll rate limit, say `ready` once the
// ticket may take a slot (or left the line), send a changed position at most
// once every 5 s (and only when the caller lets it), end the stream for a cookie refresh or a drain, and keep
// the slot registered as a PageSlot waiter exactly while the stream is open.
#include <doctest/doctest.h>
#include <unistd.h>

#include "fixture.h"

using namespace concert;
using namespace concert::admission;
using namespace concert::http;
using concert::test::Site;

namespace {

using Kind = QueueEvents::Event::Kind;

// A cookie-less API request that has to queue: its room_ticket.
std::string queueOne(Site& room, Millis now = 1000) {
  auto g = makePageGuard(room.ctx());
  Admission a = g->admit(test::get("/"), now);
  REQUIRE(a.response.status == 429);
  return test::setCookieValue(a.response.headers, "room_ticket");
}

// The only page slot, held until release().
std::unique_ptr<RequestGuard> holdSlot(Site& room) {
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);
  return holder;
}

Request eventsRequest(const std::string& ticket) {
  return test::get("/queue/events", {{"Cookie", "room_ticket=" + ticket}});
}

Request statusRequest(const std::string& ticket) {
  return test::get("/queue/status", {{"Cookie", "room_ticket=" + ticket}});
}

// Drains slot 0's eventfd; true when it had been written since the last drain.
bool woken(const Site& room) {
  return room.segment->slots().consumeWake(0);
}

}  // namespace

TEST_CASE("events: no cookie, malformed and unknown tickets get /queue/status's answer, not a stream") {
  Site room(test::baseConfig(1));
  for (const Request& request :
       {test::get("/queue/events"), eventsRequest("nothex"), eventsRequest(std::string(32, '0')),
        eventsRequest("00000000000000050000000000000007")}) {
    QueueEvents events(room.ctx());
    QueueEvents::Opening o = events.open(request, 1000);
    CHECK_FALSE(o.stream);
    LocalResponse status = handleQueueStatus(room.ctx(), request, 1000);
    CHECK(o.response.status == 200);
    CHECK(o.response.body == status.body);
    CHECK(test::headerValue(o.response.headers, "Content-Type") == "application/json; charset=utf-8");
    CHECK(test::headerValue(o.response.headers, "Cache-Control") == "no-store");
    CHECK(o.response.headers.size() == status.headers.size());
    CHECK(room.parked(shm::Resource::PageSlot) == 0);
  }
  QueueEvents none(room.ctx());
  CHECK(none.open(test::get("/queue/events"), 1000).response.body == "{\"ready\":false,\"cookies_required\":true}");
}

TEST_CASE("events: an expired ticket is answered ready, plainly, and leaves the line") {
  Site room(test::baseConfig(1));
  auto holder = holdSlot(room);
  std::string ticket = queueOne(room);
  QueueEvents events(room.ctx());
  QueueEvents::Opening o = events.open(eventsRequest(ticket), 1000 + room.config->token_ttl + 1000);
  CHECK_FALSE(o.stream);
  CHECK(o.response.body == "{\"ready\":true}");
  CHECK(room.segment->tickets().liveQueueDepth() == 0);
  CHECK(room.parked(shm::Resource::PageSlot) == 0);
}

TEST_CASE("events: a waiting ticket opens a stream whose first event is /queue/status's body") {
  Site room(test::baseConfig(1));
  auto holder = holdSlot(room);
  queueOne(room);
  std::string ticket = queueOne(room);

  QueueEvents events(room.ctx());
  QueueEvents::Opening o = events.open(eventsRequest(ticket), 2000);
  REQUIRE(o.stream);
  CHECK(o.response.status == 200);
  CHECK(test::headerValue(o.response.headers, "Content-Type") == "text/event-stream");
  CHECK(test::headerValue(o.response.headers, "Cache-Control") == "no-store");
  CHECK(test::headerValue(o.response.headers, "X-Accel-Buffering") == "no");
  CHECK_FALSE(hasHeader(o.response.headers, "Content-Length"));
  // The head re-sends the cookies that keep the place.
  CHECK(test::setCookieValue(o.response.headers, "room_ticket") == ticket);
  CHECK(test::setCookieValue(o.response.headers, "room_probe") == "1");
  CHECK(o.response.body.empty());

  CHECK(o.first.kind == Kind::Position);
  CHECK_FALSE(o.first.ends());
  LocalResponse status = handleQueueStatus(room.ctx(), statusRequest(ticket), 2000);
  CHECK(o.first.data == status.body);
  CHECK(o.first.data == "{\"ready\":false,\"position\":2,\"eta_seconds\":null,\"utilization\":0.1}");
  CHECK(o.first.text() == "event: position\ndata: " + status.body + "\n\n");
  CHECK(events.ticket() == decodeTicketCookie(ticket)->ticket);
  CHECK(room.parked(shm::Resource::PageSlot) == 1);
}

TEST_CASE("events: pricing fields are the same as /queue/status's") {
  config::Config c = test::baseConfig(1);
  c.rate = 2;
  c.surge = 0.5;
  Site room(std::move(c));
  auto holder = holdSlot(room);
  queueOne(room);
  std::string ticket = queueOne(room);
  QueueEvents events(room.ctx());
  QueueEvents::Opening o = events.open(eventsRequest(ticket), 2000);
  REQUIRE(o.stream);
  CHECK(o.first.data == handleQueueStatus(room.ctx(), statusRequest(ticket), 2000).body);
  CHECK(o.first.data ==
        "{\"ready\":false,\"position\":2,\"eta_seconds\":null,\"utilization\":0.1,\"skip_cost\":3,\"rate_per_pos\":3}");
}

TEST_CASE("events: an unchanged position sends nothing; rechecks keep the ticket seen") {
  Site room(test::baseConfig(1));
  auto holder = holdSlot(room);
  std::string ticket = queueOne(room);
  const Millis ttl = room.config->token_ttl;
  QueueEvents events(room.ctx());
  REQUIRE(events.open(eventsRequest(ticket), 1000).stream);

  for (Millis t = 2000; t < 1000 + ttl / 3; t += ttl / 10) CHECK(events.recheck(t).kind == Kind::None);
  const Millis last_recheck = 1000 + ttl / 3 - 1;
  CHECK(events.recheck(last_recheck).kind == Kind::None);
  // The rechecks counted as seen: more than a TTL after the stream opened,
  // the ticket is still in line.
  LocalResponse later = handleQueueStatus(room.ctx(), statusRequest(ticket), last_recheck + ttl - 1000);
  CHECK(later.body == "{\"ready\":false,\"position\":1,\"eta_seconds\":null,\"utilization\":0.1}");
  CHECK(room.segment->stats().snapshot().evicted_total == 0);
}

TEST_CASE("events: a changed position goes out at most once every 5 s") {
  Site room(test::baseConfig(1));
  auto holder = holdSlot(room);
  std::string a = queueOne(room);
  std::string b = queueOne(room);
  std::string c = queueOne(room);
  QueueEvents events(room.ctx());
  QueueEvents::Opening o = events.open(eventsRequest(c), 10'000);
  REQUIRE(o.first.kind == Kind::Position);
  CHECK(o.first.data.find("\"position\":3") != std::string::npos);

  holder->release();  // a's turn has come; a and b are still ahead of c
  // Rechecks do not spend the page's once-a-second /queue/status allowance.
  CHECK(handleQueueStatus(room.ctx(), statusRequest(c), 10'500).status == 200);
  CHECK(events.recheck(11'000).kind == Kind::None);
  auto first = makePageGuard(room.ctx());
  REQUIRE(first->admit(test::get("/", {{"Cookie", "room_ticket=" + a}}), 11'200).kind == Admission::Kind::Proceed);
  CHECK(handleQueueStatus(room.ctx(), statusRequest(c), 11'500).status == 200);
  // c moved to 2, but the last event went out less than 5 s ago.
  CHECK(events.recheck(14'999).kind == Kind::None);
  CHECK(events.recheck(15'000, false).kind == Kind::None);  // the worker's per-tick allowance is used up
  QueueEvents::Event moved = events.recheck(15'000);
  CHECK(moved.kind == Kind::Position);
  CHECK(moved.data == statusWaitingBody(*room.config, *room.segment, 2));
  CHECK(moved.data.find("\"position\":2,") != std::string::npos);
  CHECK(moved.text() == "event: position\ndata: " + moved.data + "\n\n");

  // a finishes and b goes in: c moves to 1, but only 5 s after the last one.
  first->release();
  auto second = makePageGuard(room.ctx());
  REQUIRE(second->admit(test::get("/", {{"Cookie", "room_ticket=" + b}}), 16'000).kind == Admission::Kind::Proceed);
  CHECK(events.recheck(16'000).kind == Kind::None);
  CHECK(events.recheck(19'999).kind == Kind::None);
  QueueEvents::Event next = events.recheck(20'000);
  CHECK(next.kind == Kind::Position);
  CHECK(next.data.find("\"position\":1") != std::string::npos);
  CHECK(events.recheck(30'000).kind == Kind::None);  // unchanged since
  second->release();
}

TEST_CASE("events: ready the moment the ticket may take a slot; the stream ends and the waiter goes") {
  Site room(test::baseConfig(1));
  auto holder = holdSlot(room);
  std::string ticket = queueOne(room);
  QueueEvents events(room.ctx());
  REQUIRE(events.open(eventsRequest(ticket), 1000).stream);
  CHECK(room.parked(shm::Resource::PageSlot) == 1);
  woken(room);

  CHECK(events.recheck(1500).kind == Kind::None);
  holder->release();
  CHECK(woken(room));                               // the open stream registered this slot: the release wakes it
  QueueEvents::Event ready = events.recheck(1600);  // well within the 5 s position limit
  CHECK(ready.kind == Kind::Ready);
  CHECK(ready.ends());
  CHECK(ready.data == "{\"ready\":true}");
  CHECK(ready.text() == "event: ready\ndata: {\"ready\":true}\n\n");
  CHECK(room.parked(shm::Resource::PageSlot) == 0);
  CHECK(events.recheck(1700).kind == Kind::None);  // ended: nothing more
  // The ticket stays in line for the page's reload to claim.
  CHECK(room.segment->tickets().liveQueueDepth() == 1);
}

TEST_CASE("events: a ticket ready at open sends ready at once and ends") {
  Site room(test::baseConfig(1));
  auto holder = holdSlot(room);
  std::string ticket = queueOne(room);
  holder->release();
  QueueEvents events(room.ctx());
  QueueEvents::Opening o = events.open(eventsRequest(ticket), 2000);
  REQUIRE(o.stream);
  CHECK(o.first.kind == Kind::Ready);
  CHECK(o.first.data == "{\"ready\":true}");
  CHECK(room.parked(shm::Resource::PageSlot) == 0);
}

TEST_CASE("events: a ticket that leaves the line while streamed says ready (the page reloads)") {
  Site room(test::baseConfig(2));
  auto holder = holdSlot(room);
  auto second = makePageGuard(room.ctx());
  REQUIRE(second->admit(test::get("/slow"), 1000).kind == Admission::Kind::Proceed);
  std::string ticket = queueOne(room);
  QueueEvents events(room.ctx());
  REQUIRE(events.open(eventsRequest(ticket), 1000).stream);
  // Another tab with the same cookie is admitted when a slot frees.
  holder->release();
  auto tab = makePageGuard(room.ctx());
  REQUIRE(tab->admit(test::get("/", {{"Cookie", "room_ticket=" + ticket}}), 1200).kind == Admission::Kind::Proceed);
  QueueEvents::Event e = events.recheck(1300);
  CHECK(e.kind == Kind::Ready);
  CHECK(e.data == "{\"ready\":true}");
  CHECK(room.parked(shm::Resource::PageSlot) == 0);
}

TEST_CASE("events: the stream ends for a cookie refresh after a third of the TTL, and on drain") {
  Site room(test::baseConfig(1));
  auto holder = holdSlot(room);
  std::string ticket = queueOne(room);
  const Millis ttl = room.config->token_ttl;
  {
    QueueEvents events(room.ctx());
    REQUIRE(events.open(eventsRequest(ticket), 1000).stream);
    CHECK(events.recheck(1000 + ttl / 3 - 1).kind == Kind::None);
    QueueEvents::Event end = events.recheck(1000 + ttl / 3);
    CHECK(end.kind == Kind::End);
    CHECK(end.ends());
    CHECK(end.text() == "retry: 1000\n\n");
    CHECK(room.parked(shm::Resource::PageSlot) == 0);
  }
  {
    QueueEvents events(room.ctx());
    REQUIRE(events.open(eventsRequest(ticket), 2000).stream);
    room.self->draining = true;
    CHECK(events.recheck(2100).kind == Kind::End);
    CHECK(room.parked(shm::Resource::PageSlot) == 0);
    room.self->draining = false;
  }
  // Neither ending touches the ticket's place.
  CHECK(room.segment->tickets().liveQueueDepth() == 1);
}

TEST_CASE("events: an open stream that goes away unregisters its waiter exactly once") {
  Site room(test::baseConfig(1));
  auto holder = holdSlot(room);
  std::string ticket = queueOne(room);
  {
    QueueEvents a(room.ctx());
    QueueEvents b(room.ctx());
    REQUIRE(a.open(eventsRequest(ticket), 1000).stream);
    REQUIRE(b.open(eventsRequest(ticket), 1000).stream);  // two tabs, one ticket
    CHECK(room.parked(shm::Resource::PageSlot) == 2);
  }
  CHECK(room.parked(shm::Resource::PageSlot) == 0);
  CHECK(room.segment->tickets().liveQueueDepth() == 1);
}
