// Segment::copyInto and Segment::attach: what a restart with -state-dir does
// to the line (master/state_dir.cpp). A larger geometry (a longer
// -max-queue) gets the old segment's state copied into a new segment; every
// live ticket must then be found by its cookie with the same state and the
// same place, and the line must go on as if nothing happened. A restart
// with the same geometry maps the old file again (attach), which must
// refuse a segment of another layout and leave it untouched.
//
// What a ticket "is" is read through the public surface only, so that the
// test compares what visitors and operators would see:
//   peek()     state (Waiting / Ready / Unknown), position, raw position
//   nonceOf()  whether it holds a place (waiting, returned or missed)
//   head()     whether it waits in line
// and a returned ticket is told from a missed one by readiness with one
// slot free (seeAll).
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "shm/layout.h"
#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

constexpr Millis kNow = 1'000'000'000;          // monotonic ms, about 11.6 days after boot
constexpr int64_t kUnixNow = 1'700'000'000;     // Unix seconds (revocations, once marks)
constexpr Millis kTtl = 24 * 3600 * 1000;       // nothing expires unless a test says so
constexpr WorkerSlot kGuard = 0;                // claims (takeTurn)
constexpr WorkerSlot kInFlight = 2;             // page slots of requests already in flight
constexpr Millis kMinute = 60 * 1000;

Geometry smallGeometry(uint32_t ring = 1u << 12) {
  Geometry g;
  g.ring_size = ring;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  g.revocation_table_size = 1u << 12;
  g.client_table_size = 1u << 12;
  return g;
}

// The geometry a larger -max-queue (and more workers) asks for: every table
// at least as large as smallGeometry's.
Geometry largeGeometry(uint32_t ring = 1u << 14) {
  Geometry g;
  g.ring_size = ring;
  g.worker_slots = 8;
  g.pass_table_size = 256;
  g.revocation_table_size = 1u << 13;
  g.client_table_size = 1u << 14;
  return g;
}

std::unique_ptr<Segment> make(const Geometry& g, int32_t cap) {
  return Segment::create(g, cap, 100);
}

const Header& header(const Segment& s) {
  return *static_cast<const Header*>(s.address());
}

uint64_t nextTicket(const Segment& s) {
  return header(s).next_ticket.load();
}

void occupy(Segment& s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) REQUIRE(s.pages().tryAcquire(kInFlight));
}
void vacate(Segment& s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) s.pages().release(kInFlight);
}

// The page guard's takeTurn: a page slot, then the claim; the slot goes
// back if the claim fails.
bool takeTurn(Segment& s, const TicketCookie& cookie) {
  if (!s.pages().tryAcquire(kGuard)) return false;
  if (s.tickets().claim(cookie)) return true;
  s.pages().release(kGuard);
  return false;
}

Issued mustQueue(Segment& s, Millis now = kNow, const ClientTicketing* client = nullptr) {
  const Issued issued = s.tickets().issue(kGuard, 0, now, client);
  REQUIRE(issued.outcome == IssueOutcome::Queued);
  return issued;
}

SweepLimits claimWindow(Millis window) {
  SweepLimits l;
  l.claim_window = window;
  return l;
}

ClientTicketing client(uint32_t n, int32_t max_per_client = 0) {
  ClientTicketing c;
  c.key[10] = 0xff;
  c.key[11] = 0xff;
  c.key[12] = 10;
  c.key[13] = static_cast<uint8_t>(n >> 16);
  c.key[14] = static_cast<uint8_t>(n >> 8);
  c.key[15] = static_cast<uint8_t>(n);
  c.max_per_client = max_per_client;
  return c;
}

struct Id {
  uint8_t bytes[16];
  explicit Id(uint32_t n, uint8_t tag) {
    std::memset(bytes, 0, sizeof bytes);
    std::memcpy(bytes, &n, sizeof n);
    bytes[15] = tag;
  }
};

// ------------------------------------------------------------ what a ticket is
// Its place in line: Waiting (in line), Returned (missed its turn, came
// back: ahead of the line), Missed (holds a place, out of the line), or
// none (never issued, claimed, retired, evicted).
enum class Kind { None, Waiting, Returned, Missed };

struct Seen {
  Kind kind = Kind::None;
  TicketState state = TicketState::Unknown;  // peek()
  int64_t position = 0;
  int64_t raw_position = 0;
  bool operator==(const Seen&) const = default;
};

const char* stateName(TicketState s) {
  switch (s) {
    case TicketState::Unknown: return "unknown";
    case TicketState::Expired: return "expired";
    case TicketState::Waiting: return "waiting";
    case TicketState::Ready: return "ready";
  }
  return "?";
}

const char* kindName(Kind k) {
  switch (k) {
    case Kind::None: return "no place";
    case Kind::Waiting: return "in line";
    case Kind::Returned: return "returned";
    case Kind::Missed: return "missed";
  }
  return "?";
}

std::string describe(const Seen& s) {
  std::ostringstream out;
  out << kindName(s.kind) << ", " << stateName(s.state) << " position " << s.position << " raw " << s.raw_position;
  return out.str();
}

// Every ticket GET /_room/queue lists (head()), by number: returned or not.
std::map<uint64_t, bool> lineOf(const Segment& s) {
  std::map<uint64_t, bool> out;
  for (const LineEntry& e : s.tickets().head(size_t{1} << 30, kNow)) out[e.ticket] = e.returned;
  return out;
}

// What every cookie shows. head() lists every Waiting ticket (none is ever
// below low water); a ticket that holds a place (nonceOf) and is not listed
// waiting is Returned or Missed: Missed when no ticket is returned (live
// depth = waiting), else told apart with exactly one slot free: a returned
// ticket is then ready, a missed one (behind at least one returned ticket)
// is not. The cap is put back after.
std::vector<Seen> seeAll(Segment& s, const std::vector<TicketCookie>& cookies) {
  const std::map<uint64_t, bool> line = lineOf(s);
  std::vector<Seen> out(cookies.size());
  std::vector<size_t> out_of_line;
  for (size_t i = 0; i < cookies.size(); ++i) {
    const TicketCookie& c = cookies[i];
    const TicketView v = s.tickets().peek(c);
    Seen& seen = out[i];
    seen.state = v.state;
    seen.position = v.position;
    seen.raw_position = v.raw_position;
    if (s.tickets().nonceOf(c.ticket) != c.nonce) continue;
    auto it = line.find(c.ticket);
    if (it != line.end() && !it->second) {
      seen.kind = Kind::Waiting;
    } else {
      out_of_line.push_back(i);
    }
  }
  int64_t listed_waiting = 0;
  for (const auto& [ticket, returned] : line) listed_waiting += returned ? 0 : 1;
  const int64_t returned_total = s.tickets().liveQueueDepth() - listed_waiting;
  REQUIRE(returned_total >= 0);
  if (returned_total == 0) {
    for (size_t i : out_of_line) out[i].kind = Kind::Missed;
    return out;
  }
  const int32_t cap = s.pages().cap();
  s.pages().setCap(static_cast<int32_t>(s.pages().occupancy()) + 1);
  REQUIRE(s.pages().cap() == s.pages().occupancy() + 1);
  for (size_t i : out_of_line)
    out[i].kind = s.tickets().peek(cookies[i]).state == TicketState::Ready ? Kind::Returned : Kind::Missed;
  s.pages().setCap(cap);
  REQUIRE(s.pages().cap() == cap);
  return out;
}

// Every counter of the segment, by name.
std::vector<std::pair<std::string, uint64_t>> counters(const Segment& s) {
  const StatsSnapshot snap = s.stats().snapshot(kNow);
  std::vector<std::pair<std::string, uint64_t>> out;
#define CONCERT_TEST_COUNTER(name, key) out.emplace_back(#key, snap.key);
  CONCERT_COUNTERS(CONCERT_TEST_COUNTER)
#undef CONCERT_TEST_COUNTER
  return out;
}

// Every cookie's view in `before` and `after` is the same; the first
// differences are reported with the ticket number.
int compareViews(const std::vector<TicketCookie>& cookies, const std::vector<Seen>& before,
                 const std::vector<Seen>& after, const char* what) {
  int differ = 0;
  for (size_t i = 0; i < cookies.size(); ++i) {
    if (before[i] == after[i]) continue;
    if (++differ <= 10)
      MESSAGE(std::string(what) << ": ticket " << cookies[i].ticket << " was " << describe(before[i]) << ", is "
                   << describe(after[i]));
  }
  return differ;
}

std::unique_ptr<Segment> grownCopy(const Segment& from, const Geometry& g) {
  auto to = Segment::create(g, 1, 100);
  std::string why;
  const bool copied = from.copyInto(*to, &why);
  INFO("copyInto refused: " << why);
  REQUIRE(copied);
  // Each slot's holds come along as they are (segment.h): the same page
  // slots are taken, so readiness is judged against the same free slots.
  REQUIRE(to->pages().occupancy() == from.pages().occupancy());
  REQUIRE(to->assets().occupancy() == from.assets().occupancy());
  return to;
}

}  // namespace

// ============================================================================ (a)
TEST_CASE("copyInto a larger geometry: every ticket keeps its state and place; clients, bans, passes, "
          "revocations, marks and counters come along; the line goes on behind everyone") {
  auto old = make(smallGeometry(), 2);
  occupy(*old, 2);  // a full room: everyone waits
  const Millis t0 = kNow;

  // 300 arrivals: a third for client A, some for B (to be banned), the rest untracked.
  const ClientTicketing a = client(1), b = client(2), c = client(3);
  std::vector<TicketCookie> cookies;
  std::vector<Issued> issued;
  for (int i = 0; i < 300; ++i) {
    const ClientTicketing* who = i % 3 == 0 ? &a : i % 37 == 5 ? &b : i % 11 == 7 ? &c : nullptr;
    issued.push_back(mustQueue(*old, t0, who));
    cookies.push_back(issued.back().cookie);
    CHECK(issued.back().position == i + 1);
  }
  // Every 7th (from the 20th) walks away: Finished.
  for (int i = 20; i < 300; i += 7) old->tickets().retire(cookies[i].ticket, false);

  // The first two (cookies[0] and [1], tickets 1 and 2) miss their turn:
  // two slots free, stamped ready, the claim window passes.
  vacate(*old, 2);
  REQUIRE(old->tickets().sweep(t0 + 1000, claimWindow(5000)).missed == 0);
  REQUIRE(old->tickets().sweep(t0 + 7000, claimWindow(5000)).missed == 2);
  // cookies[1]'s holder comes back for the page: Returned (ahead of the line).
  REQUIRE(old->tickets().render(cookies[1], t0 + 7000, kTtl, Contact::Page).state == TicketState::Ready);
  // cookies[2] is now first in line, and takes its turn: claimed.
  REQUIRE(takeTurn(*old, cookies[2]));
  // The room is full again (the claimer's slot and one more in flight).
  occupy(*old, 1);
  // Client B is banned: its tickets leave the line.
  const int64_t b_before = old->clients().liveTickets(b.key);
  REQUIRE(b_before > 0);
  AbusePolicy ban;
  ban.threshold = 1;
  ban.ban = 10 * kMinute;
  const StrikeOutcome banned = old->strike(b.key, 1, ban, t0 + 7000, kGuard);
  REQUIRE(banned.banned_now);
  REQUIRE(banned.tickets_retired == b_before);
  // Client C has two strikes (no ban: the threshold is 10).
  AbusePolicy lenient;
  lenient.threshold = 10;
  REQUIRE(old->strike(c.key, 2, lenient, t0 + 7000, kGuard).strikes == 2);
  // Passes (one still holding a request: the copy takes holds along),
  // revocations, once marks, a histogram, the mode, an asset slot.
  for (uint32_t n = 0; n < 5; ++n) {
    PassHold hold;
    REQUIRE(old->passes().tryAcquire(Id(n, 0x5a).bytes, PassProto::H1, 4, kGuard, t0, &hold) ==
            PassAcquire::Acquired);
    if (n != 4) old->passes().release(hold, kGuard, t0);
  }
  REQUIRE(old->assets().tryAcquire(kInFlight));
  REQUIRE(old->passes().users() == 5);
  for (uint32_t n = 0; n < 3; ++n)
    REQUIRE(old->revocations().revoke(Id(n, 0xee).bytes, kUnixNow + 600, kUnixNow, kGuard) == RevokeOutcome::Added);
  REQUIRE(old->once().claim(0x1234567, kUnixNow + 600, kUnixNow));
  old->histograms().observe(Histogram::QueueWait, 3, 1'500'000);
  old->modes().set(RoomMode::Pause);

  // What the old segment says, for every cookie ever issued.
  const std::vector<Seen> before = seeAll(*old, cookies);
  const auto counted = counters(*old);
  // The states this case set up, as the views show them.
  CHECK(before[0].kind == Kind::Missed);
  CHECK(before[1].kind == Kind::Returned);
  CHECK(before[2].kind == Kind::None);   // claimed
  CHECK(before[27].kind == Kind::None);  // retired (20 + 7)
  CHECK(before[5].kind == Kind::None);   // client B's: left with the ban
  CHECK(before[3].kind == Kind::Waiting);
  CHECK(before[3].position == 1);

  auto grown = grownCopy(*old, largeGeometry());
  CHECK(grown->geometry().ring_size == (1u << 14));
  CHECK(grown->geometry().client_table_size == (1u << 14));
  CHECK(grown->bytes() > old->bytes());
  // The new segment's header is this binary's, with the new geometry.
  CHECK_NOTHROW(grown->checkHeader());

  const std::vector<Seen> after = seeAll(*grown, cookies);
  CHECK(compareViews(cookies, before, after, "after the copy") == 0);
  CHECK(lineOf(*grown) == lineOf(*old));
  CHECK(grown->tickets().liveQueueDepth() == old->tickets().liveQueueDepth());
  CHECK(grown->tickets().queueDepth() == old->tickets().queueDepth());
  CHECK(counters(*grown) == counted);
  CHECK(nextTicket(*grown) == nextTicket(*old));
  CHECK(grown->pages().cap() == old->pages().cap());
  CHECK(grown->modes().mode() == RoomMode::Pause);

  // Clients: counts, the ban, strikes.
  CHECK(grown->clients().liveTickets(a.key) == old->clients().liveTickets(a.key));
  CHECK(grown->clients().liveTickets(a.key) > 0);
  CHECK(grown->clients().liveTickets(c.key) == old->clients().liveTickets(c.key));
  CHECK(grown->clients().banned(b.key, t0 + 8000));
  CHECK_FALSE(grown->clients().banned(b.key, t0 + 7000 + 10 * kMinute));
  CHECK(grown->clients().bannedCount(t0 + 8000) == 1);
  CHECK_FALSE(grown->clients().banned(a.key, t0 + 8000));
  CHECK(grown->strike(c.key, 1, lenient, t0 + 9000, kGuard).strikes == 3);  // the window and its count came along
  // A second ban after the first is over lasts twice as long: the ban count came along.
  const StrikeOutcome again = grown->strike(b.key, 1, ban, t0 + 7000 + 11 * kMinute, kGuard);
  CHECK(again.banned_now);
  CHECK(again.ban_for == 20 * kMinute);
  // Passes are found (no new entry is made for them), revocations and marks hold.
  CHECK(grown->passes().users() == 5);
  for (uint32_t n = 0; n < 5; ++n) {
    PassHold hold;
    REQUIRE(grown->passes().tryAcquire(Id(n, 0x5a).bytes, PassProto::H1, 4, kGuard, t0, &hold) ==
            PassAcquire::Acquired);
    grown->passes().release(hold, kGuard, t0);
  }
  CHECK(grown->passes().users() == 5);
  {
    // Pass 4's request in flight came along: at a cap of 1 it is full.
    PassHold hold;
    CHECK(grown->passes().tryAcquire(Id(4, 0x5a).bytes, PassProto::H1, 1, kGuard, t0, &hold) == PassAcquire::AtCap);
    CHECK(grown->passes().tryAcquire(Id(3, 0x5a).bytes, PassProto::H1, 1, kGuard, t0, &hold) ==
          PassAcquire::Acquired);
    grown->passes().release(hold, kGuard, t0);
  }
  CHECK(grown->assets().occupancy() == 1);
  for (uint32_t n = 0; n < 3; ++n) CHECK(grown->revocations().revoked(Id(n, 0xee).bytes, kUnixNow + 599));
  CHECK_FALSE(grown->revocations().revoked(Id(7, 0xee).bytes, kUnixNow));
  CHECK(grown->revocations().active(kUnixNow) == 3);
  CHECK(grown->once().marked(0x1234567, kUnixNow));
  CHECK(grown->histograms().merged(Histogram::QueueWait).count() ==
        old->histograms().merged(Histogram::QueueWait).count());

  // The line goes on: the next number continues, behind everyone waiting.
  int64_t waiting = 0;
  int64_t last_raw = 0;
  for (const Seen& s : after) {
    if (s.kind == Kind::Waiting) ++waiting;
    if (s.kind != Kind::None) last_raw = std::max(last_raw, s.raw_position);
  }
  const uint64_t next = nextTicket(*grown);
  const Issued fresh = mustQueue(*grown, t0 + 9000);
  CHECK(fresh.cookie.ticket == next);
  CHECK(fresh.position == waiting + 1);
  CHECK(fresh.position > last_raw);
  CHECK_FALSE(fresh.ready);
  const Issued fresh2 = mustQueue(*grown, t0 + 9000);
  CHECK(fresh2.cookie.ticket == next + 1);
  CHECK(fresh2.position == waiting + 2);
  // Nobody's place moved for them.
  CHECK(compareViews(cookies, before, seeAll(*grown, cookies), "after two arrivals") == 0);

  // Client A's tickets still count against it in the new table: at its
  // limit it gets no ticket; one of its tickets leaving makes room.
  const int64_t a_live = grown->clients().liveTickets(a.key);
  const ClientTicketing a_limited = client(1, static_cast<int32_t>(a_live));
  CHECK(grown->tickets().issue(kGuard, 0, t0 + 9000, &a_limited).outcome == IssueOutcome::ClientLimit);
  grown->tickets().retire(cookies[3].ticket, false);  // one of A's (3 % 3 == 0)
  CHECK(grown->clients().liveTickets(a.key) == a_live - 1);
  CHECK(grown->tickets().issue(kGuard, 0, t0 + 9000, &a_limited).outcome == IssueOutcome::Queued);

  // The head of the line is admitted in the same order as before the copy:
  // the returned ticket first, then the line in ticket order (a missed
  // ticket is not in line: it would have to come back for the page first).
  std::vector<uint64_t> expected;
  for (size_t i = 0; i < cookies.size(); ++i)
    if (after[i].kind == Kind::Returned) expected.push_back(cookies[i].ticket);
  for (size_t i = 0; i < cookies.size() && expected.size() < 6; ++i)
    if (after[i].kind == Kind::Waiting && i != 3) expected.push_back(cookies[i].ticket);
  REQUIRE(expected.size() == 6);
  grown->pages().release(kGuard);  // the request admitted with cookies[2] ends
  vacate(*grown, 1);               // and the one in flight
  REQUIRE(grown->pages().occupancy() == 0);
  grown->pages().setCap(1);
  std::vector<TicketCookie> everyone = cookies;
  everyone.push_back(fresh.cookie);
  std::vector<uint64_t> order;
  for (size_t round = 0; round < expected.size(); ++round) {
    const std::vector<Seen> now_seen = seeAll(*grown, everyone);
    std::vector<TicketCookie> ready;  // in line (a missed ticket must come back first) and ready
    for (size_t i = 0; i < everyone.size(); ++i)
      if ((now_seen[i].kind == Kind::Waiting || now_seen[i].kind == Kind::Returned) &&
          now_seen[i].state == TicketState::Ready)
        ready.push_back(everyone[i]);
    REQUIRE(ready.size() == 1);
    REQUIRE(takeTurn(*grown, ready[0]));
    order.push_back(ready[0].ticket);
    grown->pages().release(kGuard);
  }
  CHECK(order == expected);
  CHECK(grown->stats().snapshot(kNow).fifo_inversions_total == 0);
}

// ============================================================================ (b)
TEST_CASE("tickets carried past a ring lap keep their state and place through a copy") {
  // The head waits while a ring's worth of numbers passes behind it: ticket
  // 1 waits, 2..100 leave, 101 waits, 102..4096 leave. Issuing 4097 finds
  // ticket 1 a whole ring behind: it is carried (Returned, same number,
  // same entry), and 4097 (ticket 1's entry again) is skipped. Everyone
  // issued after that has the skipped number ahead of it, and that number
  // must count for nobody, in the old ring and in the new one.
  const uint32_t ring = 1u << 12;
  auto old = make(smallGeometry(ring), 1);
  occupy(*old, 1);
  std::vector<TicketCookie> kept;
  kept.push_back(mustQueue(*old).cookie);  // 1
  for (int i = 2; i <= 100; ++i) old->tickets().retire(mustQueue(*old).cookie.ticket, false);
  kept.push_back(mustQueue(*old).cookie);  // 101
  for (uint32_t i = 102; i <= ring; ++i) old->tickets().retire(mustQueue(*old).cookie.ticket, false);
  REQUIRE(kept[0].ticket == 1);
  REQUIRE(kept[1].ticket == 101);
  REQUIRE(nextTicket(*old) == ring + 1);
  const Issued after_lap = mustQueue(*old);
  CHECK(after_lap.cookie.ticket == ring + 2);  // ring + 1 was skipped: ticket 1 keeps its entry
  CHECK(after_lap.position == 2);              // only 101 waits ahead of it (1 is returned)
  kept.push_back(after_lap.cookie);
  for (int i = 0; i < 20; ++i) kept.push_back(mustQueue(*old).cookie);
  // Ticket 1 was carried: it holds its place, returned, ahead of the line.
  const std::vector<Seen> before = seeAll(*old, kept);
  CHECK(before[0].kind == Kind::Returned);
  CHECK(old->tickets().liveQueueDepth() == static_cast<int64_t>(kept.size()));
  CHECK(old->tickets().queueDepth() == static_cast<int64_t>(kept.size()));
  for (size_t i = 1; i < kept.size(); ++i) {
    CAPTURE(kept[i].ticket);
    CHECK(before[i].position == static_cast<int64_t>(i));  // 101 first, then the rest in order
  }

  auto grown = grownCopy(*old, largeGeometry(ring * 4));
  const std::vector<Seen> after = seeAll(*grown, kept);
  CHECK(compareViews(kept, before, after, "carried, after the copy") == 0);
  CHECK(grown->tickets().liveQueueDepth() == old->tickets().liveQueueDepth());
  CHECK(grown->tickets().queueDepth() == old->tickets().queueDepth());
  // The line goes on behind everyone: kept.size() - 1 wait (1 is returned).
  const Issued fresh = mustQueue(*grown);
  CHECK(fresh.cookie.ticket == nextTicket(*old));
  CHECK(fresh.position == static_cast<int64_t>(kept.size()));
  // The carried ticket goes first when a slot frees, then 101.
  vacate(*grown, 1);
  CHECK(grown->tickets().peek(kept[0]).state == TicketState::Ready);
  CHECK(takeTurn(*grown, kept[0]));
  grown->pages().release(kGuard);
  CHECK(takeTurn(*grown, kept[1]));
  CHECK(grown->tickets().peek(kept[2]).position == 1);
}

// ============================================================================ (c)
TEST_CASE("copyInto a smaller segment is refused with a reason") {
  auto big = make(largeGeometry(), 2);
  occupy(*big, 2);
  for (int i = 0; i < 10; ++i) mustQueue(*big);
  std::string why;
  auto smaller_ring = Segment::create(smallGeometry(), 2, 100);
  CHECK_FALSE(big->copyInto(*smaller_ring, &why));
  CHECK(why.find("smaller") != std::string::npos);
  // One smaller table is enough to refuse (here the client table).
  Geometry g = largeGeometry();
  g.client_table_size = 1u << 12;
  auto smaller_clients = Segment::create(g, 2, 100);
  why.clear();
  CHECK_FALSE(big->copyInto(*smaller_clients, &why));
  CHECK_FALSE(why.empty());
  // The source is untouched by a refusal.
  CHECK(big->tickets().liveQueueDepth() == 10);
  // The same geometry is not smaller: copied.
  auto same = Segment::create(largeGeometry(), 2, 100);
  why.clear();
  CHECK(big->copyInto(*same, &why));
  CHECK(same->tickets().liveQueueDepth() == 10);
}

// ============================================================================ (d)
namespace {

std::string fileBytes(int fd) {
  std::string out;
  char buf[1 << 16];
  off_t at = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    REQUIRE(n >= 0);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    at += n;
  }
  return out;
}

std::string attachRefusal(int fd) {
  try {
    Segment::attach(fd);  // owns fd, also when it throws
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("attach maps the same line; a segment of another layout version is refused and left as it is") {
  auto s = make(smallGeometry(), 1);
  occupy(*s, 1);
  std::vector<TicketCookie> cookies;
  for (int i = 0; i < 50; ++i) cookies.push_back(mustQueue(*s).cookie);
  for (int i = 0; i < 50; i += 5) s->tickets().retire(cookies[i].ticket, false);
  const std::vector<Seen> before = seeAll(*s, cookies);

  {
    auto again = Segment::attach(::dup(s->fd()));
    CHECK(again->geometry().ring_size == s->geometry().ring_size);
    CHECK(again->bytes() == s->bytes());
    CHECK(compareViews(cookies, before, seeAll(*again, cookies), "attached") == 0);
    CHECK(nextTicket(*again) == nextTicket(*s));
    // One mapping of one file: a ticket issued through one is seen by the other.
    const Issued more = mustQueue(*again);
    CHECK(s->tickets().peek(more.cookie).position == more.position);
  }

  // Another layout version, written into the file as an older binary would have.
  const int fd = s->fd();
  uint32_t version = 0;
  REQUIRE(::pread(fd, &version, sizeof version, 8) == static_cast<ssize_t>(sizeof version));
  REQUIRE(version == kLayoutVersion);
  const uint32_t other = kLayoutVersion + 3;
  REQUIRE(::pwrite(fd, &other, sizeof other, 8) == static_cast<ssize_t>(sizeof other));
  const std::string bytes = fileBytes(fd);
  const std::string why = attachRefusal(::dup(fd));
  CHECK(contains(why, "layout version " + std::to_string(other)));
  CHECK(contains(why, "expects " + std::to_string(kLayoutVersion)));
  CHECK(fileBytes(fd) == bytes);

  // A garbage magic: not a Concert segment; untouched.
  uint64_t magic = 0;
  REQUIRE(::pread(fd, &magic, sizeof magic, 0) == static_cast<ssize_t>(sizeof magic));
  const uint64_t garbage = 0x0706050403020100ull;
  REQUIRE(::pwrite(fd, &garbage, sizeof garbage, 0) == static_cast<ssize_t>(sizeof garbage));
  const std::string garbled = fileBytes(fd);
  CHECK(contains(attachRefusal(::dup(fd)), "not a Concert segment"));
  CHECK(fileBytes(fd) == garbled);

  // Both restored: attached again, the line as it was.
  REQUIRE(::pwrite(fd, &magic, sizeof magic, 0) == static_cast<ssize_t>(sizeof magic));
  REQUIRE(::pwrite(fd, &version, sizeof version, 8) == static_cast<ssize_t>(sizeof version));
  auto restored = Segment::attach(::dup(fd));
  CHECK(compareViews(cookies, before, seeAll(*restored, cookies), "restored") == 0);

  // A file too short for a header, and an empty one: refused, untouched.
  const int small = memfd_create("concert-test-short", MFD_CLOEXEC);
  REQUIRE(small >= 0);
  const std::string stub = "!CONCERT but far too short";
  REQUIRE(::pwrite(small, stub.data(), stub.size(), 0) == static_cast<ssize_t>(stub.size()));
  CHECK(contains(attachRefusal(::dup(small)), "too small for its header"));
  CHECK(fileBytes(small) == stub);
  REQUIRE(::ftruncate(small, 0) == 0);
  CHECK(contains(attachRefusal(::dup(small)), "too small"));
  CHECK(fileBytes(small).empty());
  ::close(small);
}

// ============================================================================ randomized
namespace {

// One random run on a small ring; returns the number of views that differ
// after the copy into a ring four times larger.
struct RandomRun {
  uint64_t seed;
  int steps;
  // Near the end (so that the janitor's TTL has not taken everyone since), a
  // ring and a half of arrivals who leave at once: whoever waits is carried.
  bool lap = false;
  int64_t carried_or_skipped = 0;  // numbers skipped because a returned ticket kept its entry
  int differ = 0;
};

void randomRun(RandomRun& run) {
  std::mt19937_64 rng(run.seed);
  auto pick = [&](uint64_t n) { return static_cast<uint64_t>(rng() % n); };
  const uint32_t ring = 1u << 12;
  const int32_t cap = 1 + static_cast<int32_t>(pick(4));
  auto old = make(smallGeometry(ring), cap);
  int64_t in_flight = cap;  // requests at the origin (kInFlight), besides claimed ones (kGuard)
  occupy(*old, in_flight);
  int64_t claimed_slots = 0;
  Millis now = kNow;
  std::vector<TicketCookie> cookies;
  std::vector<ClientTicketing> clients;
  for (uint32_t n = 0; n < 8; ++n) clients.push_back(client(100 + n));
  SweepLimits limits;
  limits.ttl = 120'000;
  limits.claim_window = 2'000;
  // Live cookies are found by peeking a recent window (cheap enough).
  auto liveOnes = [&](size_t window) {
    std::vector<TicketCookie> out;
    const size_t from = cookies.size() > window ? cookies.size() - window : 0;
    for (size_t i = from; i < cookies.size(); ++i)
      if (old->tickets().nonceOf(cookies[i].ticket) == cookies[i].nonce) out.push_back(cookies[i]);
    return out;
  };
  for (int step = 0; step < run.steps; ++step) {
    if (run.lap && step == run.steps - run.steps / 20) {
      // The line stands while a ring and a half of numbers passes: every
      // waiting ticket ends up a whole ring behind the back and is carried;
      // one in 400 of the passers-by stays.
      for (uint32_t k = 0; k < ring + ring / 2; ++k) {
        const uint64_t expect = nextTicket(*old);
        const Issued got = old->tickets().issue(kGuard, 0, now, pick(2) ? &clients[pick(clients.size())] : nullptr);
        if (got.outcome != IssueOutcome::Queued) continue;
        if (got.cookie.ticket != expect) run.carried_or_skipped += static_cast<int64_t>(got.cookie.ticket - expect);
        cookies.push_back(got.cookie);
        if (pick(400) != 0) old->tickets().retire(got.cookie.ticket, false);
      }
    }
    now += static_cast<Millis>(pick(60));
    const uint64_t op = pick(100);
    if (op < 50) {  // an arrival, for a client or not
      const ClientTicketing* who = pick(3) == 0 ? nullptr : &clients[pick(clients.size())];
      const uint64_t expect = nextTicket(*old);
      const Issued got = old->tickets().issue(kGuard, 0, now, who);
      if (got.outcome == IssueOutcome::Queued) {
        cookies.push_back(got.cookie);
        if (got.cookie.ticket != expect) run.carried_or_skipped += static_cast<int64_t>(got.cookie.ticket - expect);
      }
    } else if (op < 62) {  // someone walks away
      const auto live = liveOnes(600);
      if (!live.empty()) old->tickets().retire(live[pick(live.size())].ticket, pick(2) == 0);
    } else if (op < 72) {  // a request at the origin ends; whoever is ready takes the slot, or not
      if (claimed_slots > 0 && pick(2) == 0) {
        old->pages().release(kGuard);
        --claimed_slots;
      } else if (in_flight > 0) {
        vacate(*old, 1);
        --in_flight;
      }
      if (pick(3) != 0) {
        const auto live = liveOnes(600);
        for (const TicketCookie& k : live) {
          if (old->tickets().peek(k).state != TicketState::Ready) continue;
          if (takeTurn(*old, k)) ++claimed_slots;
          break;
        }
      }
    } else if (op < 78) {  // the room fills again
      if (old->pages().tryAcquire(kInFlight)) ++in_flight;
    } else if (op < 88) {  // the janitor
      old->tickets().sweep(now, limits);
    } else if (op < 96) {  // a missed ticket's holder comes back for the page, or polls
      const auto live = liveOnes(300);
      if (!live.empty()) {
        const TicketCookie& k = live[pick(live.size())];
        if (pick(2) == 0)
          old->tickets().render(k, now, limits.ttl, Contact::Page);
        else
          old->tickets().poll(k, now, limits.ttl);
      }
    } else {  // a long quiet spell: the janitor again, later
      now += static_cast<Millis>(pick(5000));
      old->tickets().sweep(now, limits);
    }
  }
  // What every cookie ever issued shows, then the copy into a 4x ring.
  const std::vector<Seen> before = seeAll(*old, cookies);
  std::vector<int64_t> live_by_client;
  for (const ClientTicketing& c : clients) live_by_client.push_back(old->clients().liveTickets(c.key));
  auto grown = grownCopy(*old, largeGeometry(ring * 4));
  const std::vector<Seen> after = seeAll(*grown, cookies);
  run.differ = compareViews(cookies, before, after, "random run");
  CHECK(grown->tickets().liveQueueDepth() == old->tickets().liveQueueDepth());
  CHECK(grown->tickets().queueDepth() == old->tickets().queueDepth());
  CHECK(lineOf(*grown) == lineOf(*old));
  for (size_t i = 0; i < clients.size(); ++i) CHECK(grown->clients().liveTickets(clients[i].key) == live_by_client[i]);
  CHECK(counters(*grown) == counters(*old));
  // A newcomer goes behind everyone, with the next number.
  int64_t waiting = 0;
  for (const Seen& s : after)
    if (s.kind == Kind::Waiting) ++waiting;
  const uint64_t next = nextTicket(*old);
  const Issued fresh = mustQueue(*grown, now);
  CHECK(fresh.cookie.ticket >= next);
  CHECK(fresh.position == waiting + 1);
}

}  // namespace

TEST_CASE("randomized: issue, claim, retire, sweep and return on a small ring, then a copy into a 4x ring") {
  // CONCERT_TEST_SEED=<n> replays one run. An odd seed's run has a lap
  // (RandomRun::lap): tickets carried past the ring; an even one's has none.
  uint64_t base = std::random_device{}();
  base = (base << 32 | std::random_device{}()) & ~uint64_t{1};
  int runs = 12;
  if (const char* fixed = std::getenv("CONCERT_TEST_SEED")) {
    base = std::strtoull(fixed, nullptr, 0);
    runs = 1;
  }
  int64_t skipped = 0;
  for (int i = 0; i < runs; ++i) {
    RandomRun run{base + static_cast<uint64_t>(i), 12000};
    run.lap = run.seed % 2 == 1;
    INFO("seed " << run.seed << " (replay: CONCERT_TEST_SEED=" << run.seed << ")");
    randomRun(run);
    skipped += run.carried_or_skipped;
    CHECK_MESSAGE(run.differ == 0, "seed " << run.seed << std::string(run.lap ? " (with a lap)" : "") << ": " << run.differ
                                            << " tickets differ after the copy (" << run.carried_or_skipped
                                            << " numbers skipped for carried tickets)");
  }
  MESSAGE("randomized copies: " << runs << " runs from seed " << base << ", " << skipped
                                << " numbers skipped for carried tickets");
}
