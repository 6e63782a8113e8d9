// The ticket ring (tickets.h): the line of waiting visitors. Issue,
// positions, readiness against the free page slots, claims, retire, expiry,
// the janitor's sweep (TTL, first-poll grace, claim window), missed and
// returned tickets, wrap-around, ring full, the breaker and wake-ups.
//
// Every claim here is made as the page guard makes it (takeTurn): a page
// slot first, then the claim, the slot given back if the claim fails.
// Requests already in flight hold page slots only (occupy()), never a ring
// entry.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

constexpr Millis kTtl = 300000;
constexpr WorkerSlot kGuard = 0;     // the worker slot that takes turns (claims)
constexpr WorkerSlot kInFlight = 2;  // page slots of requests already in flight
constexpr WorkerSlot kWaiter = 3;    // parked requests waiting for PageSlot wake-ups

std::unique_ptr<Segment> makeSegment(int32_t cap, uint32_t ring = 1u << 12) {
  Geometry g;
  g.ring_size = ring;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  return Segment::create(g, cap, 100);
}

// A new arrival joins the line.
Issued mustQueue(Segment& s, Millis now = 0, WorkerSlot slot = kGuard) {
  const Issued issued = s.tickets().issue(slot, 0, now);
  REQUIRE(issued.outcome == IssueOutcome::Queued);
  REQUIRE(issued.position >= 1);
  return issued;
}

// Requests in flight (admitted earlier): page slots, nothing in the ring.
void occupy(Segment& s, int n) {
  for (int i = 0; i < n; ++i) REQUIRE(s.pages().tryAcquire(kInFlight));
}
void vacate(Segment& s, int n) {
  for (int i = 0; i < n; ++i) s.pages().release(kInFlight);
}

// The page guard's takeTurn: a page slot, then the claim; the slot goes
// back if the claim fails. On success the caller holds a slot on kGuard.
bool takeTurn(Segment& s, const TicketCookie& cookie) {
  if (!s.pages().tryAcquire(kGuard)) return false;
  if (s.tickets().claim(cookie)) return true;
  s.pages().release(kGuard);
  return false;
}

// The janitor's limits, one at a time.
SweepLimits ttlOnly(Millis ttl) {
  SweepLimits l;
  l.ttl = ttl;
  return l;
}
SweepLimits firstPollOnly(Millis first_poll) {
  SweepLimits l;
  l.first_poll = first_poll;
  return l;
}
SweepLimits claimWindowOnly(Millis window) {
  SweepLimits l;
  l.claim_window = window;
  return l;
}

// Makes the ready head of the line miss its turn: one sweep stamps it ready
// at `now`, the next one, past the claim window, turns it Missed.
void missTurns(Segment& s, Millis now, Millis window, int64_t expected) {
  REQUIRE(s.tickets().sweep(now, claimWindowOnly(window)).missed == 0);
  REQUIRE(s.tickets().sweep(now + window + 1, claimWindowOnly(window)).missed == expected);
}

}  // namespace

TEST_CASE("the first ticket is 1; behind a full room positions are 1, 2, 3; an empty line with a free slot is ready") {
  auto s = makeSegment(2);
  occupy(*s, 2);
  for (int64_t expected = 1; expected <= 3; ++expected) {
    const Issued q = mustQueue(*s);
    CHECK(q.cookie.ticket == static_cast<uint64_t>(expected));
    CHECK(q.position == expected);
    CHECK_FALSE(q.ready);
    CHECK(q.cookie.nonce != 0);
  }
  CHECK(s->tickets().queueDepth() == 3);
  CHECK(s->tickets().liveQueueDepth() == 3);
  CHECK(s->stats().snapshot().queued_total == 3);

  auto empty = makeSegment(2);
  const Issued first = mustQueue(*empty);
  CHECK(first.cookie.ticket == 1);
  CHECK(first.position == 1);
  CHECK(first.ready);
  CHECK(empty->tickets().liveQueueDepth() == 1);
  REQUIRE(takeTurn(*empty, first.cookie));
  CHECK(empty->tickets().liveQueueDepth() == 0);
  CHECK(empty->tickets().queueDepth() == 0);
  CHECK(empty->pages().occupancy() == 1);  // the admitted request holds a page slot, nothing else
}

TEST_CASE("claims are FIFO: a ticket is claimed only on its turn, and only with a page slot") {
  auto s = makeSegment(2);
  occupy(*s, 2);
  std::vector<Issued> queued;
  for (int i = 0; i < 4; ++i) queued.push_back(mustQueue(*s));
  for (const Issued& q : queued) CHECK_FALSE(takeTurn(*s, q.cookie));  // no page slot to take
  CHECK(s->pages().occupancy() == 2);

  vacate(*s, 1);  // one request in flight ends: the head of the line is ready
  TicketView v = s->tickets().render(queued[0].cookie, 0, kTtl);
  CHECK(v.state == TicketState::Ready);
  CHECK(v.position == 0);
  CHECK(v.raw_position == 1);
  v = s->tickets().render(queued[1].cookie, 0, kTtl);
  CHECK(v.state == TicketState::Waiting);
  CHECK(v.position == 2);
  CHECK_FALSE(takeTurn(*s, queued[1].cookie));  // a slot was free, but not its turn: the slot went back
  CHECK(s->pages().occupancy() == 1);
  CHECK(takeTurn(*s, queued[0].cookie));
  CHECK(s->pages().occupancy() == 2);
  CHECK(s->tickets().render(queued[0].cookie, 0, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().liveQueueDepth() == 3);
  vacate(*s, 1);
  CHECK_FALSE(takeTurn(*s, queued[0].cookie));  // claimed once only
  CHECK(s->pages().occupancy() == 1);

  // From here each page released admits exactly the next ticket in line.
  CHECK(takeTurn(*s, queued[1].cookie));
  for (size_t i = 2; i < queued.size(); ++i) {
    CHECK_FALSE(takeTurn(*s, queued[i].cookie));  // room full
    s->pages().release(kGuard);                   // the oldest admitted request ends
    if (i + 1 < queued.size()) CHECK_FALSE(takeTurn(*s, queued[i + 1].cookie));
    REQUIRE(takeTurn(*s, queued[i].cookie));
  }
  CHECK(s->tickets().liveQueueDepth() == 0);
  CHECK(s->tickets().queueDepth() == 0);
  CHECK(s->pages().occupancy() == 2);
}

TEST_CASE("a retired ticket ahead improves the position at once; one behind changes nothing") {
  auto s = makeSegment(1);
  occupy(*s, 1);
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
  CHECK(s->tickets().queueDepth() == 2);
  CHECK(s->tickets().liveQueueDepth() == 2);

  s->tickets().retire(q1.cookie.ticket, true);  // gone already: nothing happens, nothing counted
  s->tickets().retire(0, true);
  CHECK(s->stats().snapshot().timeouts_total == 1);
  CHECK(s->tickets().liveQueueDepth() == 2);
}

TEST_CASE("expiry through poll, render, touch and the sweep") {
  auto s = makeSegment(1);
  occupy(*s, 1);
  const Issued q1 = mustQueue(*s, 1000);
  const Issued q2 = mustQueue(*s, 1000);
  const Issued q3 = mustQueue(*s, 1000);
  const Issued q4 = mustQueue(*s, 1000);
  const Issued q5 = mustQueue(*s, 1000);

  // Touching keeps it alive (sliding TTL); exactly the TTL is not past it.
  CHECK(s->tickets().poll(q1.cookie, 1000 + kTtl, kTtl).state == TicketState::Waiting);
  CHECK(s->tickets().poll(q1.cookie, 1000 + 2 * kTtl, kTtl).state == TicketState::Waiting);

  TicketView v = s->tickets().poll(q2.cookie, 1000 + kTtl + 1, kTtl);
  CHECK(v.state == TicketState::Expired);
  CHECK(s->stats().snapshot().evicted_total == 1);
  CHECK(s->tickets().poll(q2.cookie, 1000 + kTtl + 2, kTtl).state == TicketState::Unknown);

  CHECK(s->tickets().render(q3.cookie, 1000 + kTtl + 1, kTtl).state == TicketState::Expired);
  CHECK(s->stats().snapshot().evicted_total == 2);
  CHECK(s->tickets().touch(q4.cookie, 1000 + kTtl + 1, kTtl).state == TicketState::Expired);
  CHECK(s->stats().snapshot().evicted_total == 3);

  // A sweep without a TTL (limits.ttl == 0) expires nothing.
  CHECK(s->tickets().sweep(1000 + 2 * kTtl, SweepLimits{}).expired == 0);
  CHECK(s->tickets().liveQueueDepth() == 2);

  // q1 was seen at 1000 + 2 ttl, q5 at 1000: the sweep takes q5 only.
  const SweepReport r = s->tickets().sweep(1000 + 2 * kTtl, ttlOnly(kTtl));
  CHECK(r.expired == 1);
  CHECK(r.ghosts == 0);
  CHECK(r.missed == 0);
  CHECK(s->stats().snapshot().evicted_total == 4);
  CHECK(s->stats().snapshot().ghost_evicted_total == 0);
  CHECK(s->tickets().render(q5.cookie, 1000 + 2 * kTtl, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().render(q1.cookie, 1000 + 2 * kTtl, kTtl).position == 1);
  CHECK(s->tickets().sweep(1000 + 2 * kTtl, ttlOnly(kTtl)).expired == 0);
  CHECK(s->tickets().liveQueueDepth() == 1);
}

TEST_CASE("the sweep evicts every expired ticket and counts each one") {
  auto s = makeSegment(1);
  occupy(*s, 1);
  for (int i = 0; i < 50; ++i) mustQueue(*s, 0);
  const Issued fresh = mustQueue(*s, kTtl);
  CHECK(s->tickets().render(fresh.cookie, kTtl, kTtl).position == 51);
  CHECK(s->tickets().sweep(kTtl + 1, ttlOnly(kTtl)).expired == 50);
  CHECK(s->stats().snapshot().evicted_total == 50);
  CHECK(s->tickets().liveQueueDepth() == 1);
  CHECK(s->tickets().queueDepth() == 1);
  CHECK(s->tickets().render(fresh.cookie, kTtl + 1, kTtl).position == 1);
}

TEST_CASE("polls are rate limited to one per second and still keep the ticket alive") {
  auto s = makeSegment(1);
  occupy(*s, 1);
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
  // The rate-limited poll at 1500 still refreshed last_seen.
  CHECK(s->tickets().poll(q.cookie, 1500, kTtl).rate_limited);
  CHECK(s->tickets().poll(q.cookie, 1500 + kTtl, kTtl).state == TicketState::Waiting);
}

TEST_CASE("refresh_cookie once cookies are ttl/3 old, then stamped") {
  const Millis ttl = 30000;
  auto s = makeSegment(1);
  occupy(*s, 1);
  const Issued q = mustQueue(*s, 0);
  CHECK_FALSE(s->tickets().poll(q.cookie, 5000, ttl).refresh_cookie);
  CHECK(s->tickets().poll(q.cookie, 10000, ttl).refresh_cookie);
  CHECK_FALSE(s->tickets().poll(q.cookie, 15000, ttl).refresh_cookie);
  s->tickets().render(q.cookie, 19000, ttl);  // the page re-sent the cookies
  CHECK_FALSE(s->tickets().poll(q.cookie, 25000, ttl).refresh_cookie);
  CHECK(s->tickets().poll(q.cookie, 29000, ttl).refresh_cookie);
}

TEST_CASE("a cookie must match the ticket's nonce and number") {
  auto s = makeSegment(2);
  occupy(*s, 1);
  const Issued q = mustQueue(*s);
  REQUIRE(q.ready);
  TicketCookie forged = q.cookie;
  forged.nonce ^= 1;
  CHECK(s->tickets().poll(forged, 0, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().render(forged, 0, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().touch(forged, 0, kTtl).state == TicketState::Unknown);
  CHECK_FALSE(takeTurn(*s, forged));
  CHECK(s->pages().occupancy() == 1);  // the slot taken for the forged claim went back
  TicketCookie other = q.cookie;
  other.ticket += 1;
  CHECK(s->tickets().poll(other, 0, kTtl).state == TicketState::Unknown);
  other.ticket = q.cookie.ticket + (1u << 12);  // same ring entry, next lap
  CHECK(s->tickets().poll(other, 0, kTtl).state == TicketState::Unknown);
  CHECK_FALSE(takeTurn(*s, other));
  other.ticket = uint64_t{1} << 60;  // beyond any ticket number
  CHECK(s->tickets().poll(other, 0, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().poll(TicketCookie{}, 0, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().poll(TicketCookie{q.cookie.ticket, 0}, 0, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().liveQueueDepth() == 1);
  CHECK(s->tickets().poll(q.cookie, 0, kTtl).state == TicketState::Ready);
  CHECK(takeTurn(*s, q.cookie));
}

TEST_CASE("the ring wraps around many times") {
  auto s = makeSegment(3, 64);
  uint64_t last = 0;
  for (int round = 0; round < 400; ++round) {
    occupy(*s, 2);  // two requests in flight
    const Issued a = mustQueue(*s, round);
    const Issued b = mustQueue(*s, round);
    CHECK(a.cookie.ticket == last + 1);
    CHECK(a.ready);
    CHECK(b.position == 2);
    CHECK_FALSE(b.ready);
    REQUIRE(takeTurn(*s, a.cookie));
    CHECK_FALSE(takeTurn(*s, b.cookie));  // room full
    vacate(*s, 1);
    REQUIRE(takeTurn(*s, b.cookie));
    if (round % 3 == 0) {  // a visitor who walks away, retired behind the line
      const Issued c = mustQueue(*s, round);
      CHECK(c.position == 1);
      s->tickets().retire(c.cookie.ticket, false);
      last = c.cookie.ticket;
    } else {
      last = b.cookie.ticket;
    }
    s->pages().release(kGuard);
    s->pages().release(kGuard);
    vacate(*s, 1);
    REQUIRE(s->tickets().queueDepth() == 0);
    REQUIRE(s->tickets().liveQueueDepth() == 0);
  }
  CHECK(last == 800 + 134);
  CHECK(s->stats().snapshot().ring_full_total == 0);
  CHECK(s->pages().occupancy() == 0);
}

TEST_CASE("a request in flight for ever and ten rings of short ones never fill the ring") {
  constexpr uint32_t kRing = 64;
  auto s = makeSegment(2, kRing);
  // The long request: admitted through the line like any other, its page
  // slot never given back.
  const Issued day_long = mustQueue(*s);
  REQUIRE(day_long.ready);
  REQUIRE(takeTurn(*s, day_long.cookie));
  CHECK(s->tickets().queueDepth() == 0);
  for (uint32_t i = 0; i < 10 * kRing; ++i) {
    // One short request takes the last slot; the next one waits for it.
    const Issued a = s->tickets().issue(1, 0, i);
    REQUIRE(a.outcome == IssueOutcome::Queued);
    REQUIRE(a.ready);
    REQUIRE(s->pages().tryAcquire(1));
    REQUIRE(s->tickets().claim(a.cookie));
    const Issued b = s->tickets().issue(1, 0, i);
    REQUIRE(b.outcome == IssueOutcome::Queued);
    CHECK(b.position == 1);
    CHECK_FALSE(b.ready);
    s->pages().release(1);
    REQUIRE(s->pages().tryAcquire(1));
    REQUIRE(s->tickets().claim(b.cookie));
    s->pages().release(1);
  }
  CHECK(s->stats().snapshot().ring_full_total == 0);
  CHECK(s->tickets().queueDepth() == 0);
  CHECK(s->pages().occupancy() == 1);  // the long request still in flight
  const Issued last = mustQueue(*s);
  CHECK(last.cookie.ticket == 2 + 20 * kRing);
}

TEST_CASE("RingFull only when the oldest waiting ticket is a whole ring behind; counted") {
  auto s = makeSegment(1, 64);
  occupy(*s, 1);
  const Issued first = mustQueue(*s);
  for (int i = 1; i < 64; ++i) mustQueue(*s);
  CHECK(s->tickets().issue(0, 0, 0).outcome == IssueOutcome::RingFull);
  CHECK(s->tickets().issue(0, 0, 0).outcome == IssueOutcome::RingFull);
  CHECK(s->stats().snapshot().ring_full_total == 2);
  CHECK(s->stats().snapshot().queued_total == 64);
  s->tickets().retire(first.cookie.ticket, false);
  const Issued next = s->tickets().issue(0, 0, 0);
  CHECK(next.outcome == IssueOutcome::Queued);
  CHECK(next.cookie.ticket == 65);
  CHECK(next.position == 64);
  CHECK(s->tickets().issue(0, 0, 0).outcome == IssueOutcome::RingFull);
}

TEST_CASE("the breaker counts visitors waiting their turn (live depth), not the room") {
  auto s = makeSegment(1);
  occupy(*s, 1);
  mustQueue(*s);
  mustQueue(*s);
  CHECK(s->tickets().issue(0, 2, 0).outcome == IssueOutcome::Breaker);
  CHECK(s->stats().snapshot().queued_total == 2);  // a refusal is not counted as queued
  CHECK(s->tickets().issue(0, 3, 0).outcome == IssueOutcome::Queued);
  CHECK(s->stats().snapshot().queued_total == 3);

  // Widen the room: every ticket is ready now, but they still wait to be claimed.
  s->pages().setCap(10);
  CHECK(s->tickets().queueDepth() == 3);
  CHECK(s->tickets().liveQueueDepth() == 3);
  CHECK(s->tickets().issue(0, 3, 0).outcome == IssueOutcome::Breaker);
  const Issued ready = s->tickets().issue(0, 4, 0);
  CHECK(ready.outcome == IssueOutcome::Queued);
  CHECK(ready.ready);
  CHECK(ready.position == 4);
  CHECK(s->tickets().issue(0, 0, 0).outcome == IssueOutcome::Queued);  // 0 = unlimited
  CHECK(s->tickets().liveQueueDepth() == 5);
}

TEST_CASE("growing the cap makes waiting tickets ready; shrinking it makes them wait again") {
  auto s = makeSegment(1);
  occupy(*s, 1);
  const Issued q1 = mustQueue(*s);
  const Issued q2 = mustQueue(*s);
  const Issued q3 = mustQueue(*s);
  s->pages().setCap(3);
  CHECK(s->tickets().render(q1.cookie, 0, kTtl).state == TicketState::Ready);
  CHECK(s->tickets().render(q2.cookie, 0, kTtl).state == TicketState::Ready);
  TicketView v = s->tickets().render(q3.cookie, 0, kTtl);
  CHECK(v.state == TicketState::Waiting);
  CHECK(v.position == 3);  // the cap changes readiness, never the position
  s->pages().setCap(1);
  CHECK(s->tickets().render(q1.cookie, 0, kTtl).state == TicketState::Waiting);
  CHECK(s->tickets().render(q1.cookie, 0, kTtl).position == 1);
  CHECK(s->tickets().render(q3.cookie, 0, kTtl).position == 3);
  CHECK_FALSE(takeTurn(*s, q1.cookie));
  s->pages().setCap(2);
  CHECK(s->tickets().render(q1.cookie, 0, kTtl).state == TicketState::Ready);
  CHECK(s->tickets().render(q2.cookie, 0, kTtl).state == TicketState::Waiting);
  CHECK_FALSE(takeTurn(*s, q2.cookie));
  CHECK(takeTurn(*s, q1.cookie));
  CHECK(s->tickets().render(q2.cookie, 0, kTtl).position == 1);
}

TEST_CASE("render reports a ready ticket without claiming it") {
  auto s = makeSegment(1);
  occupy(*s, 1);
  const Issued q = mustQueue(*s);
  vacate(*s, 1);
  for (int i = 0; i < 2; ++i) {
    const TicketView v = s->tickets().render(q.cookie, 0, kTtl);
    CHECK(v.state == TicketState::Ready);
    CHECK(v.position == 0);
    CHECK(v.raw_position == 1);
    CHECK(s->tickets().liveQueueDepth() == 1);
    CHECK(s->pages().occupancy() == 0);
  }
  CHECK(takeTurn(*s, q.cookie));
  CHECK(s->tickets().liveQueueDepth() == 0);
  CHECK(s->tickets().render(q.cookie, 0, kTtl).state == TicketState::Unknown);
  s->tickets().retire(q.cookie.ticket, true);  // claimed: out of the ring's hands
  CHECK(s->stats().snapshot().timeouts_total == 0);
  CHECK(s->pages().occupancy() == 1);
}

TEST_CASE("touch keeps a waiting ticket seen without stamping the cookie time, and reports readiness") {
  auto s = makeSegment(1);
  occupy(*s, 1);
  const Issued q = mustQueue(*s, 1000);
  TicketView v = s->tickets().touch(q.cookie, 1000 + kTtl, kTtl);
  CHECK(v.state == TicketState::Waiting);
  CHECK(v.position == 1);
  CHECK(s->tickets().sweep(1000 + kTtl + 1, ttlOnly(kTtl)).expired == 0);  // seen at 1000 + ttl
  // The cookies were last sent at issue (1000): a poll past ttl/3 of that
  // still asks for a refresh, as touch sent nothing.
  CHECK(s->tickets().poll(q.cookie, 1000 + kTtl, kTtl).refresh_cookie);
  vacate(*s, 1);
  CHECK(s->tickets().touch(q.cookie, 1000 + kTtl, kTtl).state == TicketState::Ready);
  CHECK(s->tickets().touch(q.cookie, 1000 + 3 * kTtl, kTtl).state == TicketState::Expired);
  CHECK(s->tickets().touch(q.cookie, 1000 + 3 * kTtl, kTtl).state == TicketState::Unknown);
}

TEST_CASE("a ticket whose holder never came back is abandoned after the first-poll grace") {
  constexpr Millis kGrace = 5000;
  auto s = makeSegment(1);
  occupy(*s, 1);
  const Issued ghost = mustQueue(*s, 0);
  const Issued polled = mustQueue(*s, 0);
  const Issued rendered = mustQueue(*s, 0);
  const Issued touched = mustQueue(*s, 0);
  const Issued late = mustQueue(*s, 4000);
  s->tickets().poll(polled.cookie, 1000, kTtl);
  s->tickets().render(rendered.cookie, 1000, kTtl);
  s->tickets().touch(touched.cookie, 1000, kTtl);

  CHECK(s->tickets().sweep(kGrace, firstPollOnly(kGrace)).ghosts == 0);  // exactly the grace: not past it
  CHECK(s->tickets().sweep(kGrace + 1, SweepLimits{}).ghosts == 0);      // no grace given: not checked
  SweepReport r = s->tickets().sweep(kGrace + 1, firstPollOnly(kGrace));
  CHECK(r.ghosts == 1);
  CHECK(r.expired == 0);
  CHECK(r.missed == 0);
  CHECK(s->stats().snapshot().ghost_evicted_total == 1);
  CHECK(s->stats().snapshot().evicted_total == 1);
  CHECK(s->tickets().liveQueueDepth() == 4);

  r = s->tickets().sweep(4000 + kGrace + 1, firstPollOnly(kGrace));  // `late`, issued at 4000
  CHECK(r.ghosts == 1);
  CHECK(s->stats().snapshot().ghost_evicted_total == 2);
  CHECK(s->stats().snapshot().evicted_total == 2);

  // Tickets whose holders came back once are never ghosts, however long ago.
  CHECK(s->tickets().sweep(200000, firstPollOnly(kGrace)).ghosts == 0);
  CHECK(s->tickets().render(ghost.cookie, 200000, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().render(late.cookie, 200000, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().render(polled.cookie, 200000, kTtl).position == 1);
  CHECK(s->tickets().render(rendered.cookie, 200000, kTtl).position == 2);
  CHECK(s->tickets().render(touched.cookie, 200000, kTtl).position == 3);
  CHECK(s->tickets().liveQueueDepth() == 3);
}

TEST_CASE("a turn not taken within the claim window is missed, and the next in line is ready at once") {
  constexpr Millis kWindow = 10000;
  auto s = makeSegment(1);
  occupy(*s, 1);
  const Issued q1 = mustQueue(*s, 0);
  const Issued q2 = mustQueue(*s, 0);
  const Issued q3 = mustQueue(*s, 0);
  const Issued q4 = mustQueue(*s, 0);
  // Not ready: never stamped, never missed, however long it waits.
  CHECK(s->tickets().sweep(1000, claimWindowOnly(kWindow)).missed == 0);
  CHECK(s->tickets().sweep(50000, claimWindowOnly(kWindow)).missed == 0);

  vacate(*s, 1);  // q1's turn
  CHECK(s->tickets().sweep(60000, claimWindowOnly(kWindow)).missed == 0);  // first seen ready
  CHECK(s->tickets().sweep(60000 + kWindow, claimWindowOnly(kWindow)).missed == 0);
  CHECK(s->tickets().sweep(60000 + kWindow, SweepLimits{}).missed == 0);  // no window given: not checked
  const SweepReport r = s->tickets().sweep(60000 + kWindow + 1, claimWindowOnly(kWindow));
  CHECK(r.missed == 1);
  CHECK(r.expired == 0);
  CHECK(r.ghosts == 0);
  CHECK(s->stats().snapshot().missed_turns_total == 1);
  CHECK(s->stats().snapshot().evicted_total == 0);
  // Still holding a place (queueDepth), no longer holding up the line.
  CHECK(s->tickets().queueDepth() == 4);
  CHECK(s->tickets().liveQueueDepth() == 3);
  CHECK(s->tickets().issue(0, 3, 0).outcome == IssueOutcome::Breaker);
  s->tickets().retire(q4.cookie.ticket, false);
  // The breaker counts q2 and q3 only: a third visitor may join.
  const Issued q5 = s->tickets().issue(0, 3, 0);
  CHECK(q5.outcome == IssueOutcome::Queued);
  CHECK(q5.position == 3);

  TicketView v = s->tickets().render(q2.cookie, 70001, kTtl);
  CHECK(v.state == TicketState::Ready);
  CHECK(v.raw_position == 1);
  v = s->tickets().render(q3.cookie, 70001, kTtl);
  CHECK(v.state == TicketState::Waiting);
  CHECK(v.position == 2);
  CHECK_FALSE(takeTurn(*s, q1.cookie));  // missed: no claim until its holder comes back
  CHECK(s->pages().occupancy() == 0);
  CHECK(takeTurn(*s, q2.cookie));
  CHECK(s->tickets().sweep(80000, claimWindowOnly(kWindow)).missed == 0);  // q3 waits: room full
  s->pages().release(kGuard);
  CHECK(s->tickets().render(q3.cookie, 80000, kTtl).state == TicketState::Ready);
  CHECK(s->tickets().queueDepth() == 3);  // q1 (missed), q3 and q5

  // A missed ticket leaves the ring like any other (retire; the TTL below).
  s->tickets().retire(q1.cookie.ticket, false);
  CHECK(s->tickets().queueDepth() == 2);
  CHECK(s->tickets().render(q1.cookie, 80000, kTtl).state == TicketState::Unknown);
}

TEST_CASE("the claim window counts from when the turn last came, not from a turn the room took back") {
  constexpr Millis kWindow = 10000;
  auto s = makeSegment(2);
  occupy(*s, 1);
  const Issued q = mustQueue(*s, 0);
  REQUIRE(q.ready);
  CHECK(s->tickets().sweep(1000, claimWindowOnly(kWindow)).missed == 0);  // ready: stamped at 1000
  occupy(*s, 1);                                                          // the room fills again
  CHECK(s->tickets().sweep(5000, claimWindowOnly(kWindow)).missed == 0);  // not ready: stamp dropped
  vacate(*s, 1);
  CHECK(s->tickets().sweep(12000, claimWindowOnly(kWindow)).missed == 0);  // ready again: stamped at 12000
  CHECK(s->tickets().sweep(22000, claimWindowOnly(kWindow)).missed == 0);
  CHECK(s->tickets().sweep(22001, claimWindowOnly(kWindow)).missed == 1);
  CHECK(s->stats().snapshot().missed_turns_total == 1);
}

TEST_CASE("a missed ticket whose holder comes back is returned: ready at the next free slot, ahead of the line") {
  constexpr Millis kWindow = 10000;
  auto s = makeSegment(1);
  occupy(*s, 1);
  const Issued q1 = mustQueue(*s, 0);
  const Issued q2 = mustQueue(*s, 0);
  const Issued q3 = mustQueue(*s, 0);
  vacate(*s, 1);
  missTurns(*s, 1000, kWindow, 1);       // q1 misses its turn
  REQUIRE(takeTurn(*s, q2.cookie));      // q2 takes the slot; room full again
  CHECK(s->tickets().liveQueueDepth() == 1);
  CHECK(s->tickets().queueDepth() == 2);

  // q1's holder comes back (a held request's recheck): returned, but no slot is free.
  TicketView v = s->tickets().touch(q1.cookie, 20000, kTtl);
  CHECK(v.state == TicketState::Waiting);
  CHECK(v.position == 1);
  CHECK(s->tickets().liveQueueDepth() == 2);
  CHECK(s->tickets().queueDepth() == 2);
  CHECK(s->tickets().render(q3.cookie, 20000, kTtl).position == 1);  // returned tickets are not counted ahead

  s->pages().release(kGuard);  // q2's request ends: the returned ticket goes first
  CHECK(s->tickets().render(q1.cookie, 20000, kTtl).state == TicketState::Ready);
  v = s->tickets().render(q3.cookie, 20000, kTtl);
  CHECK(v.state == TicketState::Waiting);
  CHECK(v.position == 1);
  CHECK_FALSE(takeTurn(*s, q3.cookie));
  CHECK(s->pages().occupancy() == 0);
  CHECK(takeTurn(*s, q1.cookie));
  CHECK(s->tickets().liveQueueDepth() == 1);
  CHECK(s->tickets().queueDepth() == 1);
  s->pages().release(kGuard);
  CHECK(s->tickets().render(q3.cookie, 20000, kTtl).state == TicketState::Ready);
  CHECK(takeTurn(*s, q3.cookie));
  CHECK(s->tickets().queueDepth() == 0);
  CHECK(s->stats().snapshot().missed_turns_total == 1);
}

TEST_CASE("returned tickets: only a page request brings a turn back, once; any free slot serves them") {
  constexpr Millis kWindow = 10000;
  auto s = makeSegment(2);
  occupy(*s, 2);
  const Issued q1 = mustQueue(*s, 0);
  const Issued q2 = mustQueue(*s, 0);
  const Issued q3 = mustQueue(*s, 0);
  vacate(*s, 2);
  missTurns(*s, 1000, kWindow, 2);  // q1 and q2 miss their turns
  CHECK(s->stats().snapshot().missed_turns_total == 2);
  CHECK(s->tickets().liveQueueDepth() == 1);
  CHECK(s->tickets().queueDepth() == 3);
  occupy(*s, 2);

  // Watching takes no turn back: a poll, a stream's look.
  CHECK(s->tickets().poll(q2.cookie, 20000, kTtl).state == TicketState::Waiting);  // no slot free
  CHECK(s->tickets().touch(q2.cookie, 20000, kTtl, Contact::Look).state == TicketState::Waiting);
  CHECK(s->tickets().render(q1.cookie, 20000, kTtl, Contact::Look).state == TicketState::Waiting);
  CHECK(s->tickets().liveQueueDepth() == 1);
  // Coming for the page does (a rendered waiting page, or a held request's touch).
  CHECK(s->tickets().render(q1.cookie, 20000, kTtl, Contact::Page).state == TicketState::Waiting);
  CHECK(s->tickets().touch(q2.cookie, 20000, kTtl, Contact::Page).state == TicketState::Waiting);
  CHECK(s->tickets().liveQueueDepth() == 3);
  vacate(*s, 1);
  // One slot: every returned ticket may take it, none of the line.
  CHECK(s->tickets().render(q1.cookie, 20000, kTtl).state == TicketState::Ready);
  CHECK(s->tickets().render(q2.cookie, 20000, kTtl).state == TicketState::Ready);
  CHECK(s->tickets().render(q3.cookie, 20000, kTtl).state == TicketState::Waiting);
  CHECK(takeTurn(*s, q2.cookie));
  CHECK(s->tickets().render(q1.cookie, 20000, kTtl).state == TicketState::Waiting);
  vacate(*s, 1);
  CHECK(s->tickets().render(q3.cookie, 20000, kTtl).state == TicketState::Waiting);  // q1 first

  // q1 does not take its returned turn either: it had it back once, so it leaves the line.
  missTurns(*s, 30000, kWindow, 1);
  CHECK(s->stats().snapshot().missed_turns_total == 3);
  CHECK(s->tickets().liveQueueDepth() == 1);
  CHECK(s->tickets().queueDepth() == 1);
  CHECK(s->tickets().render(q1.cookie, 41001, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().render(q3.cookie, 41001, kTtl).state == TicketState::Ready);
  CHECK(takeTurn(*s, q3.cookie));
  CHECK(s->tickets().queueDepth() == 0);
}

TEST_CASE("a missed ticket whose holder only watches is evicted after the TTL") {
  constexpr Millis kWindow = 10000;
  auto s = makeSegment(1);
  occupy(*s, 1);
  const Issued q1 = mustQueue(*s, 0);
  vacate(*s, 1);
  missTurns(*s, 1000, kWindow, 1);
  CHECK(s->tickets().poll(q1.cookie, 20000, kTtl).state == TicketState::Ready);  // shown, not returned
  CHECK(s->tickets().liveQueueDepth() == 0);
  CHECK(s->tickets().sweep(20000 + kTtl - 1, ttlOnly(kTtl)).expired == 0);  // the poll kept it alive
  CHECK(s->tickets().sweep(20000 + kTtl + 1, ttlOnly(kTtl)).expired == 1);
  CHECK(s->tickets().queueDepth() == 0);
}

TEST_CASE("returned tickets do not change anyone's position") {
  constexpr Millis kWindow = 10000;
  auto s = makeSegment(1);
  occupy(*s, 1);
  const Issued q1 = mustQueue(*s, 0);
  const Issued q2 = mustQueue(*s, 0);
  const Issued q3 = mustQueue(*s, 0);
  const Issued q4 = mustQueue(*s, 0);
  vacate(*s, 1);
  missTurns(*s, 1000, kWindow, 1);
  const std::vector<const Issued*> behind = {&q2, &q3, &q4};
  for (size_t i = 0; i < behind.size(); ++i)
    CHECK(s->tickets().render(behind[i]->cookie, 20000, kTtl).raw_position == static_cast<int64_t>(i + 1));
  CHECK(s->tickets().render(q2.cookie, 20000, kTtl).state == TicketState::Ready);

  const TicketView back = s->tickets().touch(q1.cookie, 20000, kTtl);
  CHECK(back.state == TicketState::Ready);
  CHECK(back.raw_position == 1);
  for (size_t i = 0; i < behind.size(); ++i)
    CHECK(s->tickets().render(behind[i]->cookie, 20000, kTtl).raw_position == static_cast<int64_t>(i + 1));
  // Readiness is where the returned ticket counts: q2 waits for the next slot now.
  const TicketView v = s->tickets().render(q2.cookie, 20000, kTtl);
  CHECK(v.state == TicketState::Waiting);
  CHECK(v.position == 1);
}

TEST_CASE("a missed ticket a whole ring old loses its place; a returned one keeps its entry") {
  constexpr uint32_t kRing = 64;
  constexpr Millis kWindow = 10000;
  auto s = makeSegment(2, kRing);
  auto cycle = [&](int n) {  // n short requests through the line
    for (int i = 0; i < n; ++i) {
      const Issued t = s->tickets().issue(1, 0, 0);
      if (t.outcome != IssueOutcome::Queued) return false;
      REQUIRE(t.ready);
      REQUIRE(s->pages().tryAcquire(1));
      REQUIRE(s->tickets().claim(t.cookie));
      s->pages().release(1);
    }
    return true;
  };

  const Issued missed = mustQueue(*s, 0);
  missTurns(*s, 1000, kWindow, 1);
  CHECK(cycle(kRing - 1));
  CHECK(s->tickets().render(missed.cookie, 20000, kTtl).state == TicketState::Ready);  // returned
  // Missed again; this time the ring comes round to it before its holder does.
  missTurns(*s, 30000, kWindow, 1);
  CHECK(cycle(kRing));
  CHECK(s->tickets().render(missed.cookie, 50000, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().queueDepth() == 0);
  CHECK(s->stats().snapshot().ring_full_total == 0);

  const Issued returned = mustQueue(*s, 0);
  missTurns(*s, 60000, kWindow, 1);
  CHECK(s->tickets().touch(returned.cookie, 80000, kTtl).state == TicketState::Ready);
  CHECK(cycle(kRing - 1));
  CHECK(cycle(1));  // its entry is the next one: that number is skipped, the ring goes on
  CHECK(s->stats().snapshot().ring_full_total == 0);
  CHECK(s->tickets().render(returned.cookie, 80000, kTtl).state == TicketState::Ready);
  CHECK(takeTurn(*s, returned.cookie));
  CHECK(cycle(2 * kRing));
}

TEST_CASE("every path that takes a ticket out of the line without a slot wakes PageSlot waiters; claims do not") {
  auto s = makeSegment(1);
  auto woken = [&] { return s->slots().consumeWake(kWaiter); };  // as the worker does
  occupy(*s, 1);
  const Issued q1 = mustQueue(*s, 0);
  const Issued q2 = mustQueue(*s, 0);
  const Issued q3 = mustQueue(*s, 0);
  const Issued q4 = mustQueue(*s, kTtl);
  mustQueue(*s, 2 * kTtl);
  s->slots().setWaiting(kWaiter, Resource::PageSlot, true);
  CHECK_FALSE(woken());

  s->tickets().retire(q1.cookie.ticket, false);
  CHECK(woken());
  CHECK(s->tickets().render(q2.cookie, kTtl + 1, kTtl).state == TicketState::Expired);
  CHECK(woken());
  CHECK(s->tickets().poll(q3.cookie, kTtl + 1, kTtl).state == TicketState::Expired);
  CHECK(woken());
  CHECK(s->tickets().touch(q4.cookie, 2 * kTtl + 1, kTtl).state == TicketState::Expired);
  CHECK(woken());
  CHECK(s->tickets().sweep(2 * kTtl + 1, ttlOnly(kTtl)).expired == 0);
  CHECK_FALSE(woken());  // nothing evicted, nothing to say
  CHECK(s->tickets().sweep(3 * kTtl + 1, ttlOnly(kTtl)).expired == 1);
  CHECK(woken());
  CHECK(s->tickets().liveQueueDepth() == 0);

  // First-poll grace.
  mustQueue(*s, 4 * kTtl);
  CHECK(s->tickets().sweep(4 * kTtl + 2000, firstPollOnly(1000)).ghosts == 1);
  CHECK(woken());

  // Claim window: the head of the line stops holding it up.
  const Issued head = mustQueue(*s, 5 * kTtl);
  mustQueue(*s, 5 * kTtl);
  s->pages().setCap(2);  // growing the cap wakes by itself
  CHECK(woken());
  CHECK(s->tickets().sweep(5 * kTtl, claimWindowOnly(1000)).missed == 0);  // stamped ready only
  CHECK_FALSE(woken());
  CHECK(s->tickets().sweep(5 * kTtl + 1001, claimWindowOnly(1000)).missed == 1);
  CHECK(woken());

  // A claim moves the line by one and takes a slot: no wake-up.
  CHECK(s->tickets().render(head.cookie, 5 * kTtl + 2000, kTtl).state == TicketState::Ready);  // returned
  CHECK(takeTurn(*s, head.cookie));
  CHECK_FALSE(woken());
  // The page release does wake (the semaphore's own).
  s->pages().release(kGuard);
  CHECK(woken());

  // A dead worker's reclaim.
  s->slots().started(1, 4242, 1, 0);
  s->reclaimDeadWorker(1);
  CHECK(woken());
  s->slots().setWaiting(kWaiter, Resource::PageSlot, false);
}

// Positions never increase, whatever happens in the line: a fixed-seed
// random walk over issues, claims, page releases, retires, touches and
// polls, sweeps with every limit, cap growth and time passing. Every view
// is also checked against the claim: a ticket shown Ready is claimable at
// once and one shown Waiting is not.
TEST_CASE("property: positions never increase and readiness matches the claim") {
  constexpr Millis kShortTtl = 20000;
  auto s = makeSegment(2, 256);
  std::mt19937 rng(20261201);
  std::map<uint64_t, TicketCookie> live;  // tickets the test believes may still be in the ring
  std::map<uint64_t, int64_t> last;       // ticket -> lowest raw position seen
  int64_t held = 0;                       // page slots held by admitted requests (kGuard)
  int32_t cap = 2;
  Millis now = 1;
  int64_t observed = 0, claims = 0, ready_views = 0;

  auto see = [&](uint64_t ticket, const TicketView& v) {
    if (v.state == TicketState::Unknown || v.state == TicketState::Expired) {
      live.erase(ticket);
      return;
    }
    ++observed;
    if (v.state == TicketState::Ready) ++ready_views;
    REQUIRE(v.raw_position >= 1);
    if (v.state == TicketState::Waiting) CHECK(v.position == v.raw_position);
    if (v.state == TicketState::Ready) CHECK(v.position == 0);
    auto it = last.find(ticket);
    REQUIRE(it != last.end());
    CHECK(v.raw_position <= it->second);
    it->second = std::min(it->second, v.raw_position);
  };
  auto pick = [&]() -> const TicketCookie* {
    if (live.empty()) return nullptr;
    auto it = live.begin();
    std::advance(it, static_cast<long>(rng() % live.size()));
    return &it->second;
  };

  for (int step = 0; step < 20000; ++step) {
    CAPTURE(step);
    switch (rng() % 10) {
      case 0:
      case 1: {  // a new arrival
        const Issued i = s->tickets().issue(kGuard, 0, now);
        if (i.outcome != IssueOutcome::Queued) break;
        live[i.cookie.ticket] = i.cookie;
        last[i.cookie.ticket] = i.position;
        break;
      }
      case 2:
      case 3: {  // a visitor comes back and takes its turn if it has come
        const TicketCookie* c = pick();
        if (!c) break;
        const TicketCookie cookie = *c;
        const TicketView v = s->tickets().touch(cookie, now, kShortTtl);
        see(cookie.ticket, v);
        if (v.state != TicketState::Ready && v.state != TicketState::Waiting) break;
        const bool took = takeTurn(*s, cookie);
        CHECK(took == (v.state == TicketState::Ready));
        if (took) {
          ++held;
          ++claims;
          live.erase(cookie.ticket);
        }
        break;
      }
      case 4:  // an admitted request ends
        if (held > 0) {
          s->pages().release(kGuard);
          --held;
        }
        break;
      case 5: {  // a held request's client goes away
        const TicketCookie* c = pick();
        if (c && rng() % 3 == 0) {
          const uint64_t t = c->ticket;
          s->tickets().retire(t, true);
          live.erase(t);
        }
        break;
      }
      case 6: {  // the janitor
        SweepLimits l;
        l.ttl = rng() % 2 ? kShortTtl : 0;
        l.first_poll = rng() % 2 ? 3000 : 0;
        l.claim_window = rng() % 2 ? 2000 : 0;
        s->tickets().sweep(now, l);
        break;
      }
      case 7: {  // polls and renders
        const TicketCookie* c = pick();
        if (!c) break;
        const TicketCookie cookie = *c;
        see(cookie.ticket, rng() % 2 ? s->tickets().poll(cookie, now, kShortTtl)
                                     : s->tickets().render(cookie, now, kShortTtl));
        break;
      }
      case 8:
        if (cap < 12 && rng() % 8 == 0) s->pages().setCap(++cap);
        break;
      default: now += static_cast<Millis>(rng() % 4000); break;
    }
    CHECK(s->tickets().liveQueueDepth() <= static_cast<int64_t>(live.size()));
    CHECK(s->tickets().queueDepth() >= s->tickets().liveQueueDepth());

    // Now and then a snapshot of the whole line at one instant: positions
    // never decrease along the ticket order.
    if (step % 64 == 0) {
      int64_t previous = 0;
      const std::map<uint64_t, TicketCookie> snapshot = live;
      for (const auto& [ticket, cookie] : snapshot) {
        const TicketView v = s->tickets().touch(cookie, now, kShortTtl);
        see(ticket, v);
        if (v.state != TicketState::Ready && v.state != TicketState::Waiting) continue;
        CHECK(v.raw_position >= previous);
        previous = v.raw_position;
      }
    }
  }
  const StatsSnapshot st = s->stats().snapshot();
  MESSAGE("observed ", observed, " views (", ready_views, " ready), ", claims, " claims; queued ", st.queued_total,
          ", evicted ", st.evicted_total, " (ghosts ", st.ghost_evicted_total, "), missed ", st.missed_turns_total,
          ", ring full ", st.ring_full_total, ", cap ", cap);
  // The walk went through every path it is meant to cover.
  CHECK(claims > 100);
  CHECK(st.evicted_total > st.ghost_evicted_total);
  CHECK(st.ghost_evicted_total > 0);
  CHECK(st.missed_turns_total > 0);
  CHECK(st.timeouts_total > 0);

  for (const auto& [ticket, cookie] : live) s->tickets().retire(ticket, false);
  for (; held > 0; --held) s->pages().release(kGuard);
  s->tickets().sweep(now + 10 * kShortTtl, ttlOnly(kShortTtl));  // missed tickets the walk lost track of
  CHECK(s->tickets().queueDepth() == 0);
  CHECK(s->tickets().liveQueueDepth() == 0);
  CHECK(s->pages().occupancy() == 0);
}

TEST_CASE("the ring bounds the visitors who wait, not the span of numbers") {
  // One visitor waits at the head of a full room while many more arrive and
  // leave: the head is carried (Returned, same number, same cookie, same
  // place) instead of the ring refusing everyone behind it.
  auto s = makeSegment(1, 64);
  occupy(*s, 1);
  const Issued first = mustQueue(*s, 0);
  for (int i = 0; i < 300; ++i) {
    const Issued q = s->tickets().issue(kGuard, 0, 0);
    REQUIRE(q.outcome == IssueOutcome::Queued);
    CHECK(q.position <= 2);
    s->tickets().retire(q.cookie.ticket, false);  // abandoned
  }
  CHECK(s->stats().snapshot().ring_full_total == 0);
  CHECK(s->tickets().liveQueueDepth() == 1);
  TicketView v = s->tickets().render(first.cookie, 0, kTtl);
  CHECK(v.state == TicketState::Waiting);
  CHECK(v.position == 1);
  // Someone behind it now: the head still goes first.
  const Issued behind = mustQueue(*s, 0);
  CHECK(behind.position == 1);  // a returned ticket ahead is not counted, and no position grows
  vacate(*s, 1);
  CHECK(s->tickets().render(first.cookie, 0, kTtl).state == TicketState::Ready);
  CHECK(s->tickets().render(behind.cookie, 0, kTtl).state == TicketState::Waiting);
  CHECK(takeTurn(*s, first.cookie));
  s->pages().release(kGuard);
  CHECK(s->tickets().render(behind.cookie, 0, kTtl).state == TicketState::Ready);
}

TEST_CASE("a carried ticket is still the janitor's: its claim window and TTL apply") {
  constexpr Millis kWindow = 10000;
  auto s = makeSegment(1, 64);
  occupy(*s, 1);
  const Issued first = mustQueue(*s, 0);
  for (int i = 0; i < 150; ++i) s->tickets().retire(mustQueue(*s, 0).cookie.ticket, false);
  CHECK(s->tickets().liveQueueDepth() == 1);
  vacate(*s, 1);
  // Offered the slot and not taken: it leaves (a returned turn comes back no more).
  missTurns(*s, 1000, kWindow, 1);
  CHECK(s->tickets().queueDepth() == 0);
  CHECK(s->tickets().render(first.cookie, 30000, kTtl).state == TicketState::Unknown);
  // A later arrival goes first now.
  const Issued next = mustQueue(*s, 30000);
  CHECK(next.ready);
}

TEST_CASE("the ring refuses only when every entry holds someone who waits") {
  auto s = makeSegment(1, 64);
  occupy(*s, 1);
  int queued = 0;
  for (int i = 0; i < 100; ++i) {
    const Issued q = s->tickets().issue(kGuard, 0, 0);
    if (q.outcome != IssueOutcome::Queued) {
      CHECK(q.outcome == IssueOutcome::RingFull);
      break;
    }
    ++queued;
  }
  CHECK(queued == 64);
  CHECK(s->tickets().liveQueueDepth() == 64);
}
