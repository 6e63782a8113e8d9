// Multi-process tests of the shared-memory core: real processes forked over
// one real mapping, hammering the ticket ring, the semaphores, the pass
// table, the revocations and the client table, and being SIGKILLed
// mid-operation.
//
// Workers here do what the page guard does (admission/page_guard.cpp): the
// fast path when nobody waits, else a ticket at the back of the line, polled
// until its turn, then a page slot and the claim (the slot given back if the
// claim fails). A request in flight holds page slots only, never a ring
// entry.
//
// Children report through a second shared mapping (Board) and leave with
// _exit(), so doctest and ASan teardown run only in the parent. Every wait is
// bounded; every child is killed by pid if the test gives up on it.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include "common/clock.h"
#include "shm/nonce.h"
#include "shm/segment.h"
#include "../unit/shm/ruled.h"

using namespace concert;
using namespace concert::shm;

// ------------------------------------------------------------ fault injection
// The nonce source (shm/nonce.cpp) draws from getrandom() to refill its
// buffer, and issue() draws the nonce after it has reserved the ticket's
// entry and before the entry turns Waiting. A forked child's nonce buffer
// starts empty, so a child's first issue() calls getrandom() with its ticket
// Reserved. This definition stands in for libc's in this test binary: it
// passes straight through unless the process set a hook, which then runs
// right there: a stall, or SIGKILL.
namespace {
void (*g_getrandom_hook)() = nullptr;
}  // namespace

extern "C" ssize_t getrandom(void* buffer, size_t length, unsigned int flags) {
  if (g_getrandom_hook) g_getrandom_hook();
  return syscall(SYS_getrandom, buffer, length, flags);
}

namespace {

constexpr uint32_t kRing = 1u << 12;
constexpr uint32_t kSlots = 8;
constexpr uint64_t kMaxTickets = 1u << 16;
constexpr Millis kLongTtl = 10LL * 24 * 3600 * 1000;  // never expires in a test

// Board::stage, per ticket number.
enum : uint8_t {
  kNotIssued = 0,  // not handed out yet (or its issue() has not returned)
  kWaiting = 1,    // issue() returned; no claim being tried: it is Waiting (or Missed/Returned)
  kClaiming = 2,   // a claim is being tried
  kClaimed = 3,    // claimed: left the line with a page slot
  kGone = 4,       // left the line unclaimed: it missed its turn, had it back, and missed it again
};

// Test bookkeeping shared by the parent and its children.
struct Board {
  std::atomic<int64_t> in_page;   // incremented after a page acquire, decremented before release
  std::atomic<int64_t> in_asset;  // same for the asset semaphore
  std::atomic<int64_t> in_pass;   // same for the shared pass
  std::atomic<int64_t> max_page, max_asset, max_pass;
  std::atomic<uint64_t> violations;          // breaker or cap violations seen by children
  std::atomic<uint64_t> fifo_violations;     // claimed with too many waiting ahead (see fifoCheck)
  std::atomic<uint64_t> lost;                // a ticket vanished from the line while its holder kept polling
  std::atomic<uint64_t> position_increases;  // a poll showed a larger position than an earlier one
  std::atomic<uint64_t> issued, admitted, fast_path, ring_full, claim_failures, dawdles;
  std::atomic<int> pause_request, paused;
  std::atomic<int> stop;
  std::atomic<int> stalled, go;
  std::atomic<int64_t> reported_position;
  std::atomic<uint64_t> victim_ops;
  std::atomic<uint64_t> bans;    // strikes that started a ban
  std::atomic<int64_t> in_line;  // a client's tickets issued and not yet retired
  // The wake-up hammer: changes made, changes seen, wake-ups consumed.
  std::atomic<uint64_t> produced, seen, woken;
  std::atomic<uint64_t> current[kSlots];  // the ticket the slot's worker holds in line (0: none)
  std::atomic<uint64_t> holding[kSlots];  // odd while the slot's worker holds a page slot
  std::atomic<uint8_t> stage[kMaxTickets];
};

Board* g_board = nullptr;  // this process's pointer to the board, for the getrandom hooks

Board* makeBoard() {
  void* p = mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  g_board = static_cast<Board*>(p);
  return g_board;  // zero pages: every atomic starts at 0
}

void dropBoard(Board* board) {
  munmap(board, sizeof(Board));
  g_board = nullptr;
}

void raiseMax(std::atomic<int64_t>& max, int64_t value) {
  int64_t seen = max.load();
  while (value > seen && !max.compare_exchange_weak(seen, value)) {
  }
}

// A segment whose lines follow the room's rules, as in a running server;
// every process forked from the test inherits the gate.
template <typename... Args>
std::unique_ptr<Segment> ruledSegment(Args&&... args) {
  auto segment = Segment::create(std::forward<Args>(args)...);
  followRoomRules(*segment);
  return segment;
}

void sleepMs(int ms) {
  timespec ts{0, static_cast<long>(ms) * 1000 * 1000};
  nanosleep(&ts, nullptr);
}

const uint8_t kSharedPass[16] = {0xc0, 0x4c, 0xe2, 0x7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

// The FIFO window, checked from outside. A claim of a waiting ticket t
// succeeds only if (waiting tickets ahead of t) < free, free = cap -
// occupancy counting the claimer's own slot. Seen from the board: a ticket
// u < t that some worker held in line with stage kWaiting both just before
// and just after the claim was Waiting throughout it (stage leaves kWaiting
// before any claim of u is tried), so it was counted ahead of t; a worker
// whose `holding` sequence was the same odd value before and after held a
// page slot throughout, so occupancy >= those + 1. Hence a successful claim
// needs |waiting throughout| + |holding throughout| < cap. A ticket whose
// issue() has not returned yet is not counted (it may still be Reserved).
struct FifoSnapshot {
  uint64_t ahead[kSlots] = {};
  uint64_t holding[kSlots] = {};
};

FifoSnapshot fifoSnapshot(const Board& board, WorkerSlot me, uint64_t ticket) {
  FifoSnapshot snap;
  for (WorkerSlot w = 0; w < kSlots; ++w) {
    if (w == me) continue;
    const uint64_t u = board.current[w].load();
    if (u != 0 && u < ticket && board.stage[u].load() == kWaiting) snap.ahead[w] = u;
    const uint64_t h = board.holding[w].load();
    if (h % 2 == 1) snap.holding[w] = h;
  }
  return snap;
}

bool fifoHolds(const Board& board, const FifoSnapshot& before, int32_t cap) {
  int64_t waiting = 0, holding = 0;
  for (WorkerSlot w = 0; w < kSlots; ++w) {
    const uint64_t u = before.ahead[w];
    if (u != 0 && board.current[w].load() == u && board.stage[u].load() == kWaiting) ++waiting;
    if (before.holding[w] != 0 && board.holding[w].load() == before.holding[w]) ++holding;
  }
  return waiting + holding < cap;
}

struct VisitOptions {
  int32_t cap = 1;
  int32_t pass_cap = 1;
  bool strict = false;         // nothing abandons tickets: a ticket that vanishes is a violation
  bool fifo = false;           // check the FIFO window on every claim (no missed turns in the test)
  bool fast_path = true;       // straight in when nobody waits, as the page guard does
  int dawdle_one_in = 0;       // > 0: now and then wait before taking a turn that has come
  bool stop_on_pause = false;  // a waiting visitor gives up when the test asks workers to pause
  int give_up_after = 0;       // > 0: a waiting visitor gives up after this many polls
};

// One page request, as the page guard makes it, then the release of
// everything it took. Returns true when it was admitted.
bool visit(Segment& seg, Board& board, WorkerSlot slot, std::mt19937& rng, const VisitOptions& o) {
  Millis now = monotonicMs();
  bool admitted = false;
  if (o.fast_path && rng() % 4 == 0 && seg.tickets().liveQueueDepth() == 0 && seg.pages().tryAcquire(slot)) {
    admitted = true;
    board.fast_path.fetch_add(1);
  } else {
    const Issued issued = seg.tickets().issue(slot, 0, now);
    if (issued.outcome == IssueOutcome::RingFull) {  // legal (the head may stall a whole ring): retry later
      board.ring_full.fetch_add(1);
      sched_yield();
      return false;
    }
    if (issued.outcome != IssueOutcome::Queued) {
      board.violations.fetch_add(1);
      return false;
    }
    const uint64_t t = issued.cookie.ticket;
    // The board tracks ticket numbers below kMaxTickets (tests that check
    // per-ticket invariants stay below it; longer ones only count).
    const bool tracked = t < kMaxTickets;
    if ((o.strict || o.fifo) && !tracked) board.violations.fetch_add(1);
    auto stage = [&](uint8_t value) {
      if (tracked) board.stage[t].store(value);
    };
    board.issued.fetch_add(1);
    stage(kWaiting);
    if (tracked) board.current[slot].store(t);
    int64_t position = issued.position;
    bool ready = issued.ready;
    for (int spins = 0;; ++spins) {
      if (ready && o.dawdle_one_in > 0 && rng() % static_cast<unsigned>(o.dawdle_one_in) == 0) {
        // The holder stays away past the claim window until the janitor
        // has taken some turn away (bounded: the sweep may see this ticket
        // as not ready, with the slots held by others).
        board.dawdles.fetch_add(1);
        const uint64_t missed_before = seg.stats().snapshot().missed_turns_total;
        const Millis until = monotonicMs() + 50;
        sleepMs(6);
        while (seg.stats().snapshot().missed_turns_total == missed_before && monotonicMs() < until) sleepMs(1);
      }
      if (ready) {
        // The page request: it brings a missed turn back (once).
        const TicketView page = seg.tickets().render(issued.cookie, monotonicMs(), kLongTtl, Contact::Page);
        ready = page.state == TicketState::Ready;
      }
      if (ready && seg.pages().tryAcquire(slot)) {
        FifoSnapshot before;
        if (o.fifo) before = fifoSnapshot(board, slot, t);
        stage(kClaiming);
        if (seg.tickets().claim(issued.cookie)) {
          stage(kClaimed);
          if (o.fifo && !fifoHolds(board, before, o.cap)) board.fifo_violations.fetch_add(1);
          admitted = true;
          break;
        }
        stage(kWaiting);
        board.claim_failures.fetch_add(1);
        seg.pages().release(slot);
      }
      const TicketView v = seg.tickets().poll(issued.cookie, monotonicMs(), kLongTtl);
      if (v.state != TicketState::Ready && v.state != TicketState::Waiting) {
        stage(kGone);
        if (o.strict) board.lost.fetch_add(1);
        break;  // gone (the janitor abandoned it, or its turn came back and was missed again): the visit ends
      }
      if (v.raw_position > position) board.position_increases.fetch_add(1);
      position = std::min(position, v.raw_position);
      ready = v.state == TicketState::Ready;
      if ((o.stop_on_pause && board.pause_request.load() != 0 && spins > 1000) ||
          (o.give_up_after > 0 && spins >= o.give_up_after)) {
        seg.tickets().retire(t, false);  // the visitor gives up
        break;
      }
      if (!ready || spins % 8 == 7) sched_yield();
    }
    board.current[slot].store(0);
  }
  if (!admitted) return false;

  board.holding[slot].fetch_add(1);  // odd: holding a page slot
  raiseMax(board.max_page, board.in_page.fetch_add(1) + 1);
  board.admitted.fetch_add(1);
  const bool asset = rng() % 2 == 0 && seg.assets().tryAcquire(slot);
  if (asset) raiseMax(board.max_asset, board.in_asset.fetch_add(1) + 1);
  PassHold hold;
  const bool pass = rng() % 2 == 0 && seg.passes().tryAcquire(kSharedPass, PassProto::H1, o.pass_cap, slot, now,
                                                              &hold) == PassAcquire::Acquired;
  if (pass) raiseMax(board.max_pass, board.in_pass.fetch_add(1) + 1);
  if (rng() % 4 == 0) sched_yield();
  if (pass) {
    board.in_pass.fetch_sub(1);
    seg.passes().release(hold, slot, now);
  }
  if (asset) {
    board.in_asset.fetch_sub(1);
    seg.assets().release(slot);
  }
  board.in_page.fetch_sub(1);
  board.holding[slot].fetch_add(1);  // even: about to give the page slot back
  seg.pages().release(slot);
  return true;
}

// fork() whose child dies with the test process (a test killed by a
// runner's timeout must not leave children spinning).
pid_t forkChild() {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
  }
  return pid;
}

// Children a test started and has not reaped yet. If the test stops early
// (a failed REQUIRE throws), the destructor kills them by pid, so no child
// outlives its test spinning on a board nobody will update.
class Children {
 public:
  void add(pid_t pid) { pids_.push_back(pid); }
  void reaped(pid_t pid) { std::erase(pids_, pid); }
  ~Children() {
    for (pid_t pid : pids_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }

 private:
  std::vector<pid_t> pids_;
};

bool waitExit(pid_t pid, int* status, int seconds) {
  for (int i = 0; i < seconds * 100; ++i) {
    const pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    sleepMs(10);
  }
  kill(pid, SIGKILL);
  waitpid(pid, status, 0);
  return false;
}

Geometry testGeometry(uint32_t ring = kRing) {
  Geometry g;
  g.ring_size = ring;
  g.worker_slots = kSlots;
  g.pass_table_size = 64;
  return g;
}

// A short request through the line on `slot` while nobody else is in it:
// false if the ring refused the ticket.
bool throughTheLine(Segment& seg, WorkerSlot slot) {
  const Issued t = seg.tickets().issue(slot, 0, monotonicMs());
  if (t.outcome != IssueOutcome::Queued) return false;
  REQUIRE(t.ready);
  REQUIRE(seg.pages().tryAcquire(slot));
  REQUIRE(seg.tickets().claim(t.cookie));
  seg.pages().release(slot);
  return true;
}

// Runs `children` hammering workers (slots 0 .. children-1) for `cycles`
// visits each while the parent samples the caps and, as the master does,
// runs the janitor's sweep with `limits`. Returns false if a child did not
// finish in time.
bool hammer(Segment& seg, Board& board, int children, int cycles, const VisitOptions& options,
            const SweepLimits& limits, int32_t asset_cap) {
  Children kids;
  std::vector<pid_t> pids;
  for (int c = 0; c < children; ++c) {
    const pid_t pid = forkChild();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::mt19937 rng(static_cast<unsigned>(c + 1));
      for (int i = 0; i < cycles;)
        if (visit(seg, board, static_cast<WorkerSlot>(c), rng, options) || !options.strict) ++i;
      _exit(0);
    }
    kids.add(pid);
    seg.slots().started(static_cast<WorkerSlot>(c), pid, 1, monotonicMs());
    pids.push_back(pid);
  }

  // Sampler and janitor: the callers' own count of what they hold never
  // exceeds the caps (the segment's occupancy may, for an instant, while a
  // tryAcquire that will back off is counted).
  int running = children;
  int64_t samples = 0;
  std::vector<bool> done(children, false);
  const Millis deadline = monotonicMs() + 90000;
  while (running > 0 && monotonicMs() < deadline) {
    CHECK(board.in_page.load() <= options.cap);
    CHECK(board.in_asset.load() <= asset_cap);
    CHECK(board.in_pass.load() <= options.pass_cap);
    if (++samples % 16 == 0) seg.tickets().sweep(monotonicMs(), limits);
    for (int c = 0; c < children; ++c) {
      int status = 0;
      if (!done[c] && waitpid(pids[c], &status, WNOHANG) == pids[c]) {
        kids.reaped(pids[c]);
        done[c] = true;
        --running;
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
      }
    }
    sched_yield();
  }
  for (int c = 0; c < children; ++c) {
    int status;
    if (!done[c]) CHECK(waitExit(pids[c], &status, 1));
    kids.reaped(pids[c]);
  }
  CHECK(samples > 0);
  return running == 0;
}

}  // namespace

TEST_CASE("four processes hammer one segment: caps hold, the FIFO window holds, no ticket is lost") {
  constexpr int kChildren = 4;
  constexpr int kCycles = 1500;
  constexpr int32_t kCap = 2, kAssetCap = 2, kPassCap = 2;
  auto seg = ruledSegment(testGeometry(), kCap, kAssetCap);
  Board* board = makeBoard();
  VisitOptions o;
  o.cap = kCap;
  o.pass_cap = kPassCap;
  o.strict = true;
  o.fifo = true;
  SweepLimits limits;  // the master's janitor, minus the claim window (no turn is missed here)
  limits.ttl = kLongTtl;
  limits.first_poll = 60000;
  REQUIRE(hammer(*seg, *board, kChildren, kCycles, o, limits, kAssetCap));

  const uint64_t issued = board->issued.load();
  MESSAGE("issued ", issued, ", fast path ", board->fast_path.load(), ", claims refused ", board->claim_failures.load(),
          ", ring full ", board->ring_full.load());
  CHECK(board->violations.load() == 0);
  CHECK(board->fifo_violations.load() == 0);
  CHECK(board->lost.load() == 0);
  // A ticket being issued counts ahead of later ones from the moment its
  // number is taken, so no position ever grows (see "a ticket being issued
  // is counted ahead of later tickets" below).
  CHECK(board->position_increases.load() == 0);
  CHECK(board->max_page.load() <= kCap);
  CHECK(board->max_asset.load() <= kAssetCap);
  CHECK(board->max_pass.load() <= kPassCap);
  CHECK(board->admitted.load() == kChildren * kCycles);
  CHECK(issued + board->fast_path.load() == kChildren * kCycles);
  CHECK(issued > kChildren * kCycles / 2);
  // No lost ticket: every number handed out was claimed, nothing is left.
  for (uint64_t t = 1; t <= issued; ++t) REQUIRE(board->stage[t].load() == kClaimed);
  CHECK(board->stage[issued + 1].load() == kNotIssued);
  CHECK(seg->tickets().queueDepth() == 0);
  CHECK(seg->tickets().liveQueueDepth() == 0);
  CHECK(seg->pages().occupancy() == 0);
  CHECK(seg->assets().occupancy() == 0);
  const StatsSnapshot st = seg->stats().snapshot();
  CHECK(st.queued_total == issued);
  CHECK(st.evicted_total == 0);
  CHECK(st.missed_turns_total == 0);
  const Issued next = seg->tickets().issue(0, 0, monotonicMs());
  CHECK(next.outcome == IssueOutcome::Queued);
  CHECK(next.ready);
  CHECK(next.position == 1);
  CHECK(next.cookie.ticket == issued + 1);
  for (int i = 0; i < kCap; ++i) CHECK(seg->pages().tryAcquire(0));
  dropBoard(board);
}

TEST_CASE("four processes and a janitor with a claim window: missed turns come back once, caps hold, no slot leaks") {
  constexpr int kChildren = 4;
  constexpr int kCycles = 600;
  constexpr int32_t kCap = 2, kAssetCap = 2, kPassCap = 2;
  auto seg = ruledSegment(testGeometry(), kCap, kAssetCap);
  Board* board = makeBoard();
  VisitOptions o;
  o.cap = kCap;
  o.pass_cap = kPassCap;
  o.strict = true;
  o.dawdle_one_in = 10;  // one ready ticket in ten waits 6 ms before taking its turn
  SweepLimits limits;
  limits.first_poll = 60000;
  limits.claim_window = 2;
  REQUIRE(hammer(*seg, *board, kChildren, kCycles, o, limits, kAssetCap));

  const uint64_t issued = board->issued.load();
  const StatsSnapshot st = seg->stats().snapshot();
  MESSAGE("issued ", issued, ", fast path ", board->fast_path.load(), ", dawdles ", board->dawdles.load(),
          ", missed turns ", st.missed_turns_total, ", claims refused ", board->claim_failures.load());
  CHECK(board->violations.load() == 0);
  // A missed ticket whose holder comes back for the page is returned; only a
  // ticket that misses its returned turn too leaves the line.
  CHECK(2 * board->lost.load() <= st.missed_turns_total);
  CHECK(board->position_increases.load() == 0);
  CHECK(board->max_page.load() <= kCap);
  CHECK(board->max_asset.load() <= kAssetCap);
  CHECK(board->max_pass.load() <= kPassCap);
  CHECK(board->admitted.load() == kChildren * kCycles);
  CHECK(st.missed_turns_total > 0);
  CHECK(st.evicted_total == 0);
  for (uint64_t t = 1; t <= issued; ++t) REQUIRE((board->stage[t].load() == kClaimed || board->stage[t].load() == kGone));
  CHECK(seg->tickets().queueDepth() == 0);
  CHECK(seg->tickets().liveQueueDepth() == 0);
  CHECK(seg->pages().occupancy() == 0);
  CHECK(seg->assets().occupancy() == 0);
  dropBoard(board);
}

TEST_CASE("SIGKILL mid-operation: reclaim returns exactly what the dead worker held, and nothing blocks the line") {
  constexpr int32_t kCap = 6, kAssetCap = 3, kPassCap = 3;
  constexpr WorkerSlot kParentSlot = 0, kSurvivorSlot = 1, kVictimSlot = 2;
  constexpr int kRounds = 40;
  constexpr Millis kTtl = 1000;
  auto seg = ruledSegment(testGeometry(), kCap, kAssetCap);
  Board* board = makeBoard();

  // The parent's own holdings, which must survive every reclaim untouched:
  // one admitted request (through the line) with a page slot, an asset slot
  // and a pass hold.
  const Issued mine = seg->tickets().issue(kParentSlot, 0, 0);
  REQUIRE(mine.outcome == IssueOutcome::Queued);
  REQUIRE(mine.ready);
  REQUIRE(seg->pages().tryAcquire(kParentSlot));
  REQUIRE(seg->tickets().claim(mine.cookie));
  REQUIRE(seg->assets().tryAcquire(kParentSlot));
  PassHold my_hold;
  REQUIRE(seg->passes().tryAcquire(kSharedPass, PassProto::H1, kPassCap, kParentSlot, 0, &my_hold) ==
          PassAcquire::Acquired);

  // Survivor: a live worker that keeps making whole visits while the victim
  // dies and is reclaimed; it stops (holding nothing) when asked.
  Children children;
  const pid_t survivor = forkChild();
  REQUIRE(survivor >= 0);
  if (survivor == 0) {
    std::mt19937 rng(7);
    VisitOptions o;
    o.cap = kCap;
    o.pass_cap = kPassCap;
    o.stop_on_pause = true;
    while (board->stop.load() == 0) {
      if (board->pause_request.load() != 0) {
        board->paused.store(1);
        while (board->pause_request.load() != 0 && board->stop.load() == 0) sched_yield();
        board->paused.store(0);
        continue;
      }
      visit(*seg, *board, kSurvivorSlot, rng, o);
    }
    _exit(0);
  }
  children.add(survivor);
  seg->slots().started(kSurvivorSlot, survivor, 1, monotonicMs());

  std::mt19937 rng(42);
  int64_t reclaimed_total = 0, reclaimed_pages = 0, reserved_finished = 0;
  for (int round = 0; round < kRounds; ++round) {
    CAPTURE(round);
    // Two visitors waiting with cookies, their tickets issued on the slot
    // about to die: they belong to the visitors, not the worker, and stay.
    const Issued wait1 = seg->tickets().issue(kVictimSlot, 0, monotonicMs());
    const Issued wait2 = seg->tickets().issue(kVictimSlot, 0, monotonicMs());
    REQUIRE(wait1.outcome == IssueOutcome::Queued);
    REQUIRE(wait2.outcome == IssueOutcome::Queued);

    const pid_t victim = forkChild();
    REQUIRE(victim >= 0);
    if (victim == 0) {
      std::mt19937 vrng(static_cast<unsigned>(round) + 100);
      VisitOptions o;
      o.cap = kCap;
      o.pass_cap = kPassCap;
      o.give_up_after = 200;  // its own walk-aways may stand ahead for good
      int my_pages = 0;       // requests in flight outside visits
      for (;; board->victim_ops.fetch_add(1)) {
        // A mix of everything, with holds piling up between releases.
        switch (vrng() % 7) {
          case 0:
          case 1: visit(*seg, *board, kVictimSlot, vrng, o); break;
          case 2: seg->tickets().issue(kVictimSlot, 4, monotonicMs()); break;  // a visitor who walks away
          case 3: {  // a held request whose client left before its cookie went out
            const Issued q = seg->tickets().issue(kVictimSlot, 4, monotonicMs());
            if (q.outcome == IssueOutcome::Queued) seg->tickets().retire(q.cookie.ticket, true);
            break;
          }
          case 4: {
            PassHold h;
            if (seg->passes().tryAcquire(kSharedPass, PassProto::H2, 2, kVictimSlot, 0, &h) == PassAcquire::Acquired &&
                vrng() % 2)
              seg->passes().release(h, kVictimSlot, 0);
            break;
          }
          case 5:
            if (seg->assets().tryAcquire(kVictimSlot) && vrng() % 2) seg->assets().release(kVictimSlot);
            break;
          default:
            if (my_pages < 2 && vrng() % 2 && seg->pages().tryAcquire(kVictimSlot)) {
              ++my_pages;
            } else if (my_pages > 0) {
              seg->pages().release(kVictimSlot);
              --my_pages;
            }
            break;
        }
      }
    }
    children.add(victim);
    seg->slots().started(kVictimSlot, victim, 1, monotonicMs());
    // Kill it somewhere in its first few hundred operations.
    const uint64_t target = board->victim_ops.load() + 1 + rng() % 400;
    for (int i = 0; i < 200000 && board->victim_ops.load() < target; ++i) sched_yield();
    timespec ts{0, static_cast<long>(rng() % 200) * 1000};
    nanosleep(&ts, nullptr);
    kill(victim, SIGKILL);
    int status = 0;
    REQUIRE(waitpid(victim, &status, 0) == victim);
    children.reaped(victim);
    CHECK(WIFSIGNALED(status));
    const ReclaimReport report = seg->reclaimDeadWorker(kVictimSlot);
    reclaimed_total += report.total();
    reclaimed_pages += report.page_slots;
    reserved_finished += report.tickets_finished;
    CHECK(seg->slots().pid(kVictimSlot) == 0);

    // The janitor drops the abandoned visitors (the victim's, and the
    // survivor's current one, which it then gives up); the two visitors
    // with cookies came back just before. Then quiesce the survivor and
    // compare.
    const Millis later = monotonicMs() + 100 * kTtl;
    REQUIRE(seg->tickets().render(wait1.cookie, later, kLongTtl).state != TicketState::Unknown);
    REQUIRE(seg->tickets().render(wait2.cookie, later, kLongTtl).state != TicketState::Unknown);
    SweepLimits limits;
    limits.ttl = kTtl;
    limits.first_poll = kTtl;
    seg->tickets().sweep(later, limits);
    board->pause_request.store(1);
    for (int i = 0; i < 1000000 && board->paused.load() == 0; ++i) sched_yield();
    REQUIRE(board->paused.load() == 1);
    seg->tickets().sweep(later, limits);

    CHECK(seg->pages().occupancy() == 1);
    CHECK(seg->assets().occupancy() == 1);
    CHECK(seg->tickets().liveQueueDepth() == 2);
    CHECK(seg->tickets().queueDepth() == 2);
    // Exactly one H1 hold (the parent's) and no H2 hold remain on the pass.
    PassHold probe[kPassCap];
    for (int i = 0; i < kPassCap - 1; ++i)
      CHECK(seg->passes().tryAcquire(kSharedPass, PassProto::H1, kPassCap, kParentSlot, later, &probe[i]) ==
            PassAcquire::Acquired);
    CHECK(seg->passes().tryAcquire(kSharedPass, PassProto::H1, kPassCap, kParentSlot, later, &probe[kPassCap - 1]) ==
          PassAcquire::AtCap);
    for (int i = 0; i < kPassCap - 1; ++i) seg->passes().release(probe[i], kParentSlot, later);
    PassHold h2[2];
    CHECK(seg->passes().tryAcquire(kSharedPass, PassProto::H2, 2, kParentSlot, later, &h2[0]) == PassAcquire::Acquired);
    CHECK(seg->passes().tryAcquire(kSharedPass, PassProto::H2, 2, kParentSlot, later, &h2[1]) == PassAcquire::Acquired);
    seg->passes().release(h2[0], kParentSlot, later);
    seg->passes().release(h2[1], kParentSlot, later);
    // The full page cap is usable apart from the parent's one slot.
    for (int i = 0; i < kCap - 1; ++i) CHECK(seg->pages().tryAcquire(kParentSlot));
    CHECK_FALSE(seg->pages().tryAcquire(kParentSlot));
    for (int i = 0; i < kCap - 1; ++i) seg->pages().release(kParentSlot);

    // Nothing blocks the line. The two visitors are the whole line (their
    // positions 1 and 2); once they leave, a new arrival is first and ready,
    // and a whole ring of requests passes through without RingFull (no
    // entry of the dead worker is left holding the low-water mark). The
    // arrival comes only after they leave: while they stood at the head,
    // the victim and the survivor may have churned a whole ring past them,
    // which fills the ring by design.
    const int64_t position1 = seg->tickets().render(wait1.cookie, later, kLongTtl).raw_position;
    const int64_t position2 = seg->tickets().render(wait2.cookie, later, kLongTtl).raw_position;
    seg->tickets().retire(wait1.cookie.ticket, false);
    seg->tickets().retire(wait2.cookie.ticket, false);
    const Issued arrival = seg->tickets().issue(kParentSlot, 0, later);
    REQUIRE(arrival.outcome == IssueOutcome::Queued);
    // A number a whole ring past wait1 was issued only if the ring carried
    // wait1 (Returned: first in line, and counted in nobody's position).
    const bool carried = arrival.cookie.ticket > wait1.cookie.ticket + kRing;
    CAPTURE(carried);
    CHECK(position1 == 1);
    CHECK(position2 == (carried ? 1 : 2));
    CHECK(arrival.position == 1);
    CHECK(arrival.ready);
    REQUIRE(seg->pages().tryAcquire(kParentSlot));
    CHECK(seg->tickets().claim(arrival.cookie));
    seg->pages().release(kParentSlot);
    CHECK(seg->tickets().queueDepth() == 0);
    bool passed = true;
    for (uint32_t i = 0; i <= kRing && passed; ++i) passed = throughTheLine(*seg, kParentSlot);
    CHECK(passed);
    board->pause_request.store(0);
  }

  board->stop.store(1);
  int status = 0;
  CHECK(waitExit(survivor, &status, 10));
  children.reaped(survivor);
  CHECK(WIFEXITED(status));
  MESSAGE("reclaimed ", reclaimed_total, " holds (", reclaimed_pages, " page slots); ", reserved_finished,
          " half-issued tickets finished");
  CHECK(board->violations.load() == 0);
  CHECK(reclaimed_total > 0);
  CHECK(seg->stats().snapshot().slots_reclaimed_total == static_cast<uint64_t>(reclaimed_total));
  CHECK(seg->reclaimDeadWorker(kSurvivorSlot).total() == 0);

  // Give everything back: all zero, the full caps usable.
  seg->passes().release(my_hold, kParentSlot, 0);
  seg->assets().release(kParentSlot);
  seg->pages().release(kParentSlot);
  CHECK(seg->pages().occupancy() == 0);
  CHECK(seg->assets().occupancy() == 0);
  CHECK(seg->tickets().liveQueueDepth() == 0);
  CHECK(seg->tickets().queueDepth() == 0);
  CHECK(seg->passes().sweep(1 << 30, 1) == 1);
  CHECK(seg->passes().users() == 0);
  for (int i = 0; i < kCap; ++i) {
    const Issued t = seg->tickets().issue(kParentSlot, 0, 0);
    CHECK(t.ready);
    CHECK(seg->pages().tryAcquire(kParentSlot));
    CHECK(seg->tickets().claim(t.cookie));
  }
  const Issued full = seg->tickets().issue(kParentSlot, 0, 0);
  CHECK(full.outcome == IssueOutcome::Queued);
  CHECK_FALSE(full.ready);
  for (int i = 0; i < kAssetCap; ++i) CHECK(seg->assets().tryAcquire(kParentSlot));
  dropBoard(board);
}

TEST_CASE("a worker killed inside issue() leaves its ticket Reserved; reclaim finishes it and the ring moves on") {
  constexpr uint32_t kSmallRing = 64;
  constexpr WorkerSlot kParentSlot = 0, kVictimSlot = 2;
  auto seg = ruledSegment(testGeometry(kSmallRing), 2, 2);
  Board* board = makeBoard();
  Children children;
  const pid_t victim = forkChild();
  REQUIRE(victim >= 0);
  if (victim == 0) {
    if (!seg->pages().tryAcquire(kVictimSlot)) _exit(2);  // a request in flight
    g_getrandom_hook = [] { raise(SIGKILL); };
    seg->tickets().issue(kVictimSlot, 0, monotonicMs());  // dies with ticket 1 Reserved
    _exit(3);
  }
  children.add(victim);
  seg->slots().started(kVictimSlot, victim, 1, monotonicMs());
  int status = 0;
  REQUIRE(waitExit(victim, &status, 20));
  children.reaped(victim);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGKILL);

  // A visitor joins behind the half-issued ticket (whether that one counts
  // ahead of it before reclaim is not the point here) ...
  CHECK(seg->pages().occupancy() == 1);
  const Issued visitor = seg->tickets().issue(kParentSlot, 0, monotonicMs());
  REQUIRE(visitor.outcome == IssueOutcome::Queued);
  CHECK(visitor.cookie.ticket == 2);
  // ... and the half-issued ticket holds the low-water mark: a ring later,
  // the ring is full.
  int passed = 0;
  while (passed < static_cast<int>(2 * kSmallRing)) {
    const Issued t = seg->tickets().issue(kParentSlot, 0, monotonicMs());
    if (t.outcome != IssueOutcome::Queued) break;
    seg->tickets().retire(t.cookie.ticket, false);
    ++passed;
  }
  CHECK(passed == static_cast<int>(kSmallRing) - 2);
  CHECK(seg->stats().snapshot().ring_full_total == 1);

  const ReclaimReport report = seg->reclaimDeadWorker(kVictimSlot);
  CHECK(report.tickets_finished == 1);
  CHECK(report.page_slots == 1);
  CHECK(seg->pages().occupancy() == 0);
  CHECK(seg->tickets().liveQueueDepth() == 1);  // the visitor, first in line now
  const TicketView v = seg->tickets().render(visitor.cookie, monotonicMs(), kLongTtl);
  CHECK(v.state == TicketState::Ready);
  CHECK(v.raw_position == 1);
  REQUIRE(seg->pages().tryAcquire(kParentSlot));
  CHECK(seg->tickets().claim(visitor.cookie));
  seg->pages().release(kParentSlot);
  CHECK(seg->tickets().queueDepth() == 0);
  passed = 0;
  while (passed < static_cast<int>(2 * kSmallRing) && throughTheLine(*seg, kParentSlot)) ++passed;
  CHECK(passed == static_cast<int>(2 * kSmallRing));
  CHECK(seg->stats().snapshot().ring_full_total == 1);
  CHECK(seg->tickets().queueDepth() == 0);
  dropBoard(board);
}

// A scheduled sale's pre-queue (tickets.h, "Scheduled sale"): the victim
// takes a random place in the open block and dies before its entry turns
// Waiting. Its buffer is drawn down to one nonce first, so the place is
// drawn from the buffer and the refill for the ticket's nonce (with the
// place Reserved) is where it dies.
TEST_CASE("a worker killed inside a pre-queue issue() leaves its place Reserved; reclaim and the closing block mend it") {
  constexpr uint32_t kSmallRing = 256;
  constexpr WorkerSlot kParentSlot = 0, kVictimSlot = 2;
  auto seg = ruledSegment(testGeometry(kSmallRing), 2, 2);
  seg->sale().schedule(unixMs() + 3600 * 1000, 7200 * 1000, true);
  REQUIRE(seg->tickets().saleTick(unixMs()).open);
  std::vector<TicketCookie> pre;
  auto arrive = [&](int n) {
    for (int i = 0; i < n; ++i) {
      const Issued t = seg->tickets().issue(kParentSlot, 0, monotonicMs());
      REQUIRE(t.outcome == IssueOutcome::Queued);
      pre.push_back(t.cookie);
    }
  };
  // The victim arrives first, into an empty block: its first random place
  // is free, so no second draw (and refill) comes before the one it dies in.
  Children children;
  const pid_t victim = forkChild();
  REQUIRE(victim >= 0);
  if (victim == 0) {
    for (int i = 0; i < 63; ++i) randomNonce();  // one buffered nonce left: the place
    g_getrandom_hook = [] { raise(SIGKILL); };
    seg->tickets().issue(kVictimSlot, 0, monotonicMs());
    _exit(3);
  }
  children.add(victim);
  seg->slots().started(kVictimSlot, victim, 1, monotonicMs());
  int status = 0;
  REQUIRE(waitExit(victim, &status, 20));
  children.reaped(victim);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGKILL);
  arrive(5);
  CHECK(seg->tickets().liveQueueDepth() == 6);  // the half-issued place counts until reclaimed

  arrive(5);
  const ReclaimReport report = seg->reclaimDeadWorker(kVictimSlot);
  CHECK(report.tickets_finished == 1);
  CHECK(seg->tickets().liveQueueDepth() == 10);
  CHECK(seg->tickets().queueDepth() == 10);

  // The start: the block closes around the finished place; everyone else
  // goes in exactly once, and the ring moves on for rings after.
  seg->sale().schedule(unixMs() - 1000, 7200 * 1000, true);
  const SaleTick closed = seg->tickets().saleTick(unixMs());
  CHECK(closed.closed);
  CHECK(closed.placed == 10);
  size_t admitted = 0;
  for (int round = 0; round < 100 && admitted < pre.size(); ++round)
    for (const TicketCookie& c : pre) {
      if (!seg->pages().tryAcquire(kParentSlot)) continue;
      if (seg->tickets().claim(c)) ++admitted;
      seg->pages().release(kParentSlot);
    }
  CHECK(admitted == pre.size());
  CHECK(seg->tickets().queueDepth() == 0);
  int passed = 0;
  while (passed < static_cast<int>(3 * kSmallRing) && throughTheLine(*seg, kParentSlot)) ++passed;
  CHECK(passed == static_cast<int>(3 * kSmallRing));
}

// The ring promises that a position never grows: nobody is ever inserted
// ahead of a waiting ticket (tickets.h). A ticket whose issue() is between
// reserving its number and turning its entry Waiting is not counted by
// anyone (the waiting bitmap has no bit for Reserved), yet it is ahead of
// every later number: once its issuer finishes, every later waiting ticket's
// position grows by one, and a later ticket may have been found ready, or
// claimed, ahead of it meanwhile. Here the issuer is held inside issue(),
// right where a descheduled worker would be.
//
TEST_CASE("a ticket being issued is counted ahead of later tickets: positions never grow") {
  auto seg = ruledSegment(testGeometry(), 1, 1);
  Board* board = makeBoard();
  REQUIRE(seg->pages().tryAcquire(0));  // a request in flight: everyone waits
  Children children;
  const pid_t issuer = forkChild();
  REQUIRE(issuer >= 0);
  if (issuer == 0) {
    g_getrandom_hook = [] {
      g_getrandom_hook = nullptr;
      g_board->stalled.store(1);
      for (int i = 0; i < 20000 && g_board->go.load() == 0; ++i) sleepMs(1);
    };
    const Issued mine = seg->tickets().issue(1, 0, monotonicMs());
    g_board->reported_position.store(mine.outcome == IssueOutcome::Queued ? mine.position : -1);
    _exit(0);
  }
  children.add(issuer);
  for (int i = 0; i < 20000 && board->stalled.load() == 0; ++i) sleepMs(1);
  REQUIRE(board->stalled.load() == 1);  // ticket 1 is Reserved, its issuer inside issue()

  const Issued second = seg->tickets().issue(0, 0, monotonicMs());
  const Issued third = seg->tickets().issue(0, 0, monotonicMs());
  REQUIRE(second.outcome == IssueOutcome::Queued);
  REQUIRE(third.outcome == IssueOutcome::Queued);
  REQUIRE(second.cookie.ticket == 2);
  REQUIRE(third.cookie.ticket == 3);
  board->go.store(1);
  int status = 0;
  REQUIRE(waitExit(issuer, &status, 20));
  children.reaped(issuer);
  REQUIRE(WIFEXITED(status));
  CHECK(board->reported_position.load() == 1);

  const TicketView v2 = seg->tickets().render(second.cookie, monotonicMs(), kLongTtl);
  const TicketView v3 = seg->tickets().render(third.cookie, monotonicMs(), kLongTtl);
  CAPTURE(second.position);
  CAPTURE(third.position);
  CHECK(v2.raw_position <= second.position);
  CHECK(v3.raw_position <= third.position);
  seg->pages().release(0);
  dropBoard(board);
}

TEST_CASE("concurrent first requests of one pass create one entry and respect its cap") {
  constexpr int kChildren = 4;
  constexpr int kRounds = 50;
  constexpr int32_t kPassCap = 2;
  Geometry g = testGeometry();
  g.pass_table_size = 1024;
  auto seg = ruledSegment(g, 10, 10);
  Board* board = makeBoard();
  Children children;
  std::vector<pid_t> pids;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = forkChild();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      for (int round = 0; round < kRounds; ++round) {
        uint8_t id[16] = {0x11, static_cast<uint8_t>(round), 0x22};
        // Start together: everyone waits for the round's gate.
        while (board->issued.load() < static_cast<uint64_t>(round) + 1) sched_yield();
        PassHold hold;
        const PassAcquire r =
            seg->passes().tryAcquire(id, PassProto::H2, kPassCap, static_cast<WorkerSlot>(c), 0, &hold);
        if (r == PassAcquire::Acquired) raiseMax(board->max_pass, board->in_pass.fetch_add(1) + 1);
        if (r == PassAcquire::TableFull) board->violations.fetch_add(1);
        board->admitted.fetch_add(1);                       // "arrived"
        while (board->stop.load() <= round) sched_yield();  // hold until the parent has looked
        if (r == PassAcquire::Acquired) {
          board->in_pass.fetch_sub(1);
          seg->passes().release(hold, static_cast<WorkerSlot>(c), 0);
        }
        board->paused.fetch_add(1);  // "released"
      }
      _exit(0);
    }
    children.add(pid);
    pids.push_back(pid);
  }
  for (int round = 0; round < kRounds; ++round) {
    CAPTURE(round);
    board->issued.store(static_cast<uint64_t>(round) + 1);  // open the gate
    const Millis deadline = monotonicMs() + 20000;
    while (board->admitted.load() < static_cast<uint64_t>((round + 1) * kChildren) && monotonicMs() < deadline)
      sched_yield();
    REQUIRE(board->admitted.load() == static_cast<uint64_t>((round + 1) * kChildren));
    CHECK(board->in_pass.load() == kPassCap);   // exactly cap of the four got in
    CHECK(seg->passes().users() == round + 1);  // one entry per pass
    board->stop.store(round + 1);
    while (board->paused.load() < (round + 1) * kChildren && monotonicMs() < deadline) sched_yield();
    REQUIRE(board->paused.load() == (round + 1) * kChildren);
  }
  for (pid_t pid : pids) {
    int status = 0;
    CHECK(waitExit(pid, &status, 10));
    children.reaped(pid);
    CHECK(WIFEXITED(status));
  }
  CHECK(board->violations.load() == 0);
  CHECK(board->max_pass.load() <= kPassCap);
  CHECK(seg->passes().sweep(1 << 30, 1) == kRounds);
  dropBoard(board);
}

TEST_CASE("SIGKILL while passes are evicted: reclaim leaves no entry, lock or hold behind") {
  // Three workers churn acquire / release over many more passes than the
  // table holds (nearly every new pass evicts one), and one of them is
  // SIGKILLed at a random moment, reclaimed and started again, over and
  // over: killed in the middle of an eviction (entry Removing or Creating,
  // its home-bucket lock held) as often as not. Afterwards every entry can
  // be taken again and no cell is left non-zero.
  constexpr uint32_t kTable = 8;
  constexpr WorkerSlot kFirst = 1, kWorkers = 3;
  constexpr int kPasses = 64;
  constexpr Millis kKillingMs = 2500;
  Geometry g = testGeometry();
  g.pass_table_size = kTable;
  auto seg = ruledSegment(g, 10, 10);
  Board* board = makeBoard();
  Children children;
  auto start = [&](WorkerSlot slot, uint32_t seed) {
    const pid_t pid = forkChild();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::mt19937 rng(seed);
      std::vector<PassHold> held;
      while (board->stop.load() == 0) {
        if (held.size() >= 2 || (!held.empty() && rng() % 2 == 0)) {
          const size_t k = rng() % held.size();
          seg->passes().release(held[k], slot, monotonicMs());
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
          continue;
        }
        const uint8_t id[16] = {0x77, static_cast<uint8_t>(rng() % kPasses), 0x5e};
        PassHold hold;
        const PassProto proto = rng() % 2 ? PassProto::H1 : PassProto::H2;
        if (seg->passes().tryAcquire(id, proto, 2, slot, monotonicMs(), &hold) == PassAcquire::Acquired)
          held.push_back(hold);
        board->victim_ops.fetch_add(1);
      }
      for (const PassHold& hold : held) seg->passes().release(hold, slot, monotonicMs());
      _exit(0);
    }
    children.add(pid);
    seg->slots().started(slot, pid, 1, monotonicMs());
    return pid;
  };
  pid_t pids[kFirst + kWorkers] = {};
  for (WorkerSlot slot = kFirst; slot < kFirst + kWorkers; ++slot) pids[slot] = start(slot, 100 + slot);

  std::mt19937 rng(9);
  int kills = 0;
  int64_t holds_reclaimed = 0;
  for (const Millis end = monotonicMs() + kKillingMs; monotonicMs() < end; ++kills) {
    const WorkerSlot slot = kFirst + static_cast<WorkerSlot>(rng() % kWorkers);
    const uint64_t churned = board->victim_ops.load() + 1 + rng() % 500;  // let them churn a while
    const Millis limit = monotonicMs() + 5000;
    while (board->victim_ops.load() < churned && monotonicMs() < limit) sched_yield();
    REQUIRE(board->victim_ops.load() >= churned);  // nobody is stuck
    kill(pids[slot], SIGKILL);
    int status = 0;
    REQUIRE(waitpid(pids[slot], &status, 0) == pids[slot]);
    children.reaped(pids[slot]);
    REQUIRE(WIFSIGNALED(status));
    holds_reclaimed += seg->reclaimDeadWorker(slot).pass_holds;
    pids[slot] = start(slot, 1000 + static_cast<uint32_t>(kills));
  }
  board->stop.store(1);
  for (WorkerSlot slot = kFirst; slot < kFirst + kWorkers; ++slot) {
    int status = 0;
    CHECK(waitExit(pids[slot], &status, 10));
    children.reaped(pids[slot]);
    CHECK(WIFEXITED(status));
    seg->reclaimDeadWorker(slot);
  }
  const StatsSnapshot st = seg->stats().snapshot();
  MESSAGE(kills, " kills, ", board->victim_ops.load(), " acquires, ", st.pass_evicted_total, " evictions, ",
          st.pass_table_full_total, " refused, ", holds_reclaimed, " holds reclaimed");
  CHECK(kills > 10);
  CHECK(st.pass_evicted_total > 1000);

  // No cell left non-zero: every worker gave its holds back or had them reclaimed.
  for (WorkerSlot slot = 0; slot < kSlots; ++slot) CHECK(seg->reclaimDeadWorker(slot).pass_holds == 0);
  // No home-bucket lock left taken, no entry stuck Creating or Removing:
  // passes of every home come and go, then kTable of them hold the whole table.
  for (int i = 0; i < 512; ++i) {
    const uint8_t id[16] = {0x88, static_cast<uint8_t>(i), static_cast<uint8_t>(i >> 8)};
    PassHold hold;
    REQUIRE(seg->passes().tryAcquire(id, PassProto::H1, 1, 0, monotonicMs(), &hold) == PassAcquire::Acquired);
    seg->passes().release(hold, 0, monotonicMs());
  }
  PassHold fill[kTable];
  for (uint32_t i = 0; i < kTable; ++i) {
    const uint8_t id[16] = {0x99, static_cast<uint8_t>(i)};
    REQUIRE(seg->passes().tryAcquire(id, PassProto::H2, 1, 0, monotonicMs(), &fill[i]) == PassAcquire::Acquired);
  }
  CHECK(seg->passes().users() == kTable);
  const uint8_t one_more[16] = {0x99, 0xff};
  PassHold extra;
  CHECK(seg->passes().tryAcquire(one_more, PassProto::H1, 1, 0, monotonicMs(), &extra) == PassAcquire::TableFull);
  for (const PassHold& hold : fill) seg->passes().release(hold, 0, monotonicMs());
  dropBoard(board);
}

TEST_CASE("a release in one process wakes a worker parked in another") {
  auto seg = ruledSegment(testGeometry(), 1, 1);
  REQUIRE(seg->pages().tryAcquire(0));
  Board* board = makeBoard();
  Children children;
  const pid_t pid = forkChild();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The guard's protocol: register, retry once, then park on the eventfd.
    seg->slots().setWaiting(1, Resource::PageSlot, true);
    if (!seg->pages().tryAcquire(1)) {
      pollfd p{seg->slots().eventFd(1), POLLIN, 0};
      board->paused.store(1);
      if (::poll(&p, 1, 20000) != 1) _exit(2);
      uint64_t n;
      if (read(seg->slots().eventFd(1), &n, sizeof(n)) != sizeof(n)) _exit(3);
      if (!seg->pages().tryAcquire(1)) _exit(4);
    }
    seg->slots().setWaiting(1, Resource::PageSlot, false);
    seg->pages().release(1);
    _exit(0);
  }
  children.add(pid);
  for (int i = 0; i < 2000000 && board->paused.load() == 0; ++i) sched_yield();
  CHECK(board->paused.load() == 1);
  seg->pages().release(0);
  int status = 0;
  CHECK(waitExit(pid, &status, 20));
  children.reaped(pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(seg->pages().occupancy() == 0);
  dropBoard(board);
}

TEST_CASE("wake-ups hammered across two processes: none is lost") {
  // The parent changes shared state, then wakes (as every release does),
  // over and over with random gaps, for a bounded time. The child waits on
  // its eventfd and, woken, consumes the wake-up as Worker::onWake does
  // (WorkerSlots::consumeWake), then reads the state again (its recheck).
  // At the end the parent makes one last change and wakes once more: the
  // child must see it. Consumed in the wrong order (wake_pending lowered
  // before the read), a wake-up landing between the two is swallowed by the
  // read and leaves the flag up over an empty eventfd; from then on every
  // wake-up skips its write, and the child waits in vain.
  constexpr Millis kHammerMs = 1500;
  constexpr WorkerSlot kChild = 1;
  constexpr int kStuckMs = 2000;  // generous: a wake-up arrives within microseconds
  auto seg = ruledSegment(testGeometry(), 1, 1);
  Board* board = makeBoard();
  Children children;
  const pid_t pid = forkChild();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = seg->slots().eventFd(kChild);
    seg->slots().setWaiting(kChild, Resource::PassSlot, true);  // register, then check the state
    uint64_t seen = board->produced.load();
    board->seen.store(seen);
    board->go.store(1);
    // Until the parent has stopped and every change it made is seen.
    for (uint64_t turn = 0; board->stop.load() == 0 || seen != board->produced.load(); ++turn) {
      // Half the turns asleep in poll, half spinning on it first (as a worker
      // with -busy-poll does): the consume then starts at different moments.
      pollfd p{fd, POLLIN, 0};
      int ready = 0;
      for (int spin = 0; turn % 2 == 1 && spin < 4096 && ready == 0; ++spin) ready = ::poll(&p, 1, 0);
      if (ready == 0) ready = ::poll(&p, 1, kStuckMs);
      if (ready != 1) _exit(2);  // waited in vain
      board->woken.fetch_add(1);
      seg->slots().consumeWake(kChild);  // what Worker::onWake does, then its recheck:
      seen = board->produced.load();
      board->seen.store(seen);
    }
    _exit(0);
  }
  children.add(pid);
  const Millis start = monotonicMs();
  while (board->go.load() == 0 && monotonicMs() < start + kStuckMs) sched_yield();
  REQUIRE(board->go.load() == 1);
  std::mt19937 rng(42);
  std::atomic<uint32_t> spin{0};
  uint64_t changes = 0;
  for (const Millis end = monotonicMs() + kHammerMs; monotonicMs() < end;) {
    board->produced.fetch_add(1);
    seg->slots().wake(Resource::PassSlot);
    ++changes;
    // Mostly short gaps (wake-ups landing while the child consumes), now
    // and then a long one (the child goes back to sleep).
    const uint32_t gap = rng() % 16 == 0 ? rng() % 65536 : rng() % 512;
    for (uint32_t i = 0; i < gap; ++i) spin.fetch_add(1, std::memory_order_relaxed);
    if (changes % 1024 == 0) sched_yield();
  }
  board->stop.store(1);
  board->produced.fetch_add(1);
  seg->slots().wake(Resource::PassSlot);
  const uint64_t last = board->produced.load();
  const Millis deadline = monotonicMs() + kStuckMs + 1000;
  while (board->seen.load() != last && monotonicMs() < deadline) sched_yield();
  CAPTURE(changes);
  CAPTURE(board->woken.load());
  CHECK(board->seen.load() == last);  // the last change was seen: no wake-up was lost for good
  int status = 0;
  CHECK(waitExit(pid, &status, 10));
  children.reaped(pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(board->woken.load() > 10);  // the child was woken through its eventfd, again and again
  dropBoard(board);
}

namespace {

constexpr int64_t kUnixNow = 1'700'000'000;  // revocations are in Unix seconds

struct PassIdBytes {
  uint8_t bytes[16];
  PassIdBytes(uint32_t n, uint8_t tag) {
    std::memset(bytes, 0, sizeof(bytes));
    std::memcpy(bytes, &n, sizeof(n));
    bytes[8] = tag;
  }
};

}  // namespace

TEST_CASE("a revocation written by one process is seen by every other, while others write") {
  constexpr int kWriters = 3;
  constexpr uint32_t kIds = 1000;
  Geometry g = testGeometry();
  g.revocation_table_size = 16384;
  auto seg = ruledSegment(g, 10, 10);
  Board* board = makeBoard();
  Children children;
  std::vector<pid_t> pids;
  // Writers: each revokes its own ids, in order, and publishes how far it got
  // (current[w]) only after revoke() returned.
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = forkChild();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      while (board->go.load() == 0) sched_yield();
      for (uint32_t i = 0; i < kIds; ++i) {
        const RevokeOutcome o = seg->revocations().revoke(PassIdBytes(i, static_cast<uint8_t>(w + 1)).bytes,
                                                          kUnixNow + 600, kUnixNow, static_cast<WorkerSlot>(w));
        if (o != RevokeOutcome::Added) board->violations.fetch_add(1);
        board->current[w].store(i + 1);
      }
      _exit(0);
    }
    children.add(pid);
    pids.push_back(pid);
  }
  // A reader in another process: everything a writer has published is
  // revoked there; an id nobody revoked never is.
  const pid_t reader = forkChild();
  REQUIRE(reader >= 0);
  if (reader == 0) {
    while (board->go.load() == 0) sched_yield();
    uint64_t done = 0;
    while (done < kWriters) {
      done = 0;
      for (int w = 0; w < kWriters; ++w) {
        const uint64_t published = board->current[w].load();
        if (published == kIds) ++done;
        for (uint64_t i = published > 8 ? published - 8 : 0; i < published; ++i)
          if (!seg->revocations().revoked(PassIdBytes(static_cast<uint32_t>(i), static_cast<uint8_t>(w + 1)).bytes,
                                          kUnixNow))
            board->lost.fetch_add(1);
        if (seg->revocations().revoked(PassIdBytes(static_cast<uint32_t>(published), 0xee).bytes, kUnixNow))
          board->violations.fetch_add(1);
      }
      board->victim_ops.fetch_add(1);
    }
    _exit(0);
  }
  children.add(reader);
  pids.push_back(reader);
  board->go.store(1);
  for (pid_t pid : pids) {
    int status = 0;
    CHECK(waitExit(pid, &status, 30));
    children.reaped(pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(board->violations.load() == 0);
  CHECK(board->lost.load() == 0);
  CHECK(board->victim_ops.load() > 0);
  // And in the parent, a third process: every one of them, until its until.
  for (int w = 0; w < kWriters; ++w)
    for (uint32_t i = 0; i < kIds; ++i) {
      const PassIdBytes id(i, static_cast<uint8_t>(w + 1));
      REQUIRE(seg->revocations().revoked(id.bytes, kUnixNow + 599));
      REQUIRE_FALSE(seg->revocations().revoked(id.bytes, kUnixNow + 600));
    }
  CHECK(seg->revocations().active(kUnixNow) == kWriters * kIds);
  CHECK(seg->revocations().writing() == 0);
  dropBoard(board);
}

// Stops `victim` (which revokes in a loop) at random moments until it is
// caught holding an entry (Writing or Raising), then SIGKILLs it there.
// False if it was never caught; the victim is dead and reaped either way.
bool killMidRevoke(Segment& seg, pid_t victim, Children& children) {
  std::mt19937 rng(11);
  bool caught = false;
  for (int attempt = 0; attempt < 20000 && !caught; ++attempt) {
    if (kill(victim, SIGSTOP) != 0) break;
    int status = 0;
    if (waitpid(victim, &status, WUNTRACED) != victim || !WIFSTOPPED(status)) break;
    caught = seg.revocations().writing() == 1;
    if (caught) break;
    kill(victim, SIGCONT);
    const timespec pause{0, static_cast<long>(rng() % 50) * 1000};  // let it run 0-50 us
    nanosleep(&pause, nullptr);
  }
  kill(victim, SIGKILL);
  int status = 0;
  const bool exited = waitExit(victim, &status, 20);
  children.reaped(victim);
  return caught && exited && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

TEST_CASE("a worker killed while raising a revocation: reclaim puts the entry back, the table stays valid") {
  constexpr WorkerSlot kParentSlot = 0, kVictimSlot = 3;
  constexpr uint32_t kIds = 2000;
  Geometry g = testGeometry();
  g.revocation_table_size = 4096;
  auto seg = ruledSegment(g, 10, 10);
  Board* board = makeBoard();
  // The parent's own revocations, which must survive the reclaim.
  for (uint32_t i = 0; i < 100; ++i)
    REQUIRE(seg->revocations().revoke(PassIdBytes(i, 0xaa).bytes, kUnixNow + 900, kUnixNow, kParentSlot) ==
            RevokeOutcome::Added);
  Children children;
  const pid_t victim = forkChild();
  REQUIRE(victim >= 0);
  if (victim == 0) {
    // kIds new ids, then the same ids again and again with later untils
    // (raised in place); victim_ops counts revokes that returned.
    for (uint64_t n = 0;; ++n) {
      const uint32_t i = static_cast<uint32_t>(n % kIds);
      seg->revocations().revoke(PassIdBytes(i, 0x01).bytes, kUnixNow + 600 + static_cast<int64_t>(n / kIds), kUnixNow,
                                kVictimSlot);
      board->victim_ops.store(n + 1);
    }
  }
  children.add(victim);
  seg->slots().started(kVictimSlot, victim, 1, monotonicMs());
  for (int i = 0; i < 20000 && board->victim_ops.load() < 3 * kIds; ++i) sleepMs(1);
  REQUIRE(board->victim_ops.load() >= 3 * kIds);  // from here on it only raises
  REQUIRE(killMidRevoke(*seg, victim, children));

  const ReclaimReport report = seg->reclaimDeadWorker(kVictimSlot);
  CHECK(report.revocation_writes == 1);
  CHECK(report.total() == 0);  // a revocation being written is not a hold
  CHECK(seg->revocations().writing() == 0);
  // Every id the victim revoked is in force (the one it was raising with its
  // old or its new until), and so is everything of the parent.
  for (uint32_t i = 0; i < kIds; ++i) REQUIRE(seg->revocations().revoked(PassIdBytes(i, 0x01).bytes, kUnixNow + 601));
  for (uint32_t i = 0; i < 100; ++i) REQUIRE(seg->revocations().revoked(PassIdBytes(i, 0xaa).bytes, kUnixNow + 899));
  CHECK_FALSE(seg->revocations().revoked(PassIdBytes(kIds, 0x01).bytes, kUnixNow));
  CHECK(seg->revocations().active(kUnixNow) == kIds + 100);
  // The table goes on: the victim's ids raised again in place, new ids
  // added, none displacing another.
  for (uint32_t i = 0; i < kIds; ++i)
    REQUIRE(seg->revocations().revoke(PassIdBytes(i, 0x01).bytes, kUnixNow + 100000, kUnixNow, kParentSlot) ==
            RevokeOutcome::Extended);
  for (uint32_t i = 0; i < 1000; ++i) {
    const PassIdBytes id(i, 0xbb);
    REQUIRE(seg->revocations().revoke(id.bytes, kUnixNow + 600, kUnixNow, kParentSlot) == RevokeOutcome::Added);
    REQUIRE(seg->revocations().revoked(id.bytes, kUnixNow));
  }
  CHECK(seg->revocations().active(kUnixNow) == kIds + 100 + 1000);
  CHECK(seg->revocations().writing() == 0);
  dropBoard(board);
}

TEST_CASE("a worker killed while writing a new revocation: reclaim frees the half-written entry") {
  constexpr WorkerSlot kParentSlot = 0, kVictimSlot = 3;
  constexpr uint64_t kPerSecond = 500;  // revocations per simulated second
  Geometry g = testGeometry();
  g.revocation_table_size = 4096;
  auto seg = ruledSegment(g, 10, 10);
  Board* board = makeBoard();
  for (uint32_t i = 0; i < 100; ++i)
    REQUIRE(seg->revocations().revoke(PassIdBytes(i, 0xaa).bytes, kUnixNow + 1'000'000'000, kUnixNow, kParentSlot) ==
            RevokeOutcome::Added);
  Children children;
  const pid_t victim = forkChild();
  REQUIRE(victim >= 0);
  if (victim == 0) {
    // A new id every time, revoked for one simulated second while the clock
    // moves a second every kPerSecond revocations: entries keep running out
    // and being reused, so the victim is nearly always writing a new id.
    for (uint64_t n = 0;; ++n) {
      const int64_t now = kUnixNow + static_cast<int64_t>(n / kPerSecond);
      const RevokeOutcome o =
          seg->revocations().revoke(PassIdBytes(static_cast<uint32_t>(n), 0x02).bytes, now + 1, now, kVictimSlot);
      if (o != RevokeOutcome::Added) board->violations.fetch_add(1);
      board->victim_ops.store(n + 1);
    }
  }
  children.add(victim);
  seg->slots().started(kVictimSlot, victim, 1, monotonicMs());
  for (int i = 0; i < 20000 && board->victim_ops.load() < 20 * kPerSecond; ++i) sleepMs(1);
  REQUIRE(board->victim_ops.load() >= 20 * kPerSecond);
  REQUIRE(killMidRevoke(*seg, victim, children));
  CHECK(board->violations.load() == 0);

  const uint64_t done = board->victim_ops.load();
  const ReclaimReport report = seg->reclaimDeadWorker(kVictimSlot);
  CHECK(report.revocation_writes == 1);
  CHECK(seg->revocations().writing() == 0);
  // The last revocation that returned is in force at its own time; the one
  // being written (number `done`) is lost, half-written id and all; the
  // parent's are untouched.
  const int64_t last_now = kUnixNow + static_cast<int64_t>((done - 1) / kPerSecond);
  CHECK(seg->revocations().revoked(PassIdBytes(static_cast<uint32_t>(done - 1), 0x02).bytes, last_now));
  CHECK_FALSE(seg->revocations().revoked(PassIdBytes(static_cast<uint32_t>(done), 0x02).bytes, last_now));
  for (uint32_t i = 0; i < 100; ++i) REQUIRE(seg->revocations().revoked(PassIdBytes(i, 0xaa).bytes, last_now + 10));
  // A while later every victim entry has run out and is taken again.
  const int64_t later = last_now + 10;
  CHECK(seg->revocations().active(later) == 100);
  for (uint32_t i = 0; i < 2000; ++i) {
    const PassIdBytes id(i, 0xcc);
    REQUIRE(seg->revocations().revoke(id.bytes, later + 600, later, kParentSlot) == RevokeOutcome::Added);
    REQUIRE(seg->revocations().revoked(id.bytes, later));
  }
  CHECK(seg->revocations().active(later) == 2100);
  CHECK(seg->revocations().writing() == 0);
  dropBoard(board);
}

// ------------------------------------------------------------ client table
namespace {

// An IPv4 client as the caller keys it: IPv4-mapped IPv6.
ClientTicketing clientKey(uint32_t n, int32_t max_per_client = 0) {
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

bool reapAll(std::vector<pid_t>& pids, Children& children, int seconds) {
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    ok = waitExit(pid, &status, seconds) && ok;
    children.reaped(pid);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

}  // namespace

TEST_CASE("processes striking one client at once: every strike counted, exactly one ban, its tickets gone") {
  constexpr int kChildren = 4;
  constexpr int kStrikes = 400;
  auto seg = ruledSegment(testGeometry(), 1, 10);
  Board* board = makeBoard();
  const ClientTicketing target = clientKey(1);
  AbusePolicy policy;
  policy.threshold = kChildren * kStrikes / 2;
  // The target holds tickets in a full room, among another client's.
  REQUIRE(seg->pages().tryAcquire(kSlots - 1));
  const Millis now = monotonicMs();
  std::vector<Issued> others;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(seg->tickets().issue(kSlots - 1, 0, now, &target).outcome == IssueOutcome::Queued);
    const ClientTicketing other = clientKey(2);
    others.push_back(seg->tickets().issue(kSlots - 1, 0, now, &other));
    REQUIRE(others.back().outcome == IssueOutcome::Queued);
  }
  Children children;
  std::vector<pid_t> pids;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = forkChild();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      while (board->go.load() == 0) sched_yield();
      for (int i = 0; i < kStrikes; ++i) {
        // Weights 1 and 5, as the callers give them; the same total from every child.
        const int weight = i % 2 == 0 ? 1 : 5;
        const StrikeOutcome o = seg->strike(target.key, weight, policy, now, static_cast<WorkerSlot>(c));
        if (!o.recorded) board->violations.fetch_add(1);
        if (o.banned_now) board->bans.fetch_add(1);
        seg->clients().banned(target.key, now);
      }
      // Once every child is done, every one of them sees the ban.
      board->admitted.fetch_add(1);
      while (board->admitted.load() < kChildren) sched_yield();
      if (!seg->clients().banned(target.key, now)) board->violations.fetch_add(1);
      _exit(0);
    }
    children.add(pid);
    pids.push_back(pid);
  }
  board->go.store(1);
  CHECK(reapAll(pids, children, 30));
  CHECK(board->violations.load() == 0);
  CHECK(board->bans.load() == 1);
  const StatsSnapshot st = seg->stats().snapshot(now);
  CHECK(st.abuse_strikes_total == static_cast<uint64_t>(kChildren * kStrikes / 2 * 6));
  CHECK(st.abuse_bans_total == 1);
  CHECK(st.banned_clients == 1);
  CHECK(st.client_table_full_total == 0);
  CHECK(seg->clients().banned(target.key, now));
  CHECK(seg->clients().liveTickets(target.key) == 0);
  CHECK(seg->tickets().queueDepth() == 3);  // the other client's, moved up
  for (size_t i = 0; i < others.size(); ++i)
    CHECK(seg->tickets().render(others[i].cookie, now, kLongTtl).raw_position == static_cast<int64_t>(i) + 1);
  CHECK(seg->clients().writing() == 0);
  seg->pages().release(kSlots - 1);
  dropBoard(board);
}

TEST_CASE("processes issuing for one client with a limit: never more live tickets than the limit") {
  constexpr int kChildren = 4;
  constexpr int kRounds = 1000;
  constexpr int32_t kLimit = 3;
  Geometry g = testGeometry();
  g.client_table_size = 64;  // small: the other clients evict one another around the target's entry
  auto seg = ruledSegment(g, 1, 10);
  REQUIRE(seg->pages().tryAcquire(kSlots - 1));  // a full room: every ticket waits
  Board* board = makeBoard();
  const ClientTicketing target = clientKey(1, kLimit);
  Children children;
  std::vector<pid_t> pids;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = forkChild();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const WorkerSlot slot = static_cast<WorkerSlot>(c);
      while (board->go.load() == 0) sched_yield();
      for (int i = 0; i < kRounds; ++i) {
        // Up to two of the target's tickets at once; in_line counts those
        // issued and not yet retired, a subset of its live tickets.
        uint64_t mine[2] = {0, 0};
        for (uint64_t& ticket : mine) {
          const Issued q = seg->tickets().issue(slot, 0, monotonicMs(), &target);
          if (q.outcome == IssueOutcome::ClientLimit) board->claim_failures.fetch_add(1);
          if (q.outcome != IssueOutcome::Queued) continue;
          ticket = q.cookie.ticket;
          board->issued.fetch_add(1);
          raiseMax(board->max_page, board->in_line.fetch_add(1) + 1);
        }
        const ClientTicketing other = clientKey(1000 + static_cast<uint32_t>(c * kRounds + i));
        const Issued o = seg->tickets().issue(slot, 0, monotonicMs(), &other);
        if (o.outcome == IssueOutcome::Queued) seg->tickets().retire(o.cookie.ticket, false);
        for (uint64_t ticket : mine) {
          if (ticket == 0) continue;
          board->in_line.fetch_sub(1);
          seg->tickets().retire(ticket, false);
        }
      }
      board->paused.fetch_add(1);  // done
      _exit(0);
    }
    children.add(pid);
    pids.push_back(pid);
    seg->slots().started(static_cast<WorkerSlot>(c), pid, 1, monotonicMs());
  }
  board->go.store(1);
  // Meanwhile the parent is the master: sampling the count and running the
  // janitor, whose recount must never mend a count that is only in flight.
  int64_t repaired = 0, max_live = 0;
  const Millis deadline = monotonicMs() + 60000;
  while (board->paused.load() < kChildren && monotonicMs() < deadline) {
    max_live = std::max(max_live, seg->clients().liveTickets(target.key));
    repaired += seg->tickets().sweep(monotonicMs(), SweepLimits{}).clients_repaired;
    sleepMs(1);
  }
  CHECK(reapAll(pids, children, 30));
  MESSAGE(board->issued.load(), " tickets for the client, ", board->claim_failures.load(), " refused at the limit, ",
          max_live, " live at most");
  CHECK(board->max_page.load() <= kLimit);
  CHECK(max_live <= kLimit);
  CHECK(repaired == 0);
  CHECK(board->issued.load() > 0);
  CHECK(seg->clients().liveTickets(target.key) == 0);
  CHECK(seg->tickets().queueDepth() == 0);
  CHECK(seg->clients().writing() == 0);
  CHECK(seg->stats().snapshot().client_table_full_total == 0);
  seg->pages().release(kSlots - 1);
  dropBoard(board);
}

TEST_CASE("a worker killed inside issue() for a client leaves its count one high; the janitor mends it after 60 s") {
  constexpr WorkerSlot kParentSlot = 0, kVictimSlot = 2;
  auto seg = ruledSegment(testGeometry(), 1, 10);
  REQUIRE(seg->pages().tryAcquire(kParentSlot));  // a full room
  const ClientTicketing target = clientKey(5, 1);
  Children children;
  const pid_t victim = forkChild();
  REQUIRE(victim >= 0);
  if (victim == 0) {
    // The count is taken before the ring entry is reserved and the tag is
    // written after the nonce is drawn: the kill falls between the two.
    g_getrandom_hook = [] { raise(SIGKILL); };
    seg->tickets().issue(kVictimSlot, 0, monotonicMs(), &target);
    _exit(3);
  }
  children.add(victim);
  seg->slots().started(kVictimSlot, victim, 1, monotonicMs());
  int status = 0;
  REQUIRE(waitExit(victim, &status, 20));
  children.reaped(victim);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGKILL);

  const ReclaimReport report = seg->reclaimDeadWorker(kVictimSlot);
  CHECK(report.tickets_finished == 1);
  CHECK(seg->tickets().queueDepth() == 0);
  // One live ticket counted, none in the line: the limit of 1 refuses.
  CHECK(seg->clients().liveTickets(target.key) == 1);
  const Millis now = monotonicMs();
  CHECK(seg->tickets().issue(kParentSlot, 0, now, &target).outcome == IssueOutcome::ClientLimit);
  // The janitor waits for 60 s without a change before it believes the recount.
  CHECK(seg->tickets().sweep(now, SweepLimits{}).clients_repaired == 0);
  CHECK(seg->tickets().sweep(now + 30000, SweepLimits{}).clients_repaired == 0);
  CHECK(seg->tickets().sweep(now + 59000, SweepLimits{}).clients_repaired == 0);
  CHECK(seg->clients().liveTickets(target.key) == 1);
  CHECK(seg->tickets().sweep(now + 60000, SweepLimits{}).clients_repaired == 1);
  CHECK(seg->clients().liveTickets(target.key) == 0);
  const Issued again = seg->tickets().issue(kParentSlot, 0, now + 60000, &target);
  CHECK(again.outcome == IssueOutcome::Queued);
  CHECK(seg->clients().liveTickets(target.key) == 1);
  // A right count is left alone, however long it stays.
  CHECK(seg->tickets().sweep(now + 200000, SweepLimits{}).clients_repaired == 0);
  CHECK(seg->clients().liveTickets(target.key) == 1);
  seg->tickets().retire(again.cookie.ticket, false);
  CHECK(seg->clients().liveTickets(target.key) == 0);
  seg->pages().release(kParentSlot);
}

TEST_CASE("a worker killed while writing a client entry: reclaim releases the entry and the lock") {
  constexpr WorkerSlot kParentSlot = 0, kVictimSlot = 3;
  constexpr uint32_t kTable = 64;
  Geometry g = testGeometry();
  g.client_table_size = kTable;
  auto seg = ruledSegment(g, 1, 10);
  Board* board = makeBoard();
  const Millis now = monotonicMs();
  AbusePolicy never;
  never.threshold = 1 << 30;
  // The parent's banned client, which must stay banned.
  AbusePolicy once;
  once.threshold = 1;
  const ClientTicketing banned = clientKey(99999);
  REQUIRE(seg->strike(banned.key, 1, once, now, kParentSlot).banned_now);
  Children children;
  const pid_t victim = forkChild();
  REQUIRE(victim >= 0);
  if (victim == 0) {
    // Strikes over many more clients than the table holds: creations,
    // evictions and updates, one after another.
    for (uint64_t n = 0;; ++n) {
      seg->strike(clientKey(static_cast<uint32_t>(n % 1000)).key, 1, never, now, kVictimSlot);
      board->victim_ops.store(n + 1);
    }
  }
  children.add(victim);
  seg->slots().started(kVictimSlot, victim, 1, monotonicMs());
  for (int i = 0; i < 20000 && board->victim_ops.load() < 2000; ++i) sleepMs(1);
  REQUIRE(board->victim_ops.load() >= 2000);
  // Stop it at random moments until it is caught holding an entry or a
  // lock, then SIGKILL it there.
  std::mt19937 rng(5);
  bool caught = false;
  for (int attempt = 0; attempt < 20000 && !caught; ++attempt) {
    if (kill(victim, SIGSTOP) != 0) break;
    int status = 0;
    if (waitpid(victim, &status, WUNTRACED) != victim || !WIFSTOPPED(status)) break;
    caught = seg->clients().writing() > 0;
    if (caught) break;
    kill(victim, SIGCONT);
    const timespec pause{0, static_cast<long>(rng() % 50) * 1000};
    nanosleep(&pause, nullptr);
  }
  kill(victim, SIGKILL);
  int status = 0;
  REQUIRE(waitExit(victim, &status, 20));
  children.reaped(victim);
  REQUIRE(caught);

  const ReclaimReport report = seg->reclaimDeadWorker(kVictimSlot);
  CHECK(report.client_writes >= 1);
  CHECK(report.total() == 0);  // an entry being written is not a hold
  CHECK(seg->clients().writing() == 0);
  CHECK(seg->clients().banned(banned.key, now));
  // The table goes on: new clients get entries (evicting idle ones), and
  // strikes and tickets are counted for them.
  for (uint32_t i = 0; i < 3 * kTable; ++i) {
    const ClientTicketing c = clientKey(50000 + i);
    const StrikeOutcome o = seg->strike(c.key, 1, never, now + 1000, kParentSlot);
    REQUIRE(o.recorded);
    REQUIRE(o.strikes == 1);
  }
  const ClientTicketing fresh = clientKey(70000, 2);
  const Issued t = seg->tickets().issue(kParentSlot, 0, now + 2000, &fresh);
  REQUIRE(t.outcome == IssueOutcome::Queued);
  CHECK(seg->clients().liveTickets(fresh.key) == 1);
  CHECK(seg->clients().banned(banned.key, now + 2000));
  CHECK(seg->clients().tracked() <= kTable);
  CHECK(seg->clients().writing() == 0);
  CHECK(seg->stats().snapshot().client_table_full_total == 0);
  dropBoard(board);
}
