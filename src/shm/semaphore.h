// A counting semaphore shared by every worker: the page semaphore (the
// room's cap), the global asset semaphore and the long-lived connection
// semaphore (-long-lived-cap) are all this type.
//
// States: one signed counter per worker slot (SlotRecord::page, ::asset or
// ::long_lived, each on its own cache line); the occupancy is their sum, and
// the cap is a header word (page_cap, changed at run time; asset_cap, fixed
// at create; long_lived_cap, changed by the master on reload).
//
// Who writes: a slot's counter only by its own worker (+1 to try, -1 to back
// off or release), and by the master in reclaim, after that worker is dead.
// A slot's counter is therefore never below 0, nor is the sum. A negative
// count is a broken invariant (a release without its acquire): reading it
// (occupancy(), and so every acquire and release) logs it and aborts the
// process rather than clamp the sum to 0 and hide it.
//
// tryAcquire increments its own slot's counter first, then sums every slot
// (sequentially consistent, Dekker-style): if the sum exceeds the cap it
// takes its increment back and fails. Two racing acquirers can both back off
// (each sees the other's reservation); that is a spurious failure, never an
// over-admission, so a failed acquirer re-sums without its own reservation
// and retries a few times while there is room, and on giving up with room
// left it wakes the parked waiters so nothing sleeps on a free slot.
// Shrinking the cap only lowers the bound new acquisitions are checked
// against: in-flight requests keep their slots, nobody new gets in until the
// sum is below the new cap.
//
// A worker SIGKILLed anywhere leaves exactly its holds (plus at most one
// half-made reservation) in its own counter; reclaim() zeroes it.
//
// Quarantine (page semaphore only). A request that reached the origin keeps
// the origin working after the worker that sent it is gone (killed, or
// stopped when its grace ran out): PHP finishes the page whoever is left to
// read it. Its slot is not free until then, and nothing tells when that is,
// so it waits in quarantine (two header words: how many, and until when)
// for as long as the origin may take to answer (-upstream-timeout), counted
// in the occupancy all that time. The master's janitor gives the slots back
// when the time has come. A slot moves into quarantine before it leaves its
// worker's counter, so the occupancy never dips in between.
//
// The page semaphore also keeps the smoothed utilization word (EWMA of
// occupancy / cap, updated on each acquire and release; Stats reads it).
#pragma once

#include <atomic>
#include <cstdint>

#include "shm/handle.h"
#include "shm/types.h"

namespace concert::shm {

struct SlotRecord;
struct Header;

class Semaphore : public Handle {
 public:
  bool tryAcquire(WorkerSlot slot);  // false: occupancy >= cap (the cap may have shrunk)
  void release(WorkerSlot slot);     // wakes this semaphore's waiters
  int32_t cap() const;               // the bound acquisitions are checked against now (limit())
  int64_t occupancy() const;  // held over every slot

 protected:
  friend class Segment;
  // `counter`: the slot's word for this semaphore; `cap`: the header word;
  // `utilization`: the header word to keep smoothed, or null. Words are
  // named by member, not address: the segment may be mapped anew (grown).
  Semaphore(Layout& layout, WorkerSlots& slots, std::atomic<int64_t> SlotRecord::*counter,
            std::atomic<int64_t> Header::*cap, Resource resource, std::atomic<uint64_t> Header::*utilization,
            const char* name);

  std::atomic<int64_t>& capWord() const;

  // The bound now: the cap word, unless the semaphore says otherwise.
  virtual int64_t limit() const;

  std::atomic<int64_t> Header::*cap_;
  std::atomic<int64_t> Header::*outside_ = nullptr;  // held outside every slot (the page quarantine), or none
  Resource resource_;

 private:
  int64_t reclaim(WorkerSlot slot) override;  // zeroes the slot's counter
  void updateUtilization();

  std::atomic<int64_t> SlotRecord::*counter_;
  std::atomic<uint64_t> Header::*utilization_;
  const char* name_;  // "page" or "asset", for the broken-invariant message
};

// The page semaphore: the cap can change at run time.
class PageSemaphore final : public Semaphore {
 public:
  // Runtime cap (POST /_room/cap, reload). Never lets occupancy pass the new
  // cap: in-flight keeps its slots, new acquisitions wait. Growing wakes waiters.
  void setCap(int32_t cap);
  // The same, only while the cap is still `expected` (-adaptive: a runtime
  // cap set meanwhile wins). False when it was not.
  bool replaceCap(int32_t expected, int32_t cap);
  // With -cluster the cap is this host's share of the global cap, which the
  // cluster agent sets from the engine (shm/cluster.h); 0 is allowed (the
  // host holds no slot: nobody new goes in here). Once the host's lease with
  // the engine lapsed (the agent stopped renewing it), cap() reads the
  // fail-mode share instead, whatever the word holds (sharedCapNow).
  void setShare(int32_t share);

  // The cap the configuration asked for when the runtime cap was last set by
  // the master; lets a reload tell a runtime override from a config change.
  int32_t configuredCap() const;
  void setConfiguredCap(int32_t cap);

  // `slots` page slots whose requests the origin may still be serving stay
  // counted until `until` (monotonic ms; a later one keeps all of them
  // longer). Anyone; before the slots leave their holder's counter.
  void quarantine(int64_t slots, Millis until);
  int64_t quarantined() const;
  // Master's janitor: once the time has come, the quarantined slots are
  // free again (waiters woken); returns how many.
  int64_t endQuarantine(Millis now);
  // What `slot`'s worker holds now.
  int64_t held(WorkerSlot slot) const;

 private:
  friend class Segment;
  PageSemaphore(Layout& layout, WorkerSlots& slots);
  int64_t limit() const override;
};

}  // namespace concert::shm
