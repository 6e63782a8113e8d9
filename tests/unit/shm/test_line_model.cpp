// The line's rules as one table, a small reference model of that table, and a
// randomized differential test: the real ticket ring (a segment in memory)
// and the model get the same random events on a simulated clock, and after
// every step they must agree on who holds a place, who is ready, every
// position, every admission and every counter the janitor moves.
//
// The table (one host; tickets.h has the mechanism):
//
//   state     event                                              next
//   Waiting   its turn taken (page request, a slot for it)       gone: admitted from the line
//             ready and not taken within the claim window        Missed
//   Missed    a page request (Contact::Page)                     Returned
//             a poll or a stream (Contact::Look)                 Missed: kept alive, no turn back
//   Returned  its turn taken                                     gone: admitted ahead of the line
//             ready and not taken within the claim window        gone: its turn came back once
//   any       unseen for the TTL (the janitor, or any contact)   gone: expired
//   Waiting   never seen after its issue for -first-poll-grace   gone: ghost
//   any       its holder leaves, an operator removes it          gone
//
//   contact   Page and Look mark the ticket seen; Own (the request it was
//             issued to, while held) does not. Every contact refreshes last
//             seen; a contact past the TTL expires the ticket instead.
//   flow      open: by the cap; pause, reject: still; passthrough: everyone.
//   free      still: 0; everyone: unbounded; by the cap: f = cap - occupancy,
//             less what ranked requests waiting go first for, but never less
//             than what the line is owed: max(f - ranked, min(f, owed)) (f
//             when no ranked request waits), at most the rate's tokens.
//   owed      min(live visitors, whole slots of credit); a ranked request
//             that takes a slot while the line waits adds share / (1 - share)
//             (share 1: the most credit), a turn taken from the line spends
//             one; the credit stays within [0, 4 slots].
//   ranked    a request of rank r takes a slot iff cap - occupancy - owed
//             (0 unless by the cap) - those waiting at a better rank > 0.
//   ready     a Returned ticket is ready iff free > 0; a Waiting (or Missed,
//             as shown to its holder) ticket iff the Waiting tickets before
//             it plus the Returned ones are fewer than free.
//   rate      a turn taken while the line moves by the cap spends a token.
//   position  the Waiting tickets before it, plus one: it never grows.
//   limit     an arrival of a client holding -max-tickets-per-client tickets
//             (waiting, returned or missed) is refused (ClientLimit), first.
//   full      an arrival is refused (Breaker) iff -max-queue visitors wait
//             (Waiting and Returned).
//   janitor   one pass in ticket order, free and the Returned count taken at
//             its start: TTL, grace, then readiness; a ticket seen ready for
//             the first time is stamped, one still ready past the claim
//             window misses its turn.
//
// Invariants checked on the real ring after every step, besides agreement:
// occupancy never passes the cap through an admission; no stall (the line
// moves by the cap, the room lets it use a slot and someone holds a live
// place => someone is ready now); no position grows; no FIFO inversion is
// counted. Events: arrivals (three clients, each held to
// -max-tickets-per-client, and visitors without an address), page requests,
// polls, streams and the held request's own recheck, visitors who leave or
// are removed, requests that finish, ranked requests (room passes and
// invitations at rank 0, priority classes, sessions) that wait, take a slot
// or give up, bans (the client's tickets leave the line), a worker's death
// and reclaim, the four modes, cap changes (a reload's, or an operator's),
// the admission rate (a bucket that does not refill during a run: one token
// an hour) and the janitor's passes.
//
// Not modelled here: the sale's pre-queue, several hosts, and ring
// wrap-around (their own tests in test_sale.cpp, the cluster suites,
// test_tickets.cpp and the multi-process suite).
//
// CONCERT_MODEL_STEPS sets the number of steps (1,000,000 by default); a
// failure prints the episode's seed and a shrunk trace that still fails.
#include <doctest/doctest.h>

#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ruled.h"
#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

constexpr WorkerSlot kGuard = 0;   // takes turns and holds the admitted visitors' slots
constexpr WorkerSlot kIssuer = 1;  // issues tickets
constexpr WorkerSlot kRanked = 2;  // ranked requests: waits and slots; it may die
constexpr int64_t kHourNs = 3'600'000'000'000;
constexpr int kClients = 3;              // clients 0..2 arrive with an address; kNoClient without one
constexpr int kNoClient = kClients;
constexpr int64_t kEveryone = int64_t{1} << 62;  // free slots when every turn has come (as the ring)
constexpr int kEpisodeSteps = 250;

enum class Kind : uint8_t {
  Arrive, Poll, Look, Page, Own, Leave, Remove, Finish, Direct, Tick, Mode, Cap,
  RankWait, RankTake, RankGo, RankDone, Crash, Rate, Ban,
};

const char* kindName(Kind k) {
  switch (k) {
    case Kind::Arrive: return "arrive";
    case Kind::Poll: return "poll";
    case Kind::Look: return "look";
    case Kind::Page: return "page";
    case Kind::Own: return "own";
    case Kind::Leave: return "leave";
    case Kind::Remove: return "remove";
    case Kind::Finish: return "finish";
    case Kind::Direct: return "direct";
    case Kind::Tick: return "tick";
    case Kind::Mode: return "mode";
    case Kind::Cap: return "cap";
    case Kind::RankWait: return "rank-wait";
    case Kind::RankTake: return "rank-take";
    case Kind::RankGo: return "rank-go";
    case Kind::RankDone: return "rank-done";
    case Kind::Crash: return "crash";
    case Kind::Rate: return "rate";
    case Kind::Ban: return "ban";
  }
  return "?";
}

// One event: `arg` is the ticket (its index in issue order) for contacts,
// leave and remove; the milliseconds for a tick; the RoomMode for mode; the
// new cap for cap; the rank for rank-wait; which waiting ranked request for
// rank-take and rank-go; the bucket's size for rate (0: no limit).
struct Event {
  Kind kind;
  int64_t arg;
};

struct Params {
  int32_t cap = 2;
  int64_t max_queue = 8;
  int32_t max_per_client = 0;  // -max-tickets-per-client (0: no limit)
  double share = 0.2;          // -newcomer-share
  SweepLimits limits;
};

std::string describe(const Params& p, const std::vector<Event>& trace) {
  std::ostringstream out;
  out << "cap " << p.cap << ", max-queue " << p.max_queue << ", per client " << p.max_per_client << ", share "
      << p.share << ", ttl " << p.limits.ttl << " ms, grace "
      << p.limits.first_poll << " ms, claim window " << p.limits.claim_window << " ms\n";
  for (size_t i = 0; i < trace.size(); ++i)
    out << "  " << i << ": " << kindName(trace[i].kind) << " " << trace[i].arg << "\n";
  return out.str();
}

// ------------------------------------------------------------ the model

enum class St : uint8_t { Waiting, Returned, Missed, Gone };

struct Ticket {
  TicketCookie cookie;  // the real ring's, to address it
  St st = St::Waiting;
  bool seen = false;
  Millis last_seen = 0;
  Millis ready_since = 0;  // 0: not stamped
  int64_t last_raw = INT64_MAX;
  int client = kNoClient;  // whose ticket (Arrive's arg), counted against -max-tickets-per-client
};

struct Model {
  int32_t cap = 2;
  int32_t occupancy = 0;
  int32_t admitted_held = 0;  // slots held by visitors admitted here (kGuard)
  int32_t ranked_held = 0;    // slots held by ranked requests (kRanked)
  RoomMode mode = RoomMode::Open;
  std::vector<int> ranked;  // the ranks of the ranked requests waiting
  int64_t credit = 0;       // thousandths of a slot
  int64_t rate_burst = 0;   // 0: no admission rate
  int64_t tokens = 0;
  double share = 0.2;
  std::vector<Ticket> tickets;  // in issue order, which is ticket order
  int64_t missed = 0, ghosts = 0, expired = 0;

  LineFlow flow() const {
    if (mode == RoomMode::Passthrough) return LineFlow::Everyone;
    return mode == RoomMode::Open ? LineFlow::ByCap : LineFlow::Still;
  }
  int64_t tokensLeft() const { return rate_burst > 0 ? tokens : AdmitRate::kUnlimited; }
  int64_t creditOwed() const { return std::min(live(), credit / 1000); }
  int64_t owed() const { return flow() == LineFlow::ByCap ? std::min(creditOwed(), tokensLeft()) : 0; }
  int64_t rankedAhead(int rank) const {
    int64_t n = 0;
    for (int r : ranked) n += r < rank;
    return n;
  }
  int64_t free() const {
    switch (flow()) {
      case LineFlow::Still: return 0;
      case LineFlow::Everyone: return kEveryone;
      case LineFlow::ByCap: break;
    }
    const int64_t f = static_cast<int64_t>(cap) - occupancy;
    const int64_t r = static_cast<int64_t>(ranked.size());
    const int64_t line = r == 0 ? f : std::max(f - r, std::min(f, creditOwed()));
    return std::min(line, tokensLeft());
  }
  void addCredit(int64_t delta) { credit = std::clamp<int64_t>(credit + delta, 0, 4000); }
  int64_t count(St s) const {
    int64_t n = 0;
    for (const Ticket& t : tickets) n += t.st == s;
    return n;
  }
  int64_t live() const { return count(St::Waiting) + count(St::Returned); }
  // A client's tickets that hold its count: in line, or missed (a place kept).
  int64_t ofClient(int client) const {
    int64_t n = 0;
    for (const Ticket& t : tickets) n += t.client == client && t.st != St::Gone;
    return n;
  }
  int64_t depth() const { return live() + count(St::Missed); }
  int64_t waitingBefore(size_t i) const {
    int64_t n = 0;
    for (size_t j = 0; j < i; ++j) n += tickets[j].st == St::Waiting;
    return n;
  }
  bool ready(size_t i) const {
    if (tickets[i].st == St::Returned) return free() > 0;
    return waitingBefore(i) + count(St::Returned) < free();
  }
  TicketView view(size_t i) const {
    TicketView v;
    if (tickets[i].st == St::Gone) return v;
    const bool r = ready(i);
    v.state = r ? TicketState::Ready : TicketState::Waiting;
    v.raw_position = waitingBefore(i) + 1;
    v.position = r ? 0 : v.raw_position;
    return v;
  }
  // A contact through render/touch/poll: what it returns.
  TicketView contact(size_t i, Millis now, Millis ttl, Contact how) {
    Ticket& t = tickets[i];
    if (t.st == St::Gone) return {};
    if (now - t.last_seen > ttl) {
      t.st = St::Gone;
      ++expired;
      TicketView v;
      v.state = TicketState::Expired;
      return v;
    }
    t.last_seen = now;
    if (how != Contact::Own) t.seen = true;
    if (how == Contact::Page && t.st == St::Missed) {
      t.st = St::Returned;
      t.ready_since = 0;
    }
    return view(i);
  }
  void sweep(Millis now, const SweepLimits& l) {
    const int64_t f = free();
    const int64_t returned_total = count(St::Returned);
    int64_t returned_seen = 0, waiting_seen = 0;
    for (Ticket& t : tickets) {
      if (t.st == St::Gone) continue;
      const Millis unseen = now - t.last_seen;
      if (l.ttl > 0 && unseen > l.ttl) {
        t.st = St::Gone;
        ++expired;
        continue;
      }
      if (t.st == St::Waiting && l.first_poll > 0 && !t.seen && unseen > l.first_poll) {
        t.st = St::Gone;
        ++ghosts;
        continue;
      }
      if (t.st == St::Missed) continue;
      const bool r = t.st == St::Returned ? returned_seen++ < f : waiting_seen++ + returned_total < f;
      if (!r) {
        t.ready_since = 0;
        continue;
      }
      if (t.ready_since == 0) {
        t.ready_since = now;
        continue;
      }
      if (l.claim_window > 0 && now - t.ready_since > l.claim_window) {
        ++missed;
        t.st = t.st == St::Returned ? St::Gone : St::Missed;
      }
    }
  }
};

// ------------------------------------------------------------ one run

// Plays `trace` against a fresh segment and the model; "" when they agree
// throughout, else what went wrong (and at which step).
std::string play(const Params& p, const std::vector<Event>& trace) {
  Geometry g;
  g.ring_size = 1u << 12;
  g.worker_slots = 4;
  g.pass_table_size = 16;
  auto seg = Segment::create(g, p.cap, 16);
  admission::Room& room = followRoomRules(*seg);
  TicketRing& ring = seg->tickets();
  Model m;
  m.cap = p.cap;
  m.share = p.share;
  int64_t rate_interval = 0;
  Millis now = 1000;
  const Millis ttl = p.limits.ttl;

  std::ostringstream why;
  auto fail = [&](size_t step, const std::string& what) {
    why << "step " << step << " (" << kindName(trace[step].kind) << " " << trace[step].arg << "): " << what;
    return why.str();
  };
  auto same = [](const TicketView& a, const TicketView& b) {
    return a.state == b.state && a.position == b.position && (a.state == TicketState::Unknown ||
                                                               a.state == TicketState::Expired ||
                                                               a.raw_position == b.raw_position);
  };
  auto show = [](const TicketView& v) {
    static const char* names[] = {"unknown", "expired", "waiting", "ready"};
    return std::string(names[static_cast<int>(v.state)]) + " at " + std::to_string(v.raw_position);
  };

  for (size_t step = 0; step < trace.size(); ++step) {
    const Event& e = trace[step];
    const bool has_ticket = e.arg >= 0 && static_cast<size_t>(e.arg) < m.tickets.size();
    const size_t i = has_ticket ? static_cast<size_t>(e.arg) : 0;
    switch (e.kind) {
      case Kind::Arrive: {
        const int client = static_cast<int>(e.arg);
        ClientTicketing ticketing;
        ticketing.key[0] = static_cast<uint8_t>(client + 1);
        ticketing.max_per_client = p.max_per_client;
        const Issued issued = ring.issue(kIssuer, p.max_queue, now, client == kNoClient ? nullptr : &ticketing);
        if (client != kNoClient && p.max_per_client > 0 && m.ofClient(client) >= p.max_per_client) {
          if (issued.outcome != IssueOutcome::ClientLimit) return fail(step, "expected the client's limit");
          break;
        }
        if (m.live() >= p.max_queue) {
          if (issued.outcome != IssueOutcome::Breaker) return fail(step, "expected the breaker");
          break;
        }
        if (issued.outcome != IssueOutcome::Queued) return fail(step, "an arrival was refused below -max-queue");
        Ticket t;
        t.cookie = issued.cookie;
        t.last_seen = now;
        t.client = client;
        m.tickets.push_back(t);
        const TicketView want = m.view(m.tickets.size() - 1);
        if (issued.position != want.raw_position || issued.ready != (want.state == TicketState::Ready))
          return fail(step, "issued at " + std::to_string(issued.position) + (issued.ready ? " ready" : "") +
                                ", the model says " + show(want));
        break;
      }
      case Kind::Poll:
      case Kind::Look:
      case Kind::Own:
      case Kind::Page: {
        if (!has_ticket) break;
        const Contact how = e.kind == Kind::Page ? Contact::Page : e.kind == Kind::Own ? Contact::Own : Contact::Look;
        const TicketCookie& cookie = m.tickets[i].cookie;
        TicketView got = e.kind == Kind::Poll   ? ring.poll(cookie, now, ttl)
                         : e.kind == Kind::Page ? ring.render(cookie, now, ttl, how)
                                                : ring.touch(cookie, now, ttl, how);
        const TicketView want = m.contact(i, now, ttl, how);
        if (!same(got, want)) return fail(step, "the ring answered " + show(got) + ", the model " + show(want));
        if (e.kind != Kind::Page || got.state != TicketState::Ready) break;
        if (m.flow() == LineFlow::Everyone) {
          // Passthrough: the ticket leaves the line; a slot if one is free.
          if (!ring.claim(m.tickets[i].cookie)) return fail(step, "passthrough: a ready ticket was not claimed");
          m.tickets[i].st = St::Gone;
          if (seg->pages().tryAcquire(kGuard)) {
            ++m.occupancy;
            ++m.admitted_held;
          }
          break;
        }
        // The page guard's turn: a slot, then the claim (Room::takeTurn).
        if (!room.takeTurn(kGuard, m.tickets[i].cookie, nullptr))
          return fail(step, "a ready ticket could not take its turn");
        m.tickets[i].st = St::Gone;
        ++m.occupancy;
        ++m.admitted_held;
        if (m.credit >= 1000) m.credit -= 1000;
        if (m.rate_burst > 0) --m.tokens;
        break;
      }
      case Kind::Leave:
      case Kind::Remove:
        if (!has_ticket) break;
        if (e.kind == Kind::Leave) {
          ring.retire(m.tickets[i].cookie.ticket, false);
        } else if (ring.remove(m.tickets[i].cookie.ticket) != (m.tickets[i].st != St::Gone)) {
          return fail(step, "remove disagrees on whether the ticket held a place");
        }
        m.tickets[i].st = St::Gone;
        break;
      case Kind::Finish:
        if (m.admitted_held == 0) break;
        seg->pages().release(kGuard);
        --m.admitted_held;
        --m.occupancy;
        break;
      case Kind::Direct: {  // someone with no ticket takes a free slot (a session, say)
        const bool got = seg->pages().tryAcquire(kGuard);
        if (got != (m.occupancy < m.cap)) return fail(step, "a slot taken past the cap, or refused below it");
        if (got) {
          ++m.occupancy;
          ++m.admitted_held;
        }
        break;
      }
      case Kind::Tick: {
        now += e.arg;
        const SweepReport r = ring.sweep(now, p.limits);
        const int64_t missed = m.missed, ghosts = m.ghosts, expired = m.expired;
        m.sweep(now, p.limits);
        if (r.missed != m.missed - missed || r.ghosts != m.ghosts - ghosts || r.expired != m.expired - expired)
          return fail(step, "the janitor's pass: missed " + std::to_string(r.missed) + " ghosts " +
                                std::to_string(r.ghosts) + " expired " + std::to_string(r.expired) +
                                "; the model: " + std::to_string(m.missed - missed) + " " +
                                std::to_string(m.ghosts - ghosts) + " " + std::to_string(m.expired - expired));
        break;
      }
      case Kind::Mode:
        seg->modes().set(static_cast<RoomMode>(e.arg));
        m.mode = static_cast<RoomMode>(e.arg);
        break;
      case Kind::Cap:
        seg->pages().setCap(static_cast<int32_t>(e.arg));
        m.cap = static_cast<int32_t>(e.arg);
        break;
      case Kind::RankWait:
        seg->sessions().enter(kRanked, static_cast<int>(e.arg));
        m.ranked.push_back(static_cast<int>(e.arg));
        break;
      case Kind::RankTake:
      case Kind::RankGo: {
        if (m.ranked.empty()) break;
        const size_t j = static_cast<size_t>(e.arg) % m.ranked.size();
        const int rank = m.ranked[j];
        if (e.kind == Kind::RankTake) {
          const bool want = m.cap - m.occupancy - m.owed() - m.rankedAhead(rank) > 0;
          const int64_t depth = m.live();
          if (room.takeRankedSlot(kRanked, rank, p.share) != want)
            return fail(step, std::string("a ranked request at rank ") + std::to_string(rank) +
                                  (want ? " was refused a slot" : " took a slot it is not due"));
          if (!want) break;
          ++m.occupancy;
          ++m.ranked_held;
          if (m.flow() == LineFlow::ByCap && depth > 0 && p.share > 0)
            m.addCredit(p.share >= 1 ? 4000 : static_cast<int64_t>(p.share / (1 - p.share) * 1000 + 0.5));
        }
        seg->sessions().leave(kRanked, rank);
        m.ranked.erase(m.ranked.begin() + static_cast<std::ptrdiff_t>(j));
        break;
      }
      case Kind::RankDone:
        if (m.ranked_held == 0) break;
        seg->pages().release(kRanked);
        --m.ranked_held;
        --m.occupancy;
        break;
      case Kind::Crash: {  // the ranked requests' worker dies: its waits and slots come back
        const ReclaimReport r = seg->reclaimDeadWorker(kRanked);
        if (r.page_slots != m.ranked_held) return fail(step, "reclaim returned another number of page slots");
        m.occupancy -= m.ranked_held;
        m.ranked_held = 0;
        m.ranked.clear();
        break;
      }
      case Kind::Ban: {  // a client's strike that bans it: its tickets leave the line
        const int client = static_cast<int>(e.arg);
        uint8_t key[16] = {};
        key[0] = static_cast<uint8_t>(client + 1);
        AbusePolicy policy;
        policy.threshold = 1;
        policy.ban = 5000;
        const StrikeOutcome r = seg->strike(key, 1, policy, now, kGuard);
        if (!r.banned_now) break;  // banned already: the ban runs on
        if (r.tickets_retired != m.ofClient(client))
          return fail(step, "a ban retired " + std::to_string(r.tickets_retired) + " tickets, the model " +
                                std::to_string(m.ofClient(client)));
        for (Ticket& t : m.tickets)
          if (t.client == client) t.st = St::Gone;
        break;
      }
      case Kind::Rate: {
        // One token an hour: the bucket does not refill during a run.
        const int64_t interval = e.arg > 0 ? kHourNs : 0;
        const int64_t burst = std::max<int64_t>(e.arg, 1);
        seg->admitRate().configure(interval, burst, monotonicNs());
        if (interval != rate_interval || burst != std::max<int64_t>(m.rate_burst, 1)) {
          m.rate_burst = e.arg;  // a change refills the bucket
          m.tokens = e.arg;
        }
        rate_interval = interval;
        break;
      }
    }

    // Agreement on every ticket, and the invariants.
    bool someone_ready = false;
    for (size_t j = 0; j < m.tickets.size(); ++j) {
      Ticket& t = m.tickets[j];
      const TicketView got = ring.peek(t.cookie);
      const TicketView want = m.view(j);
      if (!same(got, want))
        return fail(step, "ticket " + std::to_string(j) + ": the ring shows " + show(got) + ", the model " +
                              show(want));
      if (t.st == St::Gone) continue;
      if (got.raw_position > t.last_raw) return fail(step, "ticket " + std::to_string(j) + "'s position grew");
      t.last_raw = got.raw_position;
      someone_ready |= t.st != St::Missed && got.state == TicketState::Ready;
    }
    if (ring.liveQueueDepth() != m.live() || ring.queueDepth() != m.depth())
      return fail(step, "depths " + std::to_string(ring.liveQueueDepth()) + "/" + std::to_string(ring.queueDepth()) +
                            ", the model " + std::to_string(m.live()) + "/" + std::to_string(m.depth()));
    if (seg->pages().occupancy() != m.occupancy) return fail(step, "occupancy differs");
    if (m.flow() == LineFlow::ByCap && m.free() > 0 && m.live() > 0 && !someone_ready)
      return fail(step, "the line stalls");
    if (seg->sessions().waiting() != static_cast<int64_t>(m.ranked.size()) || seg->sessions().creditMilli() != m.credit)
      return fail(step, "ranked waits or the line's credit differ");
    const StatsSnapshot st = seg->stats().snapshot();
    if (static_cast<int64_t>(st.missed_turns_total) != m.missed) return fail(step, "missed_turns_total differs");
    if (st.fifo_inversions_total != 0) return fail(step, "a FIFO inversion");
  }
  return "";
}

// ------------------------------------------------------------ the driver

Params randomParams(std::mt19937_64& rng) {
  Params p;
  p.cap = 1 + static_cast<int32_t>(rng() % 3);
  p.max_queue = 3 + static_cast<int64_t>(rng() % 8);
  p.limits.claim_window = 1000 + static_cast<Millis>(rng() % 3) * 1000;
  p.limits.first_poll = 3000 + static_cast<Millis>(rng() % 3) * 2000;
  p.limits.ttl = 12000 + static_cast<Millis>(rng() % 3) * 8000;
  static const double kShares[] = {0, 0.2, 0.5, 1.0};
  p.share = kShares[rng() % 4];
  p.max_per_client = static_cast<int32_t>(rng() % 4);
  return p;
}

std::vector<Event> randomTrace(std::mt19937_64& rng, const Params& p, int steps) {
  // Weights per kind, in Kind order.
  static const int kWeights[] = {14, 16, 8, 16, 4, 3, 2, 12, 4, 18, 2, 2, 5, 6, 2, 5, 1, 1, 1};
  int total = 0;
  for (int w : kWeights) total += w;
  std::vector<Event> trace;
  int64_t issued = 0;
  static const Millis kTicks[] = {0, 50, 400, 1000, 1001, 2500, 6000};
  for (int s = 0; s < steps; ++s) {
    int pick = static_cast<int>(rng() % static_cast<uint64_t>(total));
    int k = 0;
    while (pick >= kWeights[k]) pick -= kWeights[k++];
    Event e{static_cast<Kind>(k), 0};
    switch (e.kind) {
      case Kind::Arrive:
        ++issued;
        e.arg = static_cast<int64_t>(rng() % (kClients + 1));  // a client, or none
        break;
      case Kind::Ban: e.arg = static_cast<int64_t>(rng() % kClients); break;
      case Kind::Poll:
      case Kind::Look:
      case Kind::Page:
      case Kind::Own:
      case Kind::Leave:
      case Kind::Remove:
        // Mostly the newer tickets (the ones likely still in line).
        e.arg = issued == 0 ? 0 : std::max<int64_t>(0, issued - 1 - static_cast<int64_t>(rng() % 8));
        break;
      case Kind::Tick: e.arg = kTicks[rng() % (sizeof kTicks / sizeof kTicks[0])]; break;
      case Kind::Mode: {  // mostly open
        static const RoomMode kModes[] = {RoomMode::Open, RoomMode::Open, RoomMode::Open, RoomMode::Pause,
                                          RoomMode::Reject, RoomMode::Passthrough};
        e.arg = static_cast<int64_t>(kModes[rng() % 6]);
        break;
      }
      case Kind::RankWait: e.arg = rng() % 2 ? kSessionRank : static_cast<int64_t>(rng() % kPriorityRanks); break;
      case Kind::RankTake:
      case Kind::RankGo: e.arg = static_cast<int64_t>(rng() % 4); break;
      case Kind::Rate: e.arg = static_cast<int64_t>(rng() % 4); break;
      case Kind::Cap: e.arg = 1 + static_cast<int64_t>(rng() % (p.cap + 2)); break;
      default: break;
    }
    trace.push_back(e);
  }
  return trace;
}

// The shortest trace found by dropping events one at a time while it still fails.
std::vector<Event> shrink(const Params& p, std::vector<Event> trace) {
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t i = trace.size(); i-- > 0;) {
      std::vector<Event> shorter = trace;
      shorter.erase(shorter.begin() + static_cast<std::ptrdiff_t>(i));
      if (!play(p, shorter).empty()) {
        trace = std::move(shorter);
        progress = true;
      }
    }
  }
  return trace;
}

int64_t modelSteps() {
  const char* env = std::getenv("CONCERT_MODEL_STEPS");
  return env ? std::max<int64_t>(kEpisodeSteps, std::atoll(env)) : 1'000'000;
}

}  // namespace

TEST_CASE("the ticket ring follows the line's table: a random differential run against the model") {
  const int64_t steps = modelSteps();
  const uint64_t base = 0x5eed0000;
  int64_t done = 0;
  for (uint64_t episode = 0; done < steps; ++episode) {
    std::mt19937_64 rng(base + episode);
    const Params p = randomParams(rng);
    const std::vector<Event> trace = randomTrace(rng, p, kEpisodeSteps);
    const std::string failure = play(p, trace);
    if (!failure.empty()) {
      const std::vector<Event> small = shrink(p, trace);
      FAIL_CHECK("episode seed " << base + episode << ": " << play(p, small) << "\nshrunk trace, "
                                 << describe(p, small));
      return;
    }
    done += kEpisodeSteps;
  }
  MESSAGE(done << " steps");
}

TEST_CASE("the model catches what it should: a watcher's poll does not bring its turn back") {
  // A hand-written trace: one ticket misses its turn; its holder only polls;
  // the next ticket's turn must come.
  Params p;
  p.cap = 1;
  p.limits.claim_window = 1000;
  p.limits.first_poll = 60000;
  p.limits.ttl = 60000;
  const std::vector<Event> trace = {
      {Kind::Arrive, 0}, {Kind::Arrive, 0}, {Kind::Tick, 100},  {Kind::Tick, 1001}, {Kind::Poll, 0},
      {Kind::Tick, 100}, {Kind::Tick, 1001}, {Kind::Poll, 0}, {Kind::Page, 1},
  };
  CHECK(play(p, trace) == "");
}
