// The pass table: per-pass (concert_admit id) in-flight asset counts, one
// pool per protocol, shared by every worker.
//
// Open addressing with linear probing over a window of at most kMaxProbe
// (128) entries from the id's home bucket (the whole table when it is
// smaller). Entry state word = version | state | owner:
//   Empty --creator--> Creating(owner) --creator--> Live
//   Live --master sweep--> Removing --> Tombstone (or back to Live if a
//   request arrived meanwhile); Tombstone --creator--> Creating (reused).
//   Live --evicting creator--> Removing(owner) --> Creating(owner) (or back
//   to Live if a request arrived meanwhile).
// Empty ends a probe chain, Tombstone does not; nothing ever turns an entry
// back to Empty, so an id's entry always sits before any Empty of its chain.
//
// Holds are per (entry, worker slot, protocol) u32 cells written only by
// their own worker, so a dead worker's holds are exactly its cells. An
// acquirer increments its cell, then re-reads the state word; a remover
// (the sweep or an evictor) moves Live to Removing, then re-reads the cells
// (both sequentially consistent): either the acquirer sees the new word and
// undoes, or the remover sees the hold and puts the entry back. The per-pass
// cap check is the same increment-then-sum as the semaphores, so a pass
// never exceeds its cap.
//
// Creation of an id is serialised by a lock on the id's home bucket (owner
// slot + 1 in the lock word), so concurrent first requests of one pass (a
// browser opening six asset connections at once) end with one entry. Only a
// creator holds it, for a few hundred nanoseconds; a creator killed while
// holding it is released by reclaim(). A waiter gives up after kLockSpins
// and reports the table full rather than block the worker's event loop; so
// does a lookup that finds its id's entry Removing for that long. The
// creator takes its own hold while the entry is still Creating, so a new
// entry is busy from birth and cannot be evicted before its first request.
//
// A full window (no Empty or Tombstone entry in it) evicts, the rule being
// an approximate LRU: among the window's Live entries that are idle (every
// cell zero: no request in flight), the one with the oldest last_used,
// the nearest the home bucket on a tie. The window is a sample of up to 128
// passes that share nothing but their bucket, so a miss costs one scan of it
// (state words, stamps, and the cells of entries older than the best so
// far), never a scan of the table; an exact LRU over 65536 entries would.
// The evictor takes the entry over as the sweep removes one: Live ->
// Removing(its slot), cells re-read, then Creating(its slot) for the new
// id; pass_evicted_total counts it. A victim that turned busy meanwhile
// goes back to Live and the window is scanned again (kEvictTries times at
// most). An evicted pass loses only its bookkeeping, which was zero holds:
// its next request creates a fresh entry. Only when every Live entry of the
// window has a request in flight is the answer TableFull: the request gets
// 503 and pass_table_full_total counts it; failing open would let one pass
// bypass its per-pass cap.
//
// Who writes: the state word by CAS (creators and evictors, the master's
// sweep and reclaim); the id and last_used by the creator, last_used also by
// every acquire and release; a cell only by its own slot's worker (and the
// master in reclaim, after that worker is dead); a home-bucket lock by
// creators.
//
// A SIGKILL leaves at most the dead slot's cells (its holds), one entry it
// owned in Creating (being filled) or Removing (an eviction cut short), and
// one home-bucket lock holding its slot + 1. reclaim() zeroes the cells,
// turns the Creating entry into a Tombstone, ends the Removing one as the
// sweep would (Tombstone if every cell is zero, else Live) and frees the
// lock; nothing else in the table names the slot.
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
  // A new pass takes a free entry, else evicts the least recently used idle
  // one of its window (the rule above); TableFull only when all are busy.
  PassAcquire tryAcquire(const uint8_t id[16], PassProto proto, int32_t cap, WorkerSlot slot, Millis now,
                         PassHold* hold);
  void release(const PassHold& hold, WorkerSlot slot, Millis now);  // wakes PassSlot waiters
  int64_t users() const;                                            // passes with a live entry
  // Master janitor: remove entries idle for longer than `idle` with nothing in flight.
  int64_t sweep(Millis now, Millis idle);

 private:
  int64_t reclaim(WorkerSlot slot) override;  // its cells, its Creating or Removing entry, its lock
};

}  // namespace concert::shm
