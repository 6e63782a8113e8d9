// Multi-process tests of the shared-memory core: real processes forked over
// one real mapping, hammering the ticket ring, the semaphores and the pass
// table, and being SIGKILLed mid-operation.
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include "common/clock.h"
#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

constexpr uint32_t kRing = 1u << 12;
constexpr uint64_t kMaxTickets = 1u << 16;
constexpr Millis kLongTtl = 10LL * 24 * 3600 * 1000;  // never expires in a test

// Test bookkeeping shared by the parent and its children.
struct Board {
  std::atomic<int64_t> in_page;   // incremented after a page acquire, decremented before release
  std::atomic<int64_t> in_asset;  // same for the asset semaphore
  std::atomic<int64_t> in_pass;   // same for the shared pass
  std::atomic<int64_t> max_page, max_asset, max_pass;
  std::atomic<uint64_t> violations;  // FIFO or cap violations seen by children
  std::atomic<uint64_t> issued, admitted;
  std::atomic<int> pause_request, paused;
  std::atomic<int> stop;
  std::atomic<uint8_t> finished[kMaxTickets];  // marked before finish()
};

Board* makeBoard() {
  void* p = mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  return static_cast<Board*>(p);  // zero pages: every atomic starts at 0
}

void dropBoard(Board* board) {
  munmap(board, sizeof(Board));
}

void raiseMax(std::atomic<int64_t>& max, int64_t value) {
  int64_t seen = max.load();
  while (value > seen && !max.compare_exchange_weak(seen, value)) {
  }
}

const uint8_t kSharedPass[16] = {0xc0, 0x4c, 0xe2, 0x7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

// FIFO check at admission: fewer than `cap` tickets ahead of t may be
// unfinished. Tickets are marked finished before finish() is called, so the
// board never shows more unfinished tickets than the segment has.
bool fifoHolds(const Board& board, uint64_t ticket, int64_t cap) {
  int64_t unfinished = 0;
  const uint64_t from = ticket > kRing ? ticket - kRing : 1;
  for (uint64_t u = from; u < ticket; ++u)
    if (board.finished[u].load() == 0) ++unfinished;
  return unfinished < cap;
}

// One full page request: ticket, window, page slot, asset slot, pass hold,
// release everything. `strict`: nothing in the test abandons tickets, so a
// refused ticket is a violation and the FIFO window is checked; otherwise a
// refused or evicted ticket just ends the cycle (returns false).
bool pageCycle(Segment& seg, Board& board, WorkerSlot slot, int32_t cap, int32_t pass_cap, std::mt19937& rng,
               bool strict) {
  const Millis now = monotonicMs();
  const Issued issued = seg.tickets().issue(slot, 0, now);
  if (issued.outcome != IssueOutcome::Ready && issued.outcome != IssueOutcome::Queued) {
    if (strict) board.violations.fetch_add(1);
    return false;
  }
  board.issued.fetch_add(1);
  const uint64_t ticket = issued.cookie.ticket;
  if (issued.outcome == IssueOutcome::Queued) {
    for (int spins = 0; !seg.tickets().claim(issued.cookie, slot); ++spins) {
      if (spins % 64 == 0) {
        const TicketState state = seg.tickets().render(issued.cookie, monotonicMs(), kLongTtl).state;
        if (state == TicketState::Unknown || state == TicketState::Expired) {
          if (strict) board.violations.fetch_add(1);
          return false;
        }
      }
      sched_yield();
    }
  }
  if (strict && !fifoHolds(board, ticket, cap)) board.violations.fetch_add(1);
  while (!seg.pages().tryAcquire(slot)) sched_yield();
  raiseMax(board.max_page, board.in_page.fetch_add(1) + 1);
  board.admitted.fetch_add(1);

  const bool asset = rng() % 2 == 0 && seg.assets().tryAcquire(slot);
  if (asset) raiseMax(board.max_asset, board.in_asset.fetch_add(1) + 1);
  PassHold hold;
  const bool pass = rng() % 2 == 0 && seg.passes().tryAcquire(kSharedPass, PassProto::H1, pass_cap, slot, now, &hold) ==
                                          PassAcquire::Acquired;
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
  seg.pages().release(slot);
  if (strict) board.finished[ticket].store(1);
  seg.tickets().finish(ticket, slot);
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
    timespec ts{0, 10 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
  kill(pid, SIGKILL);
  waitpid(pid, status, 0);
  return false;
}

Geometry testGeometry() {
  Geometry g;
  g.ring_size = kRing;
  g.worker_slots = 8;
  g.pass_table_size = 64;
  return g;
}

}  // namespace

TEST_CASE("four processes hammer one segment: caps hold, FIFO window holds, no ticket is lost") {
  constexpr int kChildren = 4;
  constexpr int kCycles = 1500;
  constexpr int32_t kCap = 3, kAssetCap = 2, kPassCap = 2;
  auto seg = Segment::create(testGeometry(), kCap, kAssetCap);
  Board* board = makeBoard();
  Children children;

  std::vector<pid_t> pids;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = forkChild();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::mt19937 rng(static_cast<unsigned>(c + 1));
      for (int i = 0; i < kCycles; ++i) pageCycle(*seg, *board, static_cast<WorkerSlot>(c), kCap, kPassCap, rng, true);
      _exit(0);
    }
    children.add(pid);
    seg->slots().started(static_cast<WorkerSlot>(c), pid, 1, monotonicMs());
    pids.push_back(pid);
  }

  // Sampler: the segment's own view never exceeds the caps either (the
  // board counters already prove the guarantee from the callers' side).
  int running = kChildren;
  int64_t samples = 0;
  std::vector<bool> done(kChildren, false);
  const Millis deadline = monotonicMs() + 45000;
  while (running > 0 && monotonicMs() < deadline) {
    CHECK(board->in_page.load() <= kCap);
    CHECK(board->in_asset.load() <= kAssetCap);
    CHECK(board->in_pass.load() <= kPassCap);
    ++samples;
    for (int c = 0; c < kChildren; ++c) {
      int status = 0;
      if (!done[c] && waitpid(pids[c], &status, WNOHANG) == pids[c]) {
        children.reaped(pids[c]);
        done[c] = true;
        --running;
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
      }
    }
    sched_yield();
  }
  for (int c = 0; c < kChildren; ++c) {
    int status;
    if (!done[c]) CHECK(waitExit(pids[c], &status, 1));
    children.reaped(pids[c]);
  }
  REQUIRE(running == 0);

  CHECK(samples > 0);
  CHECK(board->violations.load() == 0);
  CHECK(board->max_page.load() <= kCap);
  CHECK(board->max_asset.load() <= kAssetCap);
  CHECK(board->max_pass.load() <= kPassCap);
  CHECK(board->issued.load() == kChildren * kCycles);
  CHECK(board->admitted.load() == kChildren * kCycles);
  // No lost ticket: every number issued was finished, nothing is left.
  for (uint64_t t = 1; t <= kChildren * kCycles; ++t) REQUIRE(board->finished[t].load() == 1);
  CHECK(seg->tickets().queueDepth() == 0);
  CHECK(seg->tickets().liveQueueDepth() == 0);
  CHECK(seg->pages().occupancy() == 0);
  CHECK(seg->assets().occupancy() == 0);
  const Issued next = seg->tickets().issue(0, 0, monotonicMs());
  CHECK(next.outcome == IssueOutcome::Ready);
  CHECK(next.cookie.ticket == kChildren * kCycles + 1);
  seg->tickets().finish(next.cookie.ticket, 0);
  for (int i = 0; i < kCap; ++i) CHECK(seg->pages().tryAcquire(0));
  dropBoard(board);
}

TEST_CASE("SIGKILL mid-operation: reclaim returns exactly what the dead worker held") {
  constexpr int32_t kCap = 6, kAssetCap = 3, kPassCap = 3;
  constexpr WorkerSlot kParentSlot = 0, kSurvivorSlot = 1, kVictimSlot = 2;
  constexpr int kRounds = 40;
  constexpr Millis kTtl = 1000;
  auto seg = Segment::create(testGeometry(), kCap, kAssetCap);
  Board* board = makeBoard();

  // The parent's own holdings, which must survive every reclaim untouched:
  // one admitted request with a page slot, an asset slot and a pass hold,
  // plus two visitors waiting with cookies.
  const Issued mine = seg->tickets().issue(kParentSlot, 0, 0);
  REQUIRE(mine.outcome == IssueOutcome::Ready);
  REQUIRE(seg->pages().tryAcquire(kParentSlot));
  REQUIRE(seg->assets().tryAcquire(kParentSlot));
  PassHold my_hold;
  REQUIRE(seg->passes().tryAcquire(kSharedPass, PassProto::H1, kPassCap, kParentSlot, 0, &my_hold) ==
          PassAcquire::Acquired);
  // Two visitors with cookies: issued under a cap of 1 so that they queue,
  // then the cap opens; they stay ready-but-unclaimed (live) for good.
  seg->pages().setCap(1);
  const Issued wait1 = seg->tickets().issue(kParentSlot, 0, monotonicMs());
  const Issued wait2 = seg->tickets().issue(kParentSlot, 0, monotonicMs());
  REQUIRE(wait1.outcome == IssueOutcome::Queued);
  REQUIRE(wait2.outcome == IssueOutcome::Queued);
  seg->pages().setCap(kCap);

  // Survivor: a live worker that keeps running whole cycles while the victim
  // dies and is reclaimed; it stops (holding nothing) when asked.
  Children children;
  const pid_t survivor = forkChild();
  REQUIRE(survivor >= 0);
  if (survivor == 0) {
    std::mt19937 rng(7);
    while (board->stop.load() == 0) {
      if (board->pause_request.load() != 0) {
        board->paused.store(1);
        while (board->pause_request.load() != 0 && board->stop.load() == 0) sched_yield();
        board->paused.store(0);
        continue;
      }
      pageCycle(*seg, *board, kSurvivorSlot, kCap, kPassCap, rng, false);
    }
    _exit(0);
  }
  children.add(survivor);
  seg->slots().started(kSurvivorSlot, survivor, 1, monotonicMs());

  std::mt19937 rng(42);
  int64_t reclaimed_total = 0;
  for (int round = 0; round < kRounds; ++round) {
    CAPTURE(round);
    const pid_t victim = forkChild();
    REQUIRE(victim >= 0);
    if (victim == 0) {
      std::mt19937 vrng(static_cast<unsigned>(round) + 100);
      for (;;) {
        // A mix of everything, with holds piling up between releases.
        switch (vrng() % 4) {
          case 0: pageCycle(*seg, *board, kVictimSlot, kCap, kPassCap, vrng, false); break;
          case 1: {
            const Issued q = seg->tickets().issue(kVictimSlot, 0, monotonicMs());  // a visitor who walks away
            if (q.outcome == IssueOutcome::Ready) {
              if (seg->pages().tryAcquire(kVictimSlot)) seg->pages().release(kVictimSlot);
              seg->tickets().finish(q.cookie.ticket, kVictimSlot);
            }
            break;
          }
          case 2: {
            PassHold h;
            if (seg->passes().tryAcquire(kSharedPass, PassProto::H2, 2, kVictimSlot, 0, &h) == PassAcquire::Acquired &&
                vrng() % 2)
              seg->passes().release(h, kVictimSlot, 0);
            break;
          }
          default:
            if (seg->assets().tryAcquire(kVictimSlot) && vrng() % 2) seg->assets().release(kVictimSlot);
            break;
        }
      }
    }
    children.add(victim);
    seg->slots().started(kVictimSlot, victim, 1, monotonicMs());
    timespec ts{0, static_cast<long>(rng() % 3000) * 1000};
    nanosleep(&ts, nullptr);
    kill(victim, SIGKILL);
    int status = 0;
    REQUIRE(waitpid(victim, &status, 0) == victim);
    children.reaped(victim);
    CHECK(WIFSIGNALED(status));
    const ReclaimReport report = seg->reclaimDeadWorker(kVictimSlot);
    reclaimed_total += report.total();
    CHECK(seg->slots().pid(kVictimSlot) == 0);

    // Drop the abandoned visitors (the victim's, and the survivor's current
    // one, which it then gives up), quiesce the survivor, compare.
    const Millis later = monotonicMs() + 100 * kTtl;
    REQUIRE(seg->tickets().render(wait1.cookie, later, kLongTtl).state != TicketState::Unknown);
    REQUIRE(seg->tickets().render(wait2.cookie, later, kLongTtl).state != TicketState::Unknown);
    seg->tickets().reapExpired(later, kTtl);
    board->pause_request.store(1);
    for (int i = 0; i < 1000000 && board->paused.load() == 0; ++i) sched_yield();
    REQUIRE(board->paused.load() == 1);
    seg->tickets().reapExpired(later, kTtl);

    CHECK(seg->pages().occupancy() == 1);
    CHECK(seg->assets().occupancy() == 1);
    CHECK(seg->tickets().liveQueueDepth() == 2);
    CHECK(seg->tickets().queueDepth() == 0);  // 1 in flight + 2 waiting, inside cap 6
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
    board->pause_request.store(0);
  }

  board->stop.store(1);
  int status = 0;
  CHECK(waitExit(survivor, &status, 10));
  children.reaped(survivor);
  CHECK(WIFEXITED(status));
  CHECK(board->violations.load() == 0);
  CHECK(reclaimed_total > 0);
  CHECK(seg->stats().snapshot().slots_reclaimed_total == static_cast<uint64_t>(reclaimed_total));
  CHECK(seg->reclaimDeadWorker(kSurvivorSlot).total() == 0);

  // Give everything back: all zero, the full caps usable.
  seg->passes().release(my_hold, kParentSlot, 0);
  seg->assets().release(kParentSlot);
  seg->pages().release(kParentSlot);
  seg->tickets().finish(mine.cookie.ticket, kParentSlot);
  seg->tickets().retire(wait1.cookie.ticket, false);
  seg->tickets().retire(wait2.cookie.ticket, false);
  CHECK(seg->pages().occupancy() == 0);
  CHECK(seg->assets().occupancy() == 0);
  CHECK(seg->tickets().liveQueueDepth() == 0);
  CHECK(seg->tickets().queueDepth() == 0);
  CHECK(seg->passes().sweep(1 << 30, 1) == 1);
  CHECK(seg->passes().users() == 0);
  for (int i = 0; i < kCap; ++i) {
    const Issued t = seg->tickets().issue(kParentSlot, 0, 0);
    CHECK(t.outcome == IssueOutcome::Ready);
    CHECK(seg->pages().tryAcquire(kParentSlot));
  }
  CHECK(seg->tickets().issue(kParentSlot, 0, 0).outcome == IssueOutcome::Queued);
  for (int i = 0; i < kAssetCap; ++i) CHECK(seg->assets().tryAcquire(kParentSlot));
  dropBoard(board);
}

TEST_CASE("concurrent first requests of one pass create one entry and respect its cap") {
  constexpr int kChildren = 4;
  constexpr int kRounds = 50;
  constexpr int32_t kPassCap = 2;
  Geometry g = testGeometry();
  g.pass_table_size = 1024;
  auto seg = Segment::create(g, 10, 10);
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
    CHECK(board->in_pass.load() == kPassCap);  // exactly cap of the four got in
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

TEST_CASE("a release in one process wakes a worker parked in another") {
  auto seg = Segment::create(testGeometry(), 1, 1);
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
