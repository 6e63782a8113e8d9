// The shared-memory segment: the state every Concert process shares.
//
// Created once by the master before the first fork (an anonymous shared
// mapping made through Boost.Interprocess), carved once into fixed arrays and
// never allocated from again. Pointer-free: integers, 64-bit lock-free
// atomics and indices only, so it means the same thing in every process.
//
// Crash safety is the organising rule. A worker can be SIGKILLed between any
// two instructions; whatever it held must be recoverable by the master from
// what is in the segment alone (reclaimDeadWorker). Hence:
//   * semaphores count per worker slot (each slot owns its own counter, the
//     total is the sum), so a dead worker's holds are exactly its counters;
//   * every ticket that is in flight records its owner slot;
//   * pass-table holds are per (entry, slot) cells.
//
// This header is the whole public surface of src/shm/. It includes nothing
// from libevent, yaml-cpp or the HTTP code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"

namespace concert::shm {

using WorkerSlot = uint32_t;  // index into the worker-slot table
constexpr WorkerSlot kNoSlot = 0xffffffffu;

// ---------------------------------------------------------------- geometry
struct Geometry {
  uint32_t ring_size = 1u << 16;        // power of two; live tickets at most ring_size
  uint32_t worker_slots = 4;            // >= 2 * workers (old and new generation side by side)
  uint32_t pass_table_size = 1u << 16;  // power of two; passes tracked at once
};

// ring: next power of two >= 2 * (max_queue + cap), at least 2^12;
// max_queue == 0 (unlimited) gives 2^20. slots: 2 * workers (at least 2).
// pass table: next power of two >= asset_users_max.
Geometry computeGeometry(int64_t max_queue, int32_t cap, int workers, int32_t asset_users_max);

// ---------------------------------------------------------------- tickets
// What the room_ticket cookie carries (admission/cookies.h encodes it): the
// ticket number and the random nonce that proves the visitor was given it.
struct TicketCookie {
  uint64_t ticket = 0;
  uint64_t nonce = 0;
};

enum class IssueOutcome {
  Ready,     // fast path: the ticket may take a slot now (already claimed for `slot`)
  Queued,    // a waiting ticket; give the visitor the cookie and the waiting page
  Breaker,   // max-queue reached: 503, no ticket taken
  RingFull,  // no free ring entry: answered like the breaker, counted in ring_full_total
};

struct Issued {
  IssueOutcome outcome = IssueOutcome::Breaker;
  TicketCookie cookie;   // valid for Ready and Queued
  int64_t position = 0;  // Queued: >= 1
};

enum class TicketState {
  Unknown,  // no such live ticket (admitted already, reaped, forged, other instance)
  Expired,  // it was waiting but its sliding TTL ran out; now retired
  Waiting,  // still in line: `position` >= 1
  Ready,    // inside the window: may claim a slot
};

struct TicketView {
  TicketState state = TicketState::Unknown;
  int64_t position = 0;         // Waiting: >= 1
  int64_t raw_position = 0;     // unclamped (rate-limited polls report it)
  bool rate_limited = false;    // poll(): previous accepted poll < 1 s ago
  bool refresh_cookie = false;  // cookies were last sent >= ttl/3 ago (now stamped as sent)
};

// ---------------------------------------------------------------- passes
enum class PassProto { H1 = 0, H2 = 1 };

struct PassHold {  // returned by PassTable acquire; give it back to release
  uint32_t index = 0xffffffffu;
  PassProto proto = PassProto::H1;
  bool valid() const { return index != 0xffffffffu; }
};

enum class PassAcquire {
  Acquired,
  AtCap,      // this pass already has cap requests in flight for this protocol: wait or 429
  TableFull,  // no entry free for a new pass: the request gets 503 (counted in pass_table_full_total)
};

// ---------------------------------------------------------------- waits
// Resources a worker can wait for across processes. A release of one wakes
// (eventfd write) every worker slot that registered waiters for it.
enum class Resource : uint32_t { PageSlot = 0, AssetSlot = 1, PassSlot = 2 };

// ---------------------------------------------------------------- stats
struct StatsSnapshot {
  int32_t cap = 0;
  int64_t occupancy = 0;
  int64_t queue_depth = 0;
  int64_t live_queue_depth = 0;
  double utilization = 0;  // smoothed (EWMA, alpha 0.1, on each page acquire/release)
  uint64_t queued_total = 0, evicted_total = 0, timeouts_total = 0, promoted_total = 0;
  int32_t asset_cap = 0;
  int64_t asset_in_flight = 0;
  int64_t asset_users = 0;
  uint64_t asset_served_total = 0, asset_denied_total = 0;
  uint64_t asset_user_throttled_total = 0, asset_global_throttled_total = 0;
  uint64_t ring_full_total = 0, pass_table_full_total = 0;
  uint32_t workers = 0;  // live worker processes
  uint32_t generation = 0;
  uint64_t reloads_total = 0, worker_restarts_total = 0, slots_reclaimed_total = 0;
};

enum class Counter {
  QueuedTotal,
  EvictedTotal,
  TimeoutsTotal,
  PromotedTotal,
  AssetServedTotal,
  AssetDeniedTotal,
  AssetUserThrottledTotal,
  AssetGlobalThrottledTotal,
  RingFullTotal,
  PassTableFullTotal,
  ReloadsTotal,
  WorkerRestartsTotal,
  SlotsReclaimedTotal,
};

// What reclaimDeadWorker returned to the pool (for the log line).
struct ReclaimReport {
  int64_t page_slots = 0;
  int64_t tickets_finished = 0;
  int64_t asset_slots = 0;
  int64_t pass_holds = 0;
  int64_t total() const { return page_slots + asset_slots + pass_holds; }
};

class Layout;  // the carved segment; private to src/shm

// ======================================================================
class Segment {
 public:
  // Master only, before any fork. `page_cap`, `asset_cap` are the starting
  // caps; asset_cap is fixed for the segment's life. Creates one eventfd per
  // worker slot (inherited across fork).
  static std::unique_ptr<Segment> create(const Geometry& geometry, int32_t page_cap, int32_t asset_cap);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  const Geometry& geometry() const;
  size_t bytes() const;  // mapped size

  // ------------------------------------------------ page admission (room)
  // A new arrival. Applies the breaker first (max_queue > 0 and either
  // queueDepth() >= max_queue or liveQueueDepth() >= max_queue). On Ready the
  // ticket is already claimed for `slot` (in flight, owned by slot); the caller
  // still takes a page slot with tryAcquirePage. On Queued the ticket waits;
  // queued_total is counted here.
  Issued issue(WorkerSlot slot, int64_t max_queue, Millis now);

  // Waiting-page render of a known ticket: touches it (last seen = now,
  // cookie sent = now) and returns its state. Expired tickets are retired
  // (and PageSlot waiters woken, as for every path that finishes a ticket).
  TicketView render(const TicketCookie& cookie, Millis now, Millis ttl);

  // A held request's recheck (-queue-hold): touches the ticket like render()
  // (last seen = now; expired tickets are retired) but leaves the "cookie
  // sent" time alone, since no cookie is sent while the request is held.
  TicketView touch(const TicketCookie& cookie, Millis now, Millis ttl);

  // /queue/status poll: as render, plus the 1-second rate limit (a limited
  // poll still touches the ticket) and refresh_cookie after ttl/3.
  // An expired ticket is retired and counted in evicted_total.
  TicketView poll(const TicketCookie& cookie, Millis now, Millis ttl);

  // Ready ticket → in flight, owned by `slot`. False if it is not (or no
  // longer) a live ready ticket: treat the request as a new arrival.
  bool claim(const TicketCookie& cookie, WorkerSlot slot);

  // The in-flight ticket's request ended (completed, client gone, error).
  // Does not wake anyone: the caller returns the page slot right after
  // (releasePage wakes PageSlot waiters once the window has moved too), or
  // calls wake(Resource::PageSlot) itself when it held no slot.
  void finish(uint64_t ticket, WorkerSlot slot);

  // A waiting ticket that will never be admitted (client gone while waiting
  // for a slot, token failure). Counted in timeouts_total when `timeout`.
  // Wakes PageSlot waiters: tickets behind it may have become ready.
  void retire(uint64_t ticket, bool timeout);

  int64_t queueDepth() const;      // unfinished tickets - cap, floored at 0
  int64_t liveQueueDepth() const;  // tickets holding a cookie (waiting or ready, not yet claimed)

  // Master janitor: retire waiting tickets unseen for longer than `ttl`, in
  // batches, lock-free. Returns how many were evicted (evicted_total += that);
  // wakes PageSlot waiters when it evicted any.
  int64_t reapExpired(Millis now, Millis ttl);

  // ------------------------------------------------ page semaphore
  bool tryAcquirePage(WorkerSlot slot);  // false: occupancy >= cap (cap may have shrunk)
  void releasePage(WorkerSlot slot);     // wakes PageSlot waiters
  int32_t pageCap() const;
  // Runtime cap (POST /_room/cap, reload). Never lets occupancy pass the new
  // cap: in-flight keeps its slots, new acquisitions wait. Growing wakes waiters.
  void setPageCap(int32_t cap);
  int64_t pageOccupancy() const;

  // The cap the configuration asked for when the runtime cap was last set by
  // the master; lets a reload tell a runtime override from a config change.
  int32_t configuredPageCap() const;
  void setConfiguredPageCap(int32_t cap);

  // ------------------------------------------------ asset semaphore (global)
  bool tryAcquireAsset(WorkerSlot slot);
  void releaseAsset(WorkerSlot slot);  // wakes AssetSlot waiters
  int32_t assetCap() const;
  int64_t assetInFlight() const;

  // ------------------------------------------------ pass table
  PassAcquire tryAcquirePass(const uint8_t id[16], PassProto proto, int32_t cap, WorkerSlot slot, Millis now,
                             PassHold* hold);
  void releasePass(const PassHold& hold, WorkerSlot slot, Millis now);  // wakes PassSlot waiters
  int64_t passUsers() const;
  // Master janitor: remove entries idle for longer than `idle` with nothing in flight.
  int64_t sweepPasses(Millis now, Millis idle);

  // ------------------------------------------------ cross-process wake-ups
  int eventFd(WorkerSlot slot) const;  // readable when woken
  // The worker owning `slot` in this process: wake-ups for it call `fn(arg)`
  // (which must only schedule work) instead of writing the eventfd.
  void setLocalWake(WorkerSlot slot, void (*fn)(void*), void* arg);
  // Before reading the eventfd: later wake-ups write it again.
  void wakeConsumed(WorkerSlot slot);
  void setWaiting(WorkerSlot slot, Resource r, bool waiting);  // "I have parked requests for r"
  void wake(Resource r);                                       // write the eventfd of every waiting slot

  // ------------------------------------------------ worker slots (master writes)
  // Master: mark `slot` as running `pid` for `generation` (fresh ledger).
  // The ledger is not reset here: it is zero from create() and from
  // reclaimDeadWorker(), which must run after every exit of a slot's
  // process (graceful or not) before the slot is reused. So this may be
  // called by the master after fork() or by the new worker itself.
  void slotStarted(WorkerSlot slot, int pid, uint32_t generation, Millis now);
  // Worker: heartbeat; master reads it in the janitor.
  void heartbeat(WorkerSlot slot, Millis now);
  Millis lastHeartbeat(WorkerSlot slot) const;
  int slotPid(WorkerSlot slot) const;  // 0 when free
  uint32_t slotGeneration(WorkerSlot slot) const;
  // Master only, after waitpid() reaped the slot's process: return every page
  // slot, in-flight ticket, asset slot and pass hold the slot owned; mark it
  // free; count slots_reclaimed_total; wake waiters.
  ReclaimReport reclaimDeadWorker(WorkerSlot slot);

  // ------------------------------------------------ generation, stats
  uint32_t generation() const;
  void setGeneration(uint32_t generation);  // master
  void count(Counter c, uint64_t n = 1);
  StatsSnapshot snapshot() const;
  // The smoothed page utilization alone (one load; snapshot() also scans
  // the pass table).
  double utilization() const;

 private:
  Segment();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace concert::shm
