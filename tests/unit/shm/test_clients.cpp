// The client table (clients.h): live tickets per client and
// -max-tickets-per-client, strikes, bans and their doubling, a ban's tickets
// leaving the line, a full table and its eviction rule, threads striking
// and issuing at once. What only a SIGKILL can leave behind (a count one
// off, an entry locked by a dead writer) is in tests/multiproc.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <iterator>
#include <thread>
#include <vector>

#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

constexpr Millis kTtl = 300000;
constexpr WorkerSlot kWorker = 0;
constexpr WorkerSlot kInFlight = 2;  // page slots of requests already in flight
constexpr WorkerSlot kWaiter = 3;    // parked requests waiting for PageSlot wake-ups
constexpr Millis kMinute = 60 * 1000;
constexpr Millis kNow = 1'000'000'000;  // a monotonic time, about 11.6 days after boot

std::unique_ptr<Segment> makeSegment(int32_t cap = 1, uint32_t clients = 4096, uint32_t ring = 1u << 12) {
  Geometry g;
  g.ring_size = ring;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  g.client_table_size = clients;
  return Segment::create(g, cap, 100);
}

// An IPv4 client as the caller keys it: IPv4-mapped IPv6.
ClientTicketing client(uint32_t n, int32_t max_per_client = 0) {
  ClientTicketing c;
  c.key[10] = 0xff;
  c.key[11] = 0xff;
  c.key[12] = 192;
  c.key[13] = static_cast<uint8_t>(n >> 16);
  c.key[14] = static_cast<uint8_t>(n >> 8);
  c.key[15] = static_cast<uint8_t>(n);
  c.max_per_client = max_per_client;
  return c;
}

Issued queueFor(Segment& s, const ClientTicketing& c, Millis now = kNow) {
  const Issued issued = s.tickets().issue(kWorker, 0, now, &c);
  REQUIRE(issued.outcome == IssueOutcome::Queued);
  return issued;
}

// The room is full: every ticket waits.
void occupy(Segment& s, int n) {
  for (int i = 0; i < n; ++i) REQUIRE(s.pages().tryAcquire(kInFlight));
}

bool takeTurn(Segment& s, const TicketCookie& cookie) {
  if (!s.pages().tryAcquire(kWorker)) return false;
  if (s.tickets().claim(cookie)) return true;
  s.pages().release(kWorker);
  return false;
}

int64_t live(const Segment& s, const ClientTicketing& c) {
  return s.clients().liveTickets(c.key);
}

AbusePolicy policy(int32_t threshold, Millis ban = 10 * kMinute) {
  AbusePolicy p;
  p.threshold = threshold;
  p.ban = ban;
  return p;
}

}  // namespace

TEST_CASE("a client's live tickets go up on issue and down on claim, retire, expiry and the first-poll grace") {
  auto s = makeSegment(1);
  occupy(*s, 1);
  const ClientTicketing a = client(1), b = client(2);
  std::vector<Issued> tickets;
  for (int i = 0; i < 6; ++i) tickets.push_back(queueFor(*s, a, kNow + i * 1000));
  const Issued other = queueFor(*s, b);
  CHECK(live(*s, a) == 6);
  CHECK(live(*s, b) == 1);
  CHECK(s->clients().tracked() == 2);

  s->tickets().retire(tickets[5].cookie.ticket, false);  // retire
  CHECK(live(*s, a) == 5);
  s->tickets().retire(tickets[5].cookie.ticket, false);  // a second retire changes nothing
  CHECK(live(*s, a) == 5);

  // Expiry found by a render, and by the janitor's TTL.
  CHECK(s->tickets().render(tickets[4].cookie, kNow + 4000 + kTtl + 1, kTtl).state == TicketState::Expired);
  CHECK(live(*s, a) == 4);
  for (int i = 0; i < 3; ++i) s->tickets().touch(tickets[i].cookie, kNow + kTtl, kTtl);  // seen again
  s->tickets().touch(other.cookie, kNow + kTtl, kTtl);
  SweepLimits ttl;
  ttl.ttl = kTtl;
  CHECK(s->tickets().sweep(kNow + 3000 + kTtl + 1, ttl).expired == 1);  // tickets[3], never seen again
  CHECK(live(*s, a) == 3);

  // The first-poll grace: a ticket whose holder never came back.
  const Issued ghost = queueFor(*s, a, kNow + kTtl);
  CHECK(live(*s, a) == 4);
  SweepLimits grace;
  grace.first_poll = 15000;
  CHECK(s->tickets().sweep(kNow + kTtl + 15001, grace).ghosts == 1);
  CHECK(s->tickets().render(ghost.cookie, kNow + kTtl + 15001, kTtl).state == TicketState::Unknown);
  CHECK(live(*s, a) == 3);

  // Claims, in line order.
  s->pages().release(kInFlight);
  CHECK(takeTurn(*s, tickets[0].cookie));
  CHECK(live(*s, a) == 2);
  CHECK_FALSE(s->tickets().claim(tickets[0].cookie));  // claimed once only
  CHECK(live(*s, a) == 2);
  s->pages().setCap(4);
  CHECK(takeTurn(*s, tickets[1].cookie));
  CHECK(takeTurn(*s, tickets[2].cookie));
  CHECK(takeTurn(*s, other.cookie));
  CHECK(live(*s, a) == 0);
  CHECK(live(*s, b) == 0);
  CHECK(s->tickets().queueDepth() == 0);
  CHECK(s->stats().snapshot().client_table_full_total == 0);
}

TEST_CASE("a missed ticket counts until it is claimed after all, or loses its entry a ring later") {
  constexpr uint32_t kRing = 64;
  constexpr Millis kWindow = 10000;
  auto s = makeSegment(2, 4096, kRing);
  const ClientTicketing a = client(7);
  SweepLimits window;
  window.claim_window = kWindow;
  auto miss = [&](Millis now) {
    REQUIRE(s->tickets().sweep(now, window).missed == 0);
    REQUIRE(s->tickets().sweep(now + kWindow + 1, window).missed == 1);
  };
  auto cycle = [&](int n) {  // n short requests through the line, no client
    for (int i = 0; i < n; ++i) {
      const Issued t = s->tickets().issue(1, 0, kNow);
      REQUIRE(t.outcome == IssueOutcome::Queued);
      REQUIRE(t.ready);
      REQUIRE(takeTurn(*s, t.cookie));
      s->pages().release(kWorker);
    }
  };

  // Missed, back (Returned), claimed.
  const Issued first = queueFor(*s, a);
  miss(kNow);
  CHECK(live(*s, a) == 1);  // a missed ticket is still the client's
  CHECK(s->tickets().render(first.cookie, kNow + 20000, kTtl).state == TicketState::Ready);
  CHECK(live(*s, a) == 1);
  CHECK(takeTurn(*s, first.cookie));
  s->pages().release(kWorker);
  CHECK(live(*s, a) == 0);

  // Missed, and the ring comes round to its entry before its holder does:
  // the issuer that takes the entry leaves the client for it.
  const Issued second = queueFor(*s, a, kNow + 30000);
  miss(kNow + 30000);
  CHECK(live(*s, a) == 1);
  cycle(kRing - 1);
  CHECK(live(*s, a) == 1);  // its entry is the next one
  cycle(1);
  CHECK(live(*s, a) == 0);
  CHECK(s->tickets().render(second.cookie, kNow + 60000, kTtl).state == TicketState::Unknown);

  // The entry's next tracked ticket is counted afresh, and a sweep over
  // the whole ring finds nothing to mend.
  queueFor(*s, a, kNow + 60000);
  CHECK(live(*s, a) == 1);
  CHECK(s->tickets().sweep(kNow + 61000, SweepLimits{}).clients_repaired == 0);
  CHECK(s->tickets().sweep(kNow + 200000, SweepLimits{}).clients_repaired == 0);
  CHECK(live(*s, a) == 1);
}

TEST_CASE("max_per_client: ClientLimit takes nothing; a ticket that leaves makes room again") {
  auto s = makeSegment(1);
  occupy(*s, 1);
  const ClientTicketing a = client(1, 2), b = client(2, 2);
  const Issued a1 = queueFor(*s, a);
  queueFor(*s, a);
  const Issued limited = s->tickets().issue(kWorker, 0, kNow, &a);
  CHECK(limited.outcome == IssueOutcome::ClientLimit);
  CHECK(limited.cookie.ticket == 0);
  CHECK(live(*s, a) == 2);
  CHECK(s->tickets().queueDepth() == 2);
  CHECK(s->stats().snapshot().queued_total == 2);
  // Another client is not limited by a's tickets.
  queueFor(*s, b);
  queueFor(*s, b);
  CHECK(s->tickets().issue(kWorker, 0, kNow, &b).outcome == IssueOutcome::ClientLimit);
  // One of a's leaves: room for one more.
  s->tickets().retire(a1.cookie.ticket, false);
  CHECK(live(*s, a) == 1);
  queueFor(*s, a);
  CHECK(s->tickets().issue(kWorker, 0, kNow, &a).outcome == IssueOutcome::ClientLimit);
  // 0: unlimited, still counted.
  const ClientTicketing unlimited = client(3, 0);
  for (int i = 0; i < 20; ++i) queueFor(*s, unlimited);
  CHECK(live(*s, unlimited) == 20);
  // Without a client: untracked, as before.
  CHECK(s->tickets().issue(kWorker, 0, kNow).outcome == IssueOutcome::Queued);
  CHECK(s->clients().tracked() == 3);
  CHECK(s->stats().snapshot().client_table_full_total == 0);
}

TEST_CASE("the breaker and a full ring give the client's count back") {
  constexpr uint32_t kRing = 64;
  auto s = makeSegment(1, 4096, kRing);
  occupy(*s, 1);
  const ClientTicketing a = client(1, 1), b = client(2);
  queueFor(*s, b);
  queueFor(*s, b);
  const Issued breaker = s->tickets().issue(kWorker, 2, kNow, &a);
  CHECK(breaker.outcome == IssueOutcome::Breaker);
  CHECK(live(*s, a) == 0);
  CHECK(live(*s, b) == 2);
  CHECK(s->tickets().issue(kWorker, 3, kNow, &a).outcome == IssueOutcome::Queued);  // under a higher max_queue
  CHECK(live(*s, a) == 1);

  auto full = makeSegment(1, 4096, kRing);
  occupy(*full, 1);
  for (uint32_t i = 0; i < kRing; ++i) REQUIRE(full->tickets().issue(kWorker, 0, kNow).outcome == IssueOutcome::Queued);
  CHECK(full->tickets().issue(kWorker, 0, kNow, &a).outcome == IssueOutcome::RingFull);
  CHECK(live(*full, a) == 0);
  CHECK(full->stats().snapshot().ring_full_total == 1);
}

TEST_CASE("strikes add up within a 10-minute window; a strike after it starts a new one") {
  auto s = makeSegment();
  const ClientTicketing a = client(1);
  const AbusePolicy p = policy(10);
  StrikeOutcome o = s->strike(a.key, 5, p, kNow, kWorker);
  CHECK(o.recorded);
  CHECK_FALSE(o.banned_now);
  CHECK(o.strikes == 5);
  o = s->strike(a.key, 1, p, kNow + 5 * kMinute, kWorker);
  CHECK(o.strikes == 6);
  o = s->strike(a.key, 1, p, kNow + 10 * kMinute - 1000, kWorker);  // the window's last second
  CHECK(o.strikes == 7);
  o = s->strike(a.key, 1, p, kNow + 10 * kMinute, kWorker);  // the window ended: a new one
  CHECK(o.strikes == 1);
  o = s->strike(a.key, 5, p, kNow + 12 * kMinute, kWorker);
  CHECK(o.strikes == 6);
  o = s->strike(a.key, 1, p, kNow + 25 * kMinute, kWorker);
  CHECK(o.strikes == 1);
  CHECK_FALSE(s->clients().banned(a.key, kNow + 25 * kMinute));
  CHECK(s->stats().snapshot().abuse_strikes_total == 5 + 1 + 1 + 1 + 5 + 1);
  CHECK(s->stats().snapshot().abuse_bans_total == 0);
  // Strikes are per client.
  CHECK(s->strike(client(2).key, 1, p, kNow + 25 * kMinute, kWorker).strikes == 1);
}

TEST_CASE("threshold strikes ban the client for the ban time; it lifts by itself") {
  auto s = makeSegment();
  const ClientTicketing a = client(1), b = client(2);
  const AbusePolicy p = policy(10);
  CHECK_FALSE(s->clients().banned(a.key, kNow));
  s->strike(a.key, 5, p, kNow, kWorker);
  s->strike(b.key, 5, p, kNow, kWorker);
  const StrikeOutcome o = s->strike(a.key, 5, p, kNow + 1000, kWorker);
  CHECK(o.recorded);
  CHECK(o.banned_now);
  CHECK(o.ban_for == 10 * kMinute);
  CHECK(o.strikes == 0);
  CHECK(s->clients().banned(a.key, kNow + 1000));
  CHECK(s->clients().banned(a.key, kNow + 1000 + 10 * kMinute - 1000));
  CHECK_FALSE(s->clients().banned(a.key, kNow + 1000 + 10 * kMinute));  // lifted
  CHECK_FALSE(s->clients().banned(b.key, kNow + 1000));
  CHECK_FALSE(s->clients().banned(client(3).key, kNow + 1000));
  CHECK(s->clients().bannedCount(kNow + 1000) == 1);
  CHECK(s->clients().bannedCount(kNow + 1000 + 10 * kMinute) == 0);
  CHECK(s->stats().snapshot(kNow + 1000).banned_clients == 1);
  CHECK(s->stats().snapshot(kNow + 1000 + 10 * kMinute).banned_clients == 0);
  CHECK(s->stats().snapshot().abuse_bans_total == 1);
  CHECK(s->stats().snapshot().abuse_strikes_total == 15);
  // Reads never make entries.
  CHECK(s->clients().tracked() == 2);
  // A weight of more than the threshold bans at once.
  CHECK(s->strike(client(4).key, 5, policy(5), kNow, kWorker).banned_now);
  // Threshold 0: strikes are kept but never ban.
  CHECK_FALSE(s->strike(client(5).key, 5, policy(0), kNow, kWorker).banned_now);
}

TEST_CASE("strikes while banned are counted but do not extend the ban; after it the count starts again") {
  auto s = makeSegment();
  const ClientTicketing a = client(1);
  const AbusePolicy p = policy(2);
  REQUIRE(s->strike(a.key, 1, p, kNow, kWorker).strikes == 1);
  REQUIRE(s->strike(a.key, 1, p, kNow, kWorker).banned_now);  // until kNow + 10 min
  for (int i = 1; i <= 9; ++i) {
    const StrikeOutcome o = s->strike(a.key, 5, p, kNow + i * kMinute, kWorker);
    CHECK(o.recorded);
    CHECK_FALSE(o.banned_now);
  }
  CHECK(s->stats().snapshot().abuse_strikes_total == 2 + 45);
  CHECK(s->stats().snapshot().abuse_bans_total == 1);
  CHECK(s->clients().banned(a.key, kNow + 10 * kMinute - 1000));
  CHECK_FALSE(s->clients().banned(a.key, kNow + 10 * kMinute));
  // Over: one strike is one strike again.
  CHECK(s->strike(a.key, 1, p, kNow + 11 * kMinute, kWorker).strikes == 1);
  CHECK_FALSE(s->clients().banned(a.key, kNow + 11 * kMinute));
}

TEST_CASE("repeat bans double, up to 24 hours") {
  auto s = makeSegment();
  const ClientTicketing a = client(1);
  const AbusePolicy p = policy(1);  // every strike bans, once the last ban is over
  const Millis expected[] = {600, 1200, 2400, 4800, 9600, 19200, 38400, 76800, 86400, 86400, 86400};
  Millis now = kNow;
  for (Millis seconds : expected) {
    CAPTURE(seconds);
    const StrikeOutcome o = s->strike(a.key, 1, p, now, kWorker);
    REQUIRE(o.banned_now);
    CHECK(o.ban_for == seconds * 1000);
    CHECK(s->clients().banned(a.key, now + seconds * 1000 - 1000));
    CHECK_FALSE(s->clients().banned(a.key, now + seconds * 1000));
    now += seconds * 1000;
  }
  CHECK(s->stats().snapshot().abuse_bans_total == std::size(expected));
  // A ban time that is not whole seconds is rounded up; another client starts at 1.
  const StrikeOutcome o = s->strike(client(2).key, 1, policy(1, 1500), kNow, kWorker);
  CHECK(o.ban_for == 2000);
}

TEST_CASE("a banned client's tickets leave the line at once; everyone behind moves up and waiters are woken") {
  auto s = makeSegment(1);
  occupy(*s, 1);
  const ClientTicketing a = client(1), x = client(2);
  const Issued x1 = queueFor(*s, x);
  const Issued a1 = queueFor(*s, a);
  const Issued x2 = queueFor(*s, x);
  const Issued a2 = queueFor(*s, a);
  const Issued x3 = queueFor(*s, x);
  CHECK(x3.position == 5);
  CHECK(live(*s, a) == 2);
  s->slots().setWaiting(kWaiter, Resource::PageSlot, true);
  CHECK_FALSE(s->slots().consumeWake(kWaiter));

  const AbusePolicy p = policy(5);
  const StrikeOutcome o = s->strike(a.key, 5, p, kNow, kWorker);
  REQUIRE(o.banned_now);
  CHECK(o.tickets_retired == 2);
  CHECK(s->slots().consumeWake(kWaiter));
  CHECK(live(*s, a) == 0);
  CHECK(live(*s, x) == 3);
  CHECK(s->tickets().queueDepth() == 3);
  CHECK(s->tickets().render(a1.cookie, kNow, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().render(a2.cookie, kNow, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().render(x1.cookie, kNow, kTtl).position == 1);
  CHECK(s->tickets().render(x2.cookie, kNow, kTtl).position == 2);
  CHECK(s->tickets().render(x3.cookie, kNow, kTtl).position == 3);
  // Strikes while banned retire nothing more, and wake nobody.
  CHECK(s->strike(a.key, 5, p, kNow + 1000, kWorker).tickets_retired == 0);
  CHECK_FALSE(s->slots().consumeWake(kWaiter));
  s->slots().setWaiting(kWaiter, Resource::PageSlot, false);
}

TEST_CASE("a banned client's missed and returned tickets leave too") {
  auto s = makeSegment(2);
  const ClientTicketing a = client(1), x = client(2);
  const Issued m1 = queueFor(*s, a);  // both ready at once: the room is empty
  const Issued m2 = queueFor(*s, a);
  SweepLimits window;
  window.claim_window = 1000;
  REQUIRE(s->tickets().sweep(kNow, window).missed == 0);
  REQUIRE(s->tickets().sweep(kNow + 1001, window).missed == 2);
  REQUIRE(s->tickets().render(m2.cookie, kNow + 2000, kTtl).state == TicketState::Ready);  // returned
  occupy(*s, 2);
  const Issued other = queueFor(*s, x);
  CHECK(live(*s, a) == 2);
  CHECK(s->tickets().queueDepth() == 3);
  REQUIRE(s->strike(a.key, 1, policy(1), kNow + 3000, kWorker).tickets_retired == 2);
  CHECK(s->tickets().render(m1.cookie, kNow + 3000, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().render(m2.cookie, kNow + 3000, kTtl).state == TicketState::Unknown);
  CHECK(s->tickets().render(other.cookie, kNow + 3000, kTtl).raw_position == 1);
  CHECK(s->tickets().queueDepth() == 1);
  CHECK(live(*s, a) == 0);
}

TEST_CASE("a full table evicts the oldest idle client; never a banned one or one with tickets") {
  constexpr uint32_t kTable = 4;  // the whole table is every key's window
  auto s = makeSegment(1, kTable);
  occupy(*s, 1);
  const AbusePolicy p = policy(5);
  // c0 and c1 idle (a strike each, seen at kNow + 1 s, + 2 s), c2 banned
  // (seen first), c3 holding a ticket (seen first).
  const ClientTicketing c0 = client(10), c1 = client(11), c2 = client(12), c3 = client(13);
  REQUIRE(s->strike(c2.key, 5, p, kNow, kWorker).banned_now);
  const Issued held = queueFor(*s, c3, kNow);
  REQUIRE(s->strike(c1.key, 1, p, kNow + 2000, kWorker).recorded);
  REQUIRE(s->strike(c0.key, 1, p, kNow + 1000, kWorker).recorded);
  CHECK(s->clients().tracked() == 4);

  // A new client takes the oldest idle entry: c0's.
  const ClientTicketing n1 = client(20), n2 = client(21), n3 = client(22);
  REQUIRE(s->strike(n1.key, 1, p, kNow + 3000, kWorker).recorded);
  CHECK(s->strike(c1.key, 1, p, kNow + 4000, kWorker).strikes == 2);  // c1 kept its entry and its strikes
  CHECK(s->strike(c0.key, 1, p, kNow + 5000, kWorker).strikes == 1);  // c0 lost its: it took n1's now
  CHECK(s->clients().banned(c2.key, kNow + 5000));
  CHECK(live(*s, c3) == 1);
  CHECK(s->stats().snapshot().client_table_full_total == 0);

  // Now c1 (seen at 4 s) is the oldest idle one; a ticket for n2 takes it.
  queueFor(*s, n2, kNow + 6000);
  CHECK(s->strike(c1.key, 1, p, kNow + 7000, kWorker).strikes == 1);  // c1's entry went; it took c0's
  CHECK(live(*s, n2) == 1);
  CHECK(live(*s, c3) == 1);
  CHECK(s->clients().banned(c2.key, kNow + 7000));
  CHECK(s->tickets().render(held.cookie, kNow + 7000, kTtl).state == TicketState::Waiting);

  // Fill it so nothing can go: every entry holds a ticket or a ban.
  auto s2 = makeSegment(1, kTable);
  occupy(*s2, 1);
  REQUIRE(s2->strike(c0.key, 5, p, kNow, kWorker).banned_now);
  REQUIRE(s2->strike(c1.key, 5, p, kNow, kWorker).banned_now);
  queueFor(*s2, c2, kNow);
  const Issued c3ticket = queueFor(*s2, c3, kNow);
  CHECK(s2->clients().tracked() == 4);
  const Issued untracked = queueFor(*s2, n1, kNow + 1000);  // a ticket all the same
  CHECK(live(*s2, n1) == 0);
  CHECK(s2->stats().snapshot().client_table_full_total == 1);
  // An untracked ticket has no per-client limit.
  const ClientTicketing n1_limited = client(20, 1);
  queueFor(*s2, n1_limited, kNow + 1000);
  queueFor(*s2, n1_limited, kNow + 1000);
  CHECK(s2->stats().snapshot().client_table_full_total == 3);
  // A strike for a client with no entry is dropped, and counted.
  const StrikeOutcome dropped = s2->strike(n2.key, 5, p, kNow + 1000, kWorker);
  CHECK_FALSE(dropped.recorded);
  CHECK_FALSE(dropped.banned_now);
  CHECK(s2->stats().snapshot().client_table_full_total == 4);
  CHECK(s2->stats().snapshot().abuse_strikes_total == 15);
  CHECK(s2->clients().tracked() == 4);
  // Untracked tickets leave without touching anyone's count.
  s2->tickets().retire(untracked.cookie.ticket, false);
  CHECK(live(*s2, c3) == 1);
  // Once c3's ticket has left, its entry is idle and the next new client gets it.
  s2->tickets().retire(c3ticket.cookie.ticket, false);
  CHECK(live(*s2, c3) == 0);
  queueFor(*s2, n3, kNow + 2000);
  CHECK(live(*s2, n3) == 1);
  CHECK(s2->stats().snapshot().client_table_full_total == 4);
  CHECK(s2->clients().banned(c0.key, kNow + 2000));
  CHECK(s2->clients().banned(c1.key, kNow + 2000));
  // Once the bans are over, their entries are idle too.
  const Millis later = kNow + 11 * kMinute;
  queueFor(*s2, n2, later);
  CHECK(live(*s2, n2) == 1);
  CHECK(s2->clients().tracked() == 4);
  CHECK_FALSE(s2->clients().banned(c0.key, later));
  CHECK(s2->stats().snapshot().client_table_full_total == 4);
  CHECK(s2->clients().writing() == 0);
}

TEST_CASE("geometry: the client table is max(4096, ring / 4), a power of two") {
  CHECK(computeGeometry(100, 10, 2, 500).client_table_size == 4096);
  CHECK(computeGeometry(0, 10, 2, 500).client_table_size == (1u << 18));        // ring 2^20
  CHECK(computeGeometry(100000, 500, 2, 500).client_table_size == (1u << 16));  // ring 2^18
  Geometry g;
  g.client_table_size = 1000;
  CHECK_THROWS(Segment::create(g, 1, 1));
  g.client_table_size = 1u << 24;
  CHECK_THROWS(Segment::create(g, 1, 1));
  g.client_table_size = 1;
  CHECK_NOTHROW(Segment::create(g, 1, 1));
}

TEST_CASE("threads striking one client at once: every strike counted, exactly one ban") {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500;
  auto s = makeSegment();
  const ClientTicketing a = client(1);
  const AbusePolicy p = policy(kThreads * kPerThread / 2);
  std::atomic<int> ready{0}, bans{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      for (int i = 0; i < kPerThread; ++i) {
        const StrikeOutcome o = s->strike(a.key, 1, p, kNow, static_cast<WorkerSlot>(t));
        if (o.banned_now) bans.fetch_add(1);
        s->clients().banned(a.key, kNow);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  CHECK(bans.load() == 1);
  CHECK(s->stats().snapshot().abuse_strikes_total == kThreads * kPerThread);
  CHECK(s->stats().snapshot().abuse_bans_total == 1);
  CHECK(s->clients().banned(a.key, kNow));
  CHECK(s->clients().tracked() == 1);
  CHECK(s->clients().writing() == 0);
  CHECK(s->stats().snapshot().client_table_full_total == 0);
}

TEST_CASE("threads issuing for one client with a limit: never more than the limit live") {
  constexpr int kThreads = 4;
  constexpr int kRounds = 1000;
  constexpr int32_t kLimit = 3;
  auto s = makeSegment(1, 64);  // a small table, with other clients coming and going
  occupy(*s, 1);
  const ClientTicketing a = client(1, kLimit);
  std::atomic<int> ready{0}, held{0}, over{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const WorkerSlot slot = static_cast<WorkerSlot>(t);
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      for (int i = 0; i < kRounds; ++i) {
        // Up to two of a's tickets at once per thread; `held` counts those
        // issued and not yet retired, a subset of a's live tickets.
        uint64_t mine[2] = {0, 0};
        for (uint64_t& ticket : mine) {
          const Issued q = s->tickets().issue(slot, 0, kNow, &a);
          if (q.outcome != IssueOutcome::Queued) continue;
          ticket = q.cookie.ticket;
          if (held.fetch_add(1) + 1 > kLimit) over.fetch_add(1);
        }
        // Other clients churn the table around a's entry.
        const ClientTicketing other = client(1000 + static_cast<uint32_t>(t * kRounds + i));
        const Issued o = s->tickets().issue(slot, 0, kNow, &other);
        if (o.outcome == IssueOutcome::Queued) s->tickets().retire(o.cookie.ticket, false);
        for (uint64_t ticket : mine) {
          if (ticket == 0) continue;
          held.fetch_sub(1);
          s->tickets().retire(ticket, false);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  CHECK(over.load() == 0);
  CHECK(live(*s, a) == 0);
  CHECK(s->tickets().queueDepth() == 0);
  CHECK(s->clients().writing() == 0);
  CHECK(s->stats().snapshot().client_table_full_total == 0);
}
