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
//   ready     free = cap - occupancy while the line moves (open), else 0;
//             a Returned ticket is ready iff free > 0; a Waiting (or Missed,
//             as shown to its holder) ticket iff the Waiting tickets before
//             it plus the Returned ones are fewer than free.
//   position  the Waiting tickets before it, plus one: it never grows.
//   full      an arrival is refused (Breaker) iff -max-queue visitors wait
//             (Waiting and Returned).
//   janitor   one pass in ticket order, free and the Returned count taken at
//             its start: TTL, grace, then readiness; a ticket seen ready for
//             the first time is stamped, one still ready past the claim
//             window misses its turn.
//
// Invariants checked on the real ring after every step, besides agreement:
// occupancy never passes the cap through an admission; no stall (the line
// moves, a slot is free and someone holds a live place => someone is ready
// now); no position grows; no FIFO inversion is counted.
//
// Not modelled here: sessions and ranks (sessions.h has their own tests),
// the admission rate (it reads the real clock), the sale's pre-queue, client
// limits and bans, several hosts, and ring wrap-around (its own tests in
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

#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

constexpr WorkerSlot kGuard = 0;   // takes turns and holds the admitted visitors' slots
constexpr WorkerSlot kIssuer = 1;  // issues tickets
constexpr int kEpisodeSteps = 250;

enum class Kind : uint8_t { Arrive, Poll, Look, Page, Own, Leave, Remove, Finish, Direct, Tick, Mode, Cap };

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
  }
  return "?";
}

// One event: `arg` is the ticket (its index in issue order) for contacts,
// leave and remove; the milliseconds for a tick; open (1) or pause (0) for
// mode; the new cap for cap.
struct Event {
  Kind kind;
  int64_t arg;
};

struct Params {
  int32_t cap = 2;
  int64_t max_queue = 8;
  SweepLimits limits;
};

std::string describe(const Params& p, const std::vector<Event>& trace) {
  std::ostringstream out;
  out << "cap " << p.cap << ", max-queue " << p.max_queue << ", ttl " << p.limits.ttl << " ms, grace "
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
};

struct Model {
  int32_t cap = 2;
  int32_t occupancy = 0;
  int32_t admitted_held = 0;  // slots held by visitors admitted here (kGuard)
  bool moves = true;
  std::vector<Ticket> tickets;  // in issue order, which is ticket order
  int64_t missed = 0, ghosts = 0, expired = 0;

  int64_t free() const { return moves ? static_cast<int64_t>(cap) - occupancy : 0; }
  int64_t count(St s) const {
    int64_t n = 0;
    for (const Ticket& t : tickets) n += t.st == s;
    return n;
  }
  int64_t live() const { return count(St::Waiting) + count(St::Returned); }
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
  TicketRing& ring = seg->tickets();
  Model m;
  m.cap = p.cap;
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
        const Issued issued = ring.issue(kIssuer, p.max_queue, now);
        if (m.live() >= p.max_queue) {
          if (issued.outcome != IssueOutcome::Breaker) return fail(step, "expected the breaker");
          break;
        }
        if (issued.outcome != IssueOutcome::Queued) return fail(step, "an arrival was refused below -max-queue");
        Ticket t;
        t.cookie = issued.cookie;
        t.last_seen = now;
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
        // The page guard's takeTurn: a slot, then the claim.
        bool took = false;
        if (seg->pages().tryAcquire(kGuard)) {
          took = ring.claim(m.tickets[i].cookie);
          if (!took) seg->pages().release(kGuard);
        }
        if (!took) return fail(step, "a ready ticket could not take its turn");
        m.tickets[i].st = St::Gone;
        ++m.occupancy;
        ++m.admitted_held;
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
        seg->modes().set(e.arg ? RoomMode::Open : RoomMode::Pause);
        m.moves = e.arg != 0;
        break;
      case Kind::Cap:
        seg->pages().setCap(static_cast<int32_t>(e.arg));
        m.cap = static_cast<int32_t>(e.arg);
        break;
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
    if (m.moves && m.free() > 0 && m.live() > 0 && !someone_ready) return fail(step, "the line stalls");
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
  return p;
}

std::vector<Event> randomTrace(std::mt19937_64& rng, const Params& p, int steps) {
  // Weights per kind, in Kind order.
  static const int kWeights[] = {14, 16, 8, 16, 4, 3, 2, 12, 4, 18, 2, 2};
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
      case Kind::Arrive: ++issued; break;
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
      case Kind::Mode: e.arg = rng() % 4 != 0; break;  // mostly open
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
