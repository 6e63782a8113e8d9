// The room's mode (modes.h) and the admission rate's bucket (admit_rate.h),
// and what both do to the line: readiness, claims and the janitor's missed
// turns (tickets.h).
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "ruled.h"
#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

constexpr Millis kTtl = 300000;
constexpr Millis kWindow = 10000;
constexpr WorkerSlot kGuard = 0;
constexpr int64_t kMs = 1'000'000;  // ns
constexpr int64_t kHour = 3600 * 1000 * kMs;

std::unique_ptr<Segment> makeSegment(int32_t cap) {
  Geometry g;
  g.ring_size = 1u << 10;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  auto s = Segment::create(g, cap, 100);
  followRoomRules(*s);
  return s;
}

Issued mustQueue(Segment& s, Millis now = 0) {
  const Issued issued = s.tickets().issue(kGuard, 0, now);
  REQUIRE(issued.outcome == IssueOutcome::Queued);
  return issued;
}

// The page guard's takeTurn: a page slot, then the claim.
bool takeTurn(Segment& s, const TicketCookie& cookie) {
  if (!s.pages().tryAcquire(kGuard)) return false;
  if (s.tickets().claim(cookie)) return true;
  s.pages().release(kGuard);
  return false;
}

SweepLimits claimWindow() {
  SweepLimits l;
  l.claim_window = kWindow;
  return l;
}

// Missed turns over a long stretch of janitor passes (each stamps or judges
// the ready tickets).
int64_t sweepMissed(Segment& s, Millis from) {
  int64_t missed = 0;
  for (Millis t = from; t <= from + 5 * kWindow; t += kWindow / 2) missed += s.tickets().sweep(t, claimWindow()).missed;
  return missed;
}

}  // namespace

TEST_CASE("the mode word: open when fresh, set for everyone, the configured mode kept apart") {
  auto s = makeSegment(2);
  CHECK(s->modes().mode() == RoomMode::Open);
  CHECK(s->modes().configured() == RoomMode::Open);
  CHECK(s->modes().lineMoves());
  CHECK(s->modes().set(RoomMode::Pause) == RoomMode::Open);
  CHECK(s->modes().set(RoomMode::Reject) == RoomMode::Pause);
  CHECK(s->modes().mode() == RoomMode::Reject);
  CHECK_FALSE(s->modes().lineMoves());
  CHECK(s->modes().configured() == RoomMode::Open);  // only the master's reload moves it
  s->modes().setConfigured(RoomMode::Passthrough);
  CHECK(s->modes().configured() == RoomMode::Passthrough);
  CHECK(s->modes().mode() == RoomMode::Reject);
  s->modes().set(RoomMode::Passthrough);
  CHECK(s->modes().lineMoves());
  for (RoomMode m : {RoomMode::Open, RoomMode::Pause, RoomMode::Reject, RoomMode::Passthrough})
    CHECK(parseRoomMode(roomModeName(m)) == m);
  CHECK_FALSE(parseRoomMode("Open").has_value());
  CHECK_FALSE(parseRoomMode("").has_value());
}

TEST_CASE("pause: no turn comes, places are kept, nothing is missed; open again admits in ticket order") {
  auto s = makeSegment(2);
  s->modes().set(RoomMode::Pause);
  std::vector<Issued> line;
  for (int i = 0; i < 3; ++i) line.push_back(mustQueue(*s));
  for (int i = 0; i < 3; ++i) {
    CHECK_FALSE(line[i].ready);  // two slots are free, and still nobody's turn
    CHECK(line[i].position == i + 1);
  }
  CHECK_FALSE(takeTurn(*s, line[0].cookie));
  CHECK(s->pages().occupancy() == 0);
  // The janitor sees nobody ready: no ready stamp, no missed turn, however long.
  CHECK(sweepMissed(*s, 1000) == 0);
  for (int i = 0; i < 3; ++i) {
    const TicketView v = s->tickets().touch(line[i].cookie, 2000, kTtl);
    CHECK(v.state == TicketState::Waiting);
    CHECK(v.position == i + 1);
  }
  CHECK(s->stats().snapshot().missed_turns_total == 0);
  // Open again: the first two (two free slots) in order, the third waits.
  s->modes().set(RoomMode::Open);
  CHECK(s->tickets().touch(line[0].cookie, 3000, kTtl).state == TicketState::Ready);
  CHECK(s->tickets().touch(line[1].cookie, 3000, kTtl).state == TicketState::Ready);
  CHECK(s->tickets().touch(line[2].cookie, 3000, kTtl).state == TicketState::Waiting);
  CHECK_FALSE(takeTurn(*s, line[2].cookie));
  CHECK(takeTurn(*s, line[0].cookie));
  CHECK(takeTurn(*s, line[1].cookie));
  CHECK(s->tickets().liveQueueDepth() == 1);
}

TEST_CASE("pause and reject: a returned ticket waits too, and reject stands the line still like pause") {
  auto s = makeSegment(1);
  const Issued head = mustQueue(*s);
  const Issued next = mustQueue(*s);
  // The head misses its turn while open, then comes back: returned.
  REQUIRE(s->tickets().sweep(1000, claimWindow()).missed == 0);
  REQUIRE(s->tickets().sweep(1000 + kWindow + 1, claimWindow()).missed == 1);
  REQUIRE(s->tickets().touch(head.cookie, 20000, kTtl).state == TicketState::Ready);  // returned, slot free
  for (RoomMode m : {RoomMode::Pause, RoomMode::Reject}) {
    s->modes().set(m);
    CHECK(s->tickets().touch(head.cookie, 21000, kTtl).state == TicketState::Waiting);
    CHECK(s->tickets().touch(next.cookie, 21000, kTtl).state == TicketState::Waiting);
    CHECK_FALSE(takeTurn(*s, head.cookie));
    CHECK(sweepMissed(*s, 22000) == 0);
  }
  s->modes().set(RoomMode::Open);
  CHECK(takeTurn(*s, head.cookie));
  CHECK(s->stats().snapshot().missed_turns_total == 1);  // the one missed while open
}

TEST_CASE("passthrough: every waiting ticket is ready, whatever the occupancy") {
  auto s = makeSegment(1);
  REQUIRE(s->pages().tryAcquire(2));  // the only slot is taken
  const Issued a = mustQueue(*s);
  const Issued b = mustQueue(*s);
  CHECK(s->tickets().touch(b.cookie, 1000, kTtl).state == TicketState::Waiting);
  s->modes().set(RoomMode::Passthrough);
  CHECK(s->tickets().touch(a.cookie, 1000, kTtl).state == TicketState::Ready);
  CHECK(s->tickets().touch(b.cookie, 1000, kTtl).state == TicketState::Ready);
  // The page guard goes through without a slot; the ticket leaves the line.
  CHECK(s->tickets().claim(b.cookie));
  CHECK(s->tickets().liveQueueDepth() == 1);
  CHECK(s->pages().occupancy() == 1);  // nothing taken past the cap
}

TEST_CASE("the bucket: full when configured, one token per interval, never above the burst") {
  auto s = makeSegment(2);
  AdmitRate& rate = s->admitRate();
  const int64_t t0 = 5 * kHour;
  CHECK_FALSE(rate.limited());
  CHECK(rate.available(t0) == AdmitRate::kUnlimited);
  CHECK(rate.take(t0));
  rate.configure(100 * kMs, 3, t0);  // 10/s, burst 3
  CHECK(rate.limited());
  CHECK(rate.available(t0) == 3);
  CHECK(rate.take(t0));
  CHECK(rate.take(t0));
  CHECK(rate.take(t0));
  CHECK_FALSE(rate.take(t0));
  CHECK(rate.available(t0) == 0);
  CHECK(rate.available(t0 + 99 * kMs) == 0);
  CHECK(rate.available(t0 + 100 * kMs) == 1);
  CHECK(rate.available(t0 + 250 * kMs) == 2);
  CHECK(rate.available(t0 + 10 * 1000 * kMs) == 3);  // an idle bucket holds the burst, no more
  CHECK(rate.take(t0 + 100 * kMs));
  CHECK_FALSE(rate.take(t0 + 100 * kMs));
  rate.giveBack();  // a claim that lost its race
  CHECK(rate.take(t0 + 100 * kMs));
  // The same settings again change nothing; new ones refill.
  rate.configure(100 * kMs, 3, t0 + 100 * kMs);
  CHECK(rate.available(t0 + 100 * kMs) == 0);
  rate.configure(50 * kMs, 3, t0 + 100 * kMs);
  CHECK(rate.available(t0 + 100 * kMs) == 3);
  rate.configure(0, 1, t0);
  CHECK_FALSE(rate.limited());
  CHECK(rate.available(t0) == AdmitRate::kUnlimited);
}

TEST_CASE("the bucket holds its rate: 20 s of eager takers at 10/s get burst + 200") {
  auto s = makeSegment(2);
  AdmitRate& rate = s->admitRate();
  const int64_t t0 = kHour;
  rate.configure(100 * kMs, 10, t0);
  int64_t taken = 0;
  for (int64_t t = t0; t < t0 + 20'000 * kMs; t += kMs)
    for (int i = 0; i < 3; ++i) taken += rate.take(t) ? 1 : 0;
  CHECK(taken >= 10 + 199);
  CHECK(taken <= 10 + 200);
}

TEST_CASE("the bucket under racing takers: exactly the burst is handed out") {
  auto s = makeSegment(2);
  AdmitRate& rate = s->admitRate();
  const int64_t t0 = kHour;
  rate.configure(kHour, 5000, t0);  // no refill within the test
  std::atomic<int64_t> taken{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      for (int n = 0; n < 3000; ++n)
        if (rate.take(t0)) taken.fetch_add(1);
    });
  for (std::thread& t : threads) t.join();
  CHECK(taken.load() == 5000);
  CHECK(rate.available(t0) == 0);
}

TEST_CASE("with the bucket empty no ticket is ready and none misses its turn; a claim spends a token") {
  auto s = makeSegment(10);
  s->admitRate().configure(kHour, 2, monotonicNs());  // two tokens, no refill within the test
  std::vector<Issued> line;
  for (int i = 0; i < 4; ++i) line.push_back(mustQueue(*s));
  CHECK(line[0].ready);
  CHECK(line[1].ready);
  CHECK_FALSE(line[2].ready);  // ten slots free, two tokens
  CHECK(takeTurn(*s, line[0].cookie));
  CHECK(takeTurn(*s, line[1].cookie));
  CHECK(s->admitRate().available(monotonicNs()) == 0);
  CHECK_FALSE(takeTurn(*s, line[2].cookie));
  CHECK(s->pages().occupancy() == 2);
  const TicketView v = s->tickets().touch(line[2].cookie, 1000, kTtl);
  CHECK(v.state == TicketState::Waiting);
  CHECK(v.position == 1);
  CHECK(sweepMissed(*s, 1000) == 0);
  // Passthrough spends no tokens.
  s->modes().set(RoomMode::Passthrough);
  CHECK(s->tickets().claim(line[2].cookie));
  s->modes().set(RoomMode::Open);
  // Without a limit the rest goes as the slots allow.
  s->admitRate().configure(0, 1, monotonicNs());
  CHECK(takeTurn(*s, line[3].cookie));
}
