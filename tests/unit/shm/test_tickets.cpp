// The ticket ring: issue, positions, polls, claims, expiry, wrap-around,
// ring full and the breaker.
#include <doctest/doctest.h>
#include <unistd.h>

#include <vector>

#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

constexpr Millis kTtl = 300000;

std::unique_ptr<Segment> makeSegment(int32_t cap, uint32_t ring = 1u << 12) {
  Geometry g;
  g.ring_size = ring;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  return Segment::create(g, cap, 100);
}

Issued mustQueue(Segment& s, Millis now = 0, WorkerSlot slot = 0) {
  const Issued issued = s.tickets().issue(slot, 0, now);
  REQUIRE(issued.outcome == IssueOutcome::Queued);
  return issued;
}

Issued mustAdmit(Segment& s, WorkerSlot slot = 0) {
  const Issued issued = s.tickets().issue(slot, 0, 0);
  REQUIRE(issued.outcome == IssueOutcome::Ready);
  return issued;
}

}  // namespace

TEST_CASE("first ticket is 1; fast path up to cap, then queued with positions 1, 2, 3") {
  auto s = makeSegment(2);
  const Issued a = mustAdmit(*s);
  const Issued b = mustAdmit(*s);
  CHECK(a.cookie.ticket == 1);
  CHECK(b.cookie.ticket == 2);
  for (int64_t expected = 1; expected <= 3; ++expected) {
    const Issued q = mustQueue(*s);
    CHECK(q.position == expected);
    CHECK(q.cookie.nonce != 0);
  }
  CHECK(s->tickets().queueDepth() == 3);
  CHECK(s->tickets().liveQueueDepth() == 3);
  CHECK(s->stats().snapshot().queued_total == 3);
}

TEST_CASE("claims are FIFO: only tickets inside the window can claim") {
  auto s = makeSegment(2);
  const Issued a = mustAdmit(*s);
  mustAdmit(*s);
  std::vector<Issued> queued;
  for (int i = 0; i < 4; ++i) queued.push_back(mustQueue(*s));
  for (const Issued& q : queued) CHECK_FALSE(s->tickets().claim(q.cookie, 1));

  s->tickets().finish(a.cookie.ticket, 0);
  CHECK(s->tickets().render(queued[0].cookie, 0, kTtl).state == TicketState::Ready);
  CHECK(s->tickets().render(queued[1].cookie, 0, kTtl).position == 1);
  CHECK_FALSE(s->tickets().claim(queued[1].cookie, 1));
  CHECK(s->tickets().claim(queued[0].cookie, 1));
  CHECK_FALSE(s->tickets().claim(queued[0].cookie, 1));  // claimed once only
  CHECK(s->tickets().render(queued[0].cookie, 0, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().liveQueueDepth() == 3);

  // Each completion admits exactly the next ticket in line.
  uint64_t in_flight = queued[0].cookie.ticket;
  for (size_t i = 1; i < queued.size(); ++i) {
    CHECK_FALSE(s->tickets().claim(queued[i].cookie, 1));
    s->tickets().finish(in_flight, 1);
    if (i + 1 < queued.size()) CHECK_FALSE(s->tickets().claim(queued[i + 1].cookie, 1));
    REQUIRE(s->tickets().claim(queued[i].cookie, 1));
    in_flight = queued[i].cookie.ticket;
  }
}

TEST_CASE("a retired ticket ahead improves the position at once; one behind changes nothing") {
  auto s = makeSegment(1);
  mustAdmit(*s);
  const Issued q1 = mustQueue(*s);
  const Issued q2 = mustQueue(*s);
  const Issued q3 = mustQueue(*s);
  const Issued q4 = mustQueue(*s);
  CHECK(s->tickets().render(q3.cookie, 0, kTtl).position == 3);

  s->tickets().retire(q4.cookie.ticket, false);  // behind q3
  CHECK(s->tickets().render(q3.cookie, 0, kTtl).position == 3);
  CHECK(s->tickets().render(q4.cookie, 0, kTtl).state == TicketState::Unknown);

  s->tickets().retire(q1.cookie.ticket, true);  // ahead of q2 and q3
  CHECK(s->tickets().render(q2.cookie, 0, kTtl).position == 1);
  CHECK(s->tickets().render(q3.cookie, 0, kTtl).position == 2);
  CHECK(s->stats().snapshot().timeouts_total == 1);
  CHECK(s->tickets().queueDepth() == 2);  // in flight, q2, q3 against cap 1
  CHECK(s->tickets().liveQueueDepth() == 2);
}

TEST_CASE("position after a retire behind the window edge keeps later tickets waiting") {
  auto s = makeSegment(2);
  const Issued a = mustAdmit(*s);
  const Issued b = mustAdmit(*s);
  const Issued q1 = mustQueue(*s);
  const Issued q2 = mustQueue(*s);
  s->tickets().retire(q2.cookie.ticket, false);
  CHECK(s->tickets().render(q1.cookie, 0, kTtl).position == 1);
  s->tickets().finish(b.cookie.ticket, 0);  // out of order finish: still frees one window place
  CHECK(s->tickets().render(q1.cookie, 0, kTtl).state == TicketState::Ready);
  s->tickets().finish(a.cookie.ticket, 0);
  CHECK(s->tickets().queueDepth() == 0);
}

TEST_CASE("expiry through poll, render and the reaper") {
  auto s = makeSegment(1);
  mustAdmit(*s);
  const Issued q1 = mustQueue(*s, 1000);
  const Issued q2 = mustQueue(*s, 1000);
  const Issued q3 = mustQueue(*s, 1000);
  const Issued q4 = mustQueue(*s, 1000);

  // Touching keeps it alive (sliding TTL).
  CHECK(s->tickets().poll(q1.cookie, 1000 + kTtl, kTtl).state == TicketState::Waiting);
  CHECK(s->tickets().poll(q1.cookie, 1000 + 2 * kTtl, kTtl).state == TicketState::Waiting);

  TicketView v = s->tickets().poll(q2.cookie, 1000 + kTtl + 1, kTtl);
  CHECK(v.state == TicketState::Expired);
  CHECK(s->stats().snapshot().evicted_total == 1);
  CHECK(s->tickets().poll(q2.cookie, 1000 + kTtl + 2, kTtl).state == TicketState::Unknown);

  CHECK(s->tickets().render(q3.cookie, 1000 + kTtl + 1, kTtl).state == TicketState::Expired);
  CHECK(s->stats().snapshot().evicted_total == 2);

  // q1 was seen at 1000 + 2 ttl, q4 at 1000: the reaper takes q4 only.
  CHECK(s->tickets().reapExpired(1000 + 2 * kTtl, kTtl) == 1);
  CHECK(s->stats().snapshot().evicted_total == 3);
  CHECK(s->tickets().render(q4.cookie, 1000 + 2 * kTtl, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().render(q1.cookie, 1000 + 2 * kTtl, kTtl).position == 1);
  CHECK(s->tickets().reapExpired(1000 + 2 * kTtl, kTtl) == 0);
  CHECK(s->tickets().liveQueueDepth() == 1);
}

TEST_CASE("the reaper evicts every expired ticket and counts each one") {
  auto s = makeSegment(1);
  mustAdmit(*s);
  for (int i = 0; i < 50; ++i) mustQueue(*s, 0);
  const Issued fresh = mustQueue(*s, kTtl);
  CHECK(s->tickets().reapExpired(kTtl + 1, kTtl) == 50);
  CHECK(s->stats().snapshot().evicted_total == 50);
  CHECK(s->tickets().liveQueueDepth() == 1);
  CHECK(s->tickets().render(fresh.cookie, kTtl + 1, kTtl).position == 1);
}

TEST_CASE("polls are rate limited to one per second and still keep the ticket alive") {
  auto s = makeSegment(1);
  mustAdmit(*s);
  mustQueue(*s);
  const Issued q = mustQueue(*s, 0);
  TicketView v = s->tickets().poll(q.cookie, 100, kTtl);
  CHECK_FALSE(v.rate_limited);
  CHECK(v.position == 2);
  v = s->tickets().poll(q.cookie, 600, kTtl);
  CHECK(v.rate_limited);
  CHECK(v.raw_position == 2);
  v = s->tickets().poll(q.cookie, 1099, kTtl);
  CHECK(v.rate_limited);
  v = s->tickets().poll(q.cookie, 1100, kTtl);
  CHECK_FALSE(v.rate_limited);
  // A rate-limited poll at 1100 + ttl - 1 ... refreshed last_seen at 1100.
  CHECK(s->tickets().poll(q.cookie, 1500, kTtl).rate_limited);
  CHECK(s->tickets().poll(q.cookie, 1500 + kTtl, kTtl).state == TicketState::Waiting);
}

TEST_CASE("refresh_cookie once cookies are ttl/3 old, then stamped") {
  const Millis ttl = 30000;
  auto s = makeSegment(1);
  mustAdmit(*s);
  const Issued q = mustQueue(*s, 0);
  CHECK_FALSE(s->tickets().poll(q.cookie, 5000, ttl).refresh_cookie);
  CHECK(s->tickets().poll(q.cookie, 10000, ttl).refresh_cookie);
  CHECK_FALSE(s->tickets().poll(q.cookie, 15000, ttl).refresh_cookie);
  s->tickets().render(q.cookie, 19000, ttl);  // the page re-sent the cookies
  CHECK_FALSE(s->tickets().poll(q.cookie, 25000, ttl).refresh_cookie);
  CHECK(s->tickets().poll(q.cookie, 29000, ttl).refresh_cookie);
}

TEST_CASE("a cookie must match the ticket's nonce and number") {
  auto s = makeSegment(1);
  mustAdmit(*s);
  const Issued q = mustQueue(*s);
  TicketCookie forged = q.cookie;
  forged.nonce ^= 1;
  CHECK(s->tickets().poll(forged, 0, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().render(forged, 0, kTtl).state == TicketState::Unknown);
  CHECK_FALSE(s->tickets().claim(forged, 0));
  TicketCookie other = q.cookie;
  other.ticket += 1;
  CHECK(s->tickets().poll(other, 0, kTtl).state == TicketState::Unknown);
  other.ticket = q.cookie.ticket + (1u << 12);  // same ring entry, next lap
  CHECK(s->tickets().poll(other, 0, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().poll(TicketCookie{}, 0, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().poll(q.cookie, 0, kTtl).state == TicketState::Waiting);
}

TEST_CASE("the ring wraps around many times") {
  auto s = makeSegment(3, 64);
  uint64_t last = 0;
  for (int round = 0; round < 400; ++round) {
    const Issued a = mustAdmit(*s, 1);
    const Issued b = mustAdmit(*s, 2);
    const Issued c = mustAdmit(*s, 3);
    CHECK(a.cookie.ticket == last + 1);
    const Issued waiting = mustQueue(*s, round);
    CHECK(waiting.position == 1);
    CHECK_FALSE(s->tickets().claim(waiting.cookie, 0));
    s->tickets().finish(b.cookie.ticket, 2);  // out of order
    REQUIRE(s->tickets().claim(waiting.cookie, 0));
    s->tickets().finish(a.cookie.ticket, 1);
    s->tickets().finish(c.cookie.ticket, 3);
    s->tickets().finish(waiting.cookie.ticket, 0);
    last = waiting.cookie.ticket;
    REQUIRE(s->tickets().queueDepth() == 0);
    REQUIRE(s->tickets().liveQueueDepth() == 0);
  }
  CHECK(last == 1600);
}

TEST_CASE("a full ring answers RingFull and counts it") {
  auto s = makeSegment(1, 64);
  const Issued first = mustAdmit(*s);
  for (int i = 1; i < 64; ++i) mustQueue(*s);
  CHECK(s->tickets().issue(0, 0, 0).outcome == IssueOutcome::RingFull);
  CHECK(s->tickets().issue(0, 0, 0).outcome == IssueOutcome::RingFull);
  CHECK(s->stats().snapshot().ring_full_total == 2);
  s->tickets().finish(first.cookie.ticket, 0);
  CHECK(s->tickets().issue(0, 0, 0).outcome == IssueOutcome::Queued);
}

TEST_CASE("breaker on queue depth and on live depth") {
  auto s = makeSegment(1);
  mustAdmit(*s);
  mustQueue(*s);
  mustQueue(*s);
  CHECK(s->tickets().issue(0, 2, 0).outcome == IssueOutcome::Breaker);
  CHECK(s->tickets().issue(0, 3, 0).outcome == IssueOutcome::Queued);
  CHECK(s->stats().snapshot().queued_total == 3);

  // Widen the window: nothing is queued any more, but three cookies are live.
  s->pages().setCap(10);
  CHECK(s->tickets().queueDepth() == 0);
  CHECK(s->tickets().liveQueueDepth() == 3);
  CHECK(s->tickets().issue(0, 3, 0).outcome == IssueOutcome::Breaker);
  CHECK(s->tickets().issue(0, 4, 0).outcome == IssueOutcome::Ready);
  CHECK(s->tickets().issue(0, 0, 0).outcome == IssueOutcome::Ready);  // 0 = unlimited
}

TEST_CASE("growing the cap makes waiting tickets ready; shrinking narrows the window") {
  auto s = makeSegment(1);
  mustAdmit(*s);
  const Issued q1 = mustQueue(*s);
  const Issued q2 = mustQueue(*s);
  const Issued q3 = mustQueue(*s);
  s->pages().setCap(3);
  CHECK(s->tickets().render(q1.cookie, 0, kTtl).state == TicketState::Ready);
  CHECK(s->tickets().render(q2.cookie, 0, kTtl).state == TicketState::Ready);
  CHECK(s->tickets().render(q3.cookie, 0, kTtl).position == 1);
  s->pages().setCap(1);
  CHECK(s->tickets().render(q1.cookie, 0, kTtl).position == 1);
  CHECK(s->tickets().render(q3.cookie, 0, kTtl).position == 3);
  CHECK_FALSE(s->tickets().claim(q1.cookie, 0));
}

TEST_CASE("render reports a ticket inside the window as ready without claiming it") {
  auto s = makeSegment(1);
  const Issued a = mustAdmit(*s);
  const Issued q = mustQueue(*s);
  s->tickets().finish(a.cookie.ticket, 0);
  const TicketView v = s->tickets().render(q.cookie, 0, kTtl);
  CHECK(v.state == TicketState::Ready);
  CHECK(v.raw_position <= 0);
  CHECK(s->tickets().liveQueueDepth() == 1);
  CHECK(s->tickets().claim(q.cookie, 2));
  CHECK(s->tickets().liveQueueDepth() == 0);
  s->tickets().finish(q.cookie.ticket, 1);  // wrong owner: ignored, q stays in flight
  CHECK(s->tickets().issue(0, 0, 0).outcome == IssueOutcome::Queued);
  s->tickets().finish(q.cookie.ticket, 2);
  CHECK(s->tickets().issue(0, 0, 0).outcome == IssueOutcome::Queued);  // the queued one above is ahead
}

TEST_CASE("touch keeps a waiting ticket seen without stamping the cookie time, and reports readiness") {
  auto s = makeSegment(1);
  const Issued a = mustAdmit(*s);
  const Issued q = mustQueue(*s, 1000);
  TicketView v = s->tickets().touch(q.cookie, 1000 + kTtl, kTtl);
  CHECK(v.state == TicketState::Waiting);
  CHECK(v.position == 1);
  CHECK(s->tickets().reapExpired(1000 + kTtl + 1, kTtl) == 0);  // seen at 1000 + ttl
  // The cookies were last sent at issue (1000): a poll past ttl/3 of that
  // still asks for a refresh, as touch sent nothing.
  CHECK(s->tickets().poll(q.cookie, 1000 + kTtl, kTtl).refresh_cookie);
  s->tickets().finish(a.cookie.ticket, 0);
  CHECK(s->tickets().touch(q.cookie, 1000 + kTtl, kTtl).state == TicketState::Ready);
  CHECK(s->tickets().touch(q.cookie, 1000 + 3 * kTtl, kTtl).state == TicketState::Expired);
  CHECK(s->tickets().touch(q.cookie, 1000 + 3 * kTtl, kTtl).state == TicketState::Unknown);
}

TEST_CASE("every path that finishes a waiting ticket wakes PageSlot waiters; finish leaves it to the page release") {
  auto s = makeSegment(1);
  uint64_t value = 0;
  auto woken = [&] {
    s->slots().wakeConsumed(3);  // as the worker does before reading
    return read(s->slots().eventFd(3), &value, sizeof value) == static_cast<ssize_t>(sizeof value);
  };
  const Issued a = mustAdmit(*s);
  const Issued q1 = mustQueue(*s, 0);
  const Issued q2 = mustQueue(*s, 0);
  const Issued q3 = mustQueue(*s, 0);
  const Issued q4 = mustQueue(*s, kTtl);
  mustQueue(*s, 2 * kTtl);
  s->slots().setWaiting(3, Resource::PageSlot, true);
  CHECK_FALSE(woken());

  s->tickets().retire(q1.cookie.ticket, false);
  CHECK(woken());
  CHECK(s->tickets().render(q2.cookie, kTtl + 1, kTtl).state == TicketState::Expired);
  CHECK(woken());
  CHECK(s->tickets().poll(q3.cookie, kTtl + 1, kTtl).state == TicketState::Expired);
  CHECK(woken());
  CHECK(s->tickets().touch(q4.cookie, 2 * kTtl + 1, kTtl).state == TicketState::Expired);
  CHECK(woken());
  CHECK(s->tickets().reapExpired(2 * kTtl + 1, kTtl) == 0);
  CHECK_FALSE(woken());  // nothing evicted, nothing to say
  CHECK(s->tickets().reapExpired(3 * kTtl + 1, kTtl) == 1);
  CHECK(woken());
  CHECK(s->tickets().liveQueueDepth() == 0);

  s->tickets().finish(a.cookie.ticket, 0);
  CHECK_FALSE(woken());
  s->slots().setWaiting(3, Resource::PageSlot, false);
}
