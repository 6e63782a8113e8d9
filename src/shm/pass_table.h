// The pass table: per-pass (concert_admit id) in-flight asset counts, one
// pool per protocol, shared by every worker.
//
// Open addressing with linear probing over at most kMaxProbe entries from
// the id's home bucket. Entry state word = version | state | owner:
//   Empty --creator--> Creating(owner) --creator--> Live
//   Live --master sweep--> Removing --> Tombstone (or back to Live if a
//   request arrived meanwhile); Tombstone --creator--> Creating (reused).
// Empty ends a probe chain, Tombstone does not.
//
// Holds are per (entry, worker slot, protocol) u32 cells written only by
// their own worker, so a dead worker's holds are exactly its cells. An
// acquirer increments its cell, then re-reads the state word; the sweeper
// moves Live to Removing, then re-reads the cells (both sequentially
// consistent): either the acquirer sees Removing and undoes, or the sweeper
// sees the hold and puts the entry back. The per-pass cap check is the same
// increment-then-sum as the semaphores, so a pass never exceeds its cap.
//
// Creation of an id is serialised by a lock on the id's home bucket (owner
// slot + 1 in the lock word), so concurrent first requests of one pass (a
// browser opening six asset connections at once) end with one entry. Only a
// creator holds it, for a few hundred nanoseconds; a creator killed while
// holding it is released by reclaim(), which also turns its Creating entry
// into a Tombstone. A waiter gives up after kLockSpins and reports the
// table full rather than block the worker's event loop.
//
// Who writes: the state word by CAS (creators, the master's sweep and
// reclaim); the id and last_used by the creator, last_used also by every
// acquire and release; a cell only by its own slot's worker (and the master
// in reclaim, after that worker is dead); a home-bucket lock by creators.
//
// A SIGKILL leaves at most the dead slot's cells (its holds), one Creating
// entry it owned and one home-bucket lock holding its slot + 1. reclaim()
// zeroes the cells, turns the entry into a Tombstone and frees the lock;
// nothing else in the table names the slot.
//
// A full table (no Empty or Tombstone entry within the probe window) answers
// TableFull: the request gets 503 and pass_table_full_total counts it;
// failing open would let one pass bypass its per-pass cap.
#pragma once

#include <cstdint>

#include "shm/handle.h"
#include "shm/types.h"

namespace concert::shm {

class PassTable final : public Handle {
 public:
  using Handle::Handle;

  // One more request of pass `id` over `proto`, at most `cap` at once for
  // the pass and protocol. On Acquired `*hold` names the hold to release.
  PassAcquire tryAcquire(const uint8_t id[16], PassProto proto, int32_t cap, WorkerSlot slot, Millis now,
                         PassHold* hold);
  void release(const PassHold& hold, WorkerSlot slot, Millis now);  // wakes PassSlot waiters
  int64_t users() const;                                            // passes with a live entry
  // Master janitor: remove entries idle for longer than `idle` with nothing in flight.
  int64_t sweep(Millis now, Millis idle);

 private:
  int64_t reclaim(WorkerSlot slot) override;  // its cells, its Creating entry, its lock
};

}  // namespace concert::shm
