// A scheduled sale's pre-queue in the ticket ring (sale.h, tickets.h
// "Scheduled sale"): the block of numbers set aside when the pre-queue
// opens, random places in it, Vacant numbers counted by nobody, the low-water
// mark held at the block while it is open, the line standing still, and the
// block closing at the start. The wall clock is real: a test puts "now"
// inside or after the pre-queue by scheduling the start an hour away or a
// second ago, as a reload of the master would.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "ruled.h"
#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

constexpr Millis kTtl = 300000;
constexpr WorkerSlot kGuard = 0;
constexpr WorkerSlot kInFlight = 2;
constexpr Millis kHour = 3600 * 1000;

std::unique_ptr<Segment> makeSegment(int32_t cap, uint32_t ring = 1u << 12) {
  Geometry g;
  g.ring_size = ring;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  auto s = Segment::create(g, cap, 100);
  followRoomRules(*s);
  return s;
}

// Now is inside the pre-queue (the start an hour away) or past the start.
void prequeueNow(Segment& s, bool shuffle = true, int64_t start = 0) {
  s.sale().schedule(start != 0 ? start : unixMs() + kHour, 2 * kHour, shuffle);
}
void startNow(Segment& s, bool shuffle = true) {
  s.sale().schedule(unixMs() - 1000, 2 * kHour, shuffle);
}

Issued mustQueue(Segment& s, Millis now = 0) {
  const Issued issued = s.tickets().issue(kGuard, 0, now);
  REQUIRE(issued.outcome == IssueOutcome::Queued);
  return issued;
}

bool takeTurn(Segment& s, const TicketCookie& cookie) {
  if (!s.pages().tryAcquire(kGuard)) return false;
  if (s.tickets().claim(cookie)) return true;
  s.pages().release(kGuard);
  return false;
}

// Admits the whole line, one visitor at a time, each going out at once:
// every round offers the turn to each cookie; returns the admission order
// (ticket numbers).
std::vector<uint64_t> drain(Segment& s, std::vector<TicketCookie> cookies) {
  std::vector<uint64_t> order;
  for (int round = 0; round < 10000 && !cookies.empty(); ++round) {
    for (auto it = cookies.begin(); it != cookies.end();) {
      if (takeTurn(s, *it)) {
        order.push_back(it->ticket);
        s.pages().release(kGuard);
        it = cookies.erase(it);
      } else {
        ++it;
      }
    }
  }
  REQUIRE(cookies.empty());
  return order;
}

}  // namespace

TEST_CASE("before the pre-queue the room works as usual; in it the line stands still and nobody goes straight in") {
  auto s = makeSegment(2);
  s->sale().schedule(unixMs() + 2 * kHour, kHour, true);  // the pre-queue opens in an hour
  CHECK(s->modes().lineMoves());
  CHECK_FALSE(s->sale().prequeue(unixMs()));
  CHECK(s->sale().startsIn(unixMs()) == 0);
  const Issued before = mustQueue(*s);
  CHECK(before.ready);
  CHECK(before.cookie.ticket == 1);
  CHECK(takeTurn(*s, before.cookie));
  s->pages().release(kGuard);

  prequeueNow(*s);
  CHECK_FALSE(s->modes().lineMoves());  // straightIn and session shares read this
  CHECK(s->sale().prequeue(unixMs()));
  const int64_t left = s->sale().startsIn(unixMs());
  CHECK(left > 3590);
  CHECK(left <= 3600);
  const Issued early = mustQueue(*s);
  CHECK_FALSE(early.ready);  // both slots are free, and still nobody's turn comes
  CHECK_FALSE(takeTurn(*s, early.cookie));
  CHECK(s->pages().occupancy() == 0);
  CHECK(s->tickets().render(early.cookie, 0, kTtl).state == TicketState::Waiting);

  // Passthrough, an operator's override, goes on through the pre-queue.
  s->modes().set(RoomMode::Passthrough);
  CHECK(s->modes().lineMoves());
  s->modes().set(RoomMode::Open);

  startNow(*s);
  CHECK(s->modes().lineMoves());
  CHECK(s->sale().startsIn(unixMs()) == 0);
  CHECK(takeTurn(*s, early.cookie));
}

TEST_CASE("the block: K = ring/2 numbers set aside when the pre-queue opens; arrivals take random places in it") {
  constexpr uint32_t kRing = 1u << 12;
  constexpr uint64_t kBlock = kRing / 2;
  auto s = makeSegment(1, kRing);
  REQUIRE(s->pages().tryAcquire(kInFlight));  // the room is full: the first arrivals wait
  std::vector<TicketCookie> before;
  for (int i = 0; i < 3; ++i) before.push_back(mustQueue(*s).cookie);
  CHECK(before.back().ticket == 3);

  prequeueNow(*s);
  std::vector<TicketCookie> pre;
  std::set<uint64_t> numbers;
  for (int i = 0; i < 200; ++i) {
    const Issued issued = mustQueue(*s);
    CHECK_FALSE(issued.ready);
    pre.push_back(issued.cookie);
    numbers.insert(issued.cookie.ticket);
    CHECK(issued.cookie.ticket >= 4);
    CHECK(issued.cookie.ticket < 4 + kBlock);
  }
  CHECK(numbers.size() == pre.size());  // one place each
  std::vector<uint64_t> arrival;
  for (const TicketCookie& c : pre) arrival.push_back(c.ticket);
  // 200 uniform random places in arrival order being sorted (or sorted
  // backwards) has probability 2/200!.
  CHECK_FALSE(std::is_sorted(arrival.begin(), arrival.end()));
  CHECK_FALSE(std::is_sorted(arrival.rbegin(), arrival.rend()));
  CHECK(s->tickets().liveQueueDepth() == 203);
  CHECK(s->tickets().queueDepth() == 203);

  // The janitor vacates the untaken numbers: they count as nobody.
  const SaleTick tick = s->tickets().saleTick(unixMs());
  CHECK(tick.open);
  CHECK(tick.first == 4);
  CHECK(s->tickets().liveQueueDepth() == 203);
  CHECK(s->tickets().queueDepth() == 203);
  std::vector<uint64_t> sorted(numbers.begin(), numbers.end());
  for (const TicketCookie& c : pre) {
    const TicketView v = s->tickets().render(c, 0, kTtl);
    CHECK(v.state == TicketState::Waiting);
    const int64_t ahead = std::lower_bound(sorted.begin(), sorted.end(), c.ticket) - sorted.begin();
    CHECK(v.raw_position == 3 + ahead + 1);  // the three before the pre-queue, then its place in the shuffle
  }
  CHECK(s->tickets().head(1000, 0).size() == 203);

  // The start: the block closes, the line moves in ticket order (the
  // shuffle), a later arrival is numbered after the block and waits behind
  // everyone.
  s->pages().release(kInFlight);
  startNow(*s);
  const Issued late = mustQueue(*s);
  CHECK(late.cookie.ticket == 4 + kBlock);
  CHECK(late.position == 204);
  const SaleTick closed = s->tickets().saleTick(unixMs());
  CHECK(closed.closed);
  CHECK(closed.placed == 200);
  CHECK_FALSE(s->tickets().saleTick(unixMs()).closed);  // once
  std::vector<TicketCookie> everyone = before;
  everyone.insert(everyone.end(), pre.begin(), pre.end());
  everyone.push_back(late.cookie);
  const std::vector<uint64_t> order = drain(*s, everyone);
  std::vector<uint64_t> expected = {1, 2, 3};
  expected.insert(expected.end(), sorted.begin(), sorted.end());
  expected.push_back(late.cookie.ticket);
  CHECK(order == expected);
  CHECK(s->tickets().queueDepth() == 0);
  CHECK(s->stats().snapshot().fifo_inversions_total == 0);
  // L passed the closed block: the ring is usable for whole rings again.
  for (int i = 0; i < 3 * static_cast<int>(kRing); ++i) {
    const Issued t = mustQueue(*s);
    REQUIRE(takeTurn(*s, t.cookie));
    s->pages().release(kGuard);
  }
}

TEST_CASE("while the block is open the low-water mark never enters it, even when all its tickets have left") {
  constexpr uint32_t kRing = 64;
  constexpr uint64_t kBlock = kRing / 2;
  auto s = makeSegment(1, kRing);
  prequeueNow(*s);
  std::vector<uint64_t> placed;
  for (uint64_t i = 0; i < kBlock; ++i) {
    const Issued t = mustQueue(*s);
    CHECK(t.cookie.ticket >= 1);
    CHECK(t.cookie.ticket <= kBlock);
    placed.push_back(t.cookie.ticket);
  }
  // The block is full: the next arrival goes after it, in arrival order.
  const Issued over = mustQueue(*s);
  CHECK(over.cookie.ticket == kBlock + 1);
  s->tickets().retire(over.cookie.ticket, false);
  for (uint64_t t : placed) s->tickets().retire(t, false);
  CHECK(s->tickets().queueDepth() == 0);
  // Everyone left, yet L stays at the block: a ring's worth past it is full.
  int issued = 0;
  for (; issued < static_cast<int>(kRing); ++issued) {
    const Issued t = s->tickets().issue(kGuard, 0, 0);
    if (t.outcome != IssueOutcome::Queued) break;
    CHECK(t.cookie.ticket > kBlock);
    s->tickets().retire(t.cookie.ticket, false);
  }
  CHECK(issued == static_cast<int>(kRing - kBlock - 1));
  CHECK(s->stats().snapshot().ring_full_total == 1);
  // Closed, the block lets L pass.
  startNow(*s);
  CHECK(s->tickets().saleTick(unixMs()).closed);
  for (int i = 0; i < 2 * static_cast<int>(kRing); ++i) {
    const Issued t = mustQueue(*s);
    s->tickets().retire(t.cookie.ticket, false);
  }
}

TEST_CASE("an untaken block keeps nobody waiting: vacant numbers are out of the line, and closing finishes them") {
  auto s = makeSegment(3, 1u << 12);
  prequeueNow(*s);
  CHECK(s->tickets().saleTick(unixMs()).open);  // the janitor opens it before any arrival
  const Issued only = mustQueue(*s);
  CHECK(only.position == 1);
  CHECK(s->tickets().liveQueueDepth() == 1);
  CHECK(s->tickets().queueDepth() == 1);
  CHECK(s->tickets().head(10, 0).size() == 1);
  startNow(*s);
  CHECK(s->tickets().render(only.cookie, 0, kTtl).state == TicketState::Ready);  // even before the janitor closes
  const Issued late = mustQueue(*s);
  CHECK(late.ready);  // cap 3: one ahead, a slot for it
  CHECK(s->tickets().saleTick(unixMs()).closed);
  CHECK(takeTurn(*s, only.cookie));
  CHECK(takeTurn(*s, late.cookie));
  CHECK(s->tickets().queueDepth() == 0);
}

TEST_CASE("without -shuffle-prequeue there is no block: pre-queue arrivals are numbered in arrival order") {
  auto s = makeSegment(2);
  prequeueNow(*s, false);
  CHECK_FALSE(s->tickets().saleTick(unixMs()).open);
  std::vector<TicketCookie> pre;
  for (uint64_t i = 1; i <= 20; ++i) {
    const Issued t = mustQueue(*s);
    CHECK(t.cookie.ticket == i);
    CHECK_FALSE(t.ready);
    pre.push_back(t.cookie);
  }
  startNow(*s, false);
  const std::vector<uint64_t> order = drain(*s, pre);
  for (size_t i = 0; i < order.size(); ++i) CHECK(order[i] == i + 1);
}

TEST_CASE("a reload keeps the block; a new start lets a spent block open again for the new pre-queue") {
  auto s = makeSegment(1, 1u << 10);
  const int64_t start = unixMs() + kHour;
  prequeueNow(*s, true, start);
  const Issued a = mustQueue(*s);
  CHECK_FALSE(s->sale().schedule(start, 2 * kHour, true));  // the same schedule: nothing moves
  const Issued b = mustQueue(*s);
  CHECK(a.cookie.ticket < 1 + 512);
  CHECK(b.cookie.ticket < 1 + 512);  // the same block
  startNow(*s);
  CHECK(s->tickets().saleTick(unixMs()).closed);
  CHECK(drain(*s, {a.cookie, b.cookie}).size() == 2);

  // A second sale: the block opens again, past everything issued.
  CHECK(s->sale().schedule(unixMs() + kHour, 2 * kHour, true));
  const Issued c = mustQueue(*s);
  CHECK(c.cookie.ticket >= 1 + 512);
  CHECK(c.cookie.ticket < 1 + 512 + 1 + 512);
  const SaleTick tick = s->tickets().saleTick(unixMs());
  CHECK(tick.open);
  CHECK(tick.first == 1 + 512);
}
