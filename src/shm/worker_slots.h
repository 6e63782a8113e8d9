// Worker slots and cross-process wake-ups.
//
// THE LOST-WAKE-UP RULE (stated here once; every wait across processes
// relies on it):
//   * A waiter raises its slot's waiting flag for a resource (setWaiting)
//     BEFORE it checks the shared state one last time. Whoever frees the
//     resource changes the shared state BEFORE it reads the flags (wake).
//     Both sides are sequentially consistent, so either the waiter's last
//     check sees the release, or the release sees the flag and wakes the
//     waiter's slot. That is why every path that frees something a waiter
//     can want (a semaphore or pass release, a finished ticket, a cap that
//     grew, a reclaimed slot) ends in wake(resource).
//   * The eventfd is written once until it is read: wake() raises
//     wake_pending and writes only if it was down. The worker, woken,
//     reads the eventfd BEFORE it lowers wake_pending (consumeWake), then
//     checks the shared state again: a wake-up that found the flag still up
//     came before the lowering, so that check sees its change; one after
//     the lowering writes again. The other order loses wake-ups for good: a
//     wake-up between the lowering and the read raises the flag and writes,
//     the read swallows the write, and the flag stays up over an empty
//     eventfd, so no later wake-up writes.
//
// States of a slot: free (pid 0) --started()--> running (pid, generation,
// heartbeat) --the process exits, the master reaps it--> Segment::
// reclaimDeadWorker --> free. The ledger (page / asset counters, pass cells,
// owned tickets) is zero whenever a slot is free.
//
// Who writes which word (SlotRecord, layout.h):
//   pid, generation  started(): the master, or the new worker itself right
//                    after fork(); pid = 0 only by the master in reclaim.
//   heartbeat        the slot's worker (the master reads it in its janitor).
//   waiting_mask     the slot's worker (worker::SlotWaiters); the master
//                    zeroes it in reclaim.
//   wake_pending     raised by any waker, lowered by the slot's worker
//                    (after reading the eventfd) and by the master in
//                    reclaim (after draining it).
//
// A SIGKILL leaves the slot with its pid set, possibly a raised waiting
// flag, wake_pending up and an unread eventfd count. reclaim() lowers the
// waiting flags, drains the eventfd (a wake-up meant for the dead worker
// must not reach the slot's next one), then lowers wake_pending (in that
// order, as consumeWake) and frees the slot.
//
// The eventfds themselves are process-local: one per slot, created by the
// master before the first fork and inherited by every worker; a binary
// upgrade hands them to the new master image with the segment, so that its
// workers and the old ones still wake each other.
#pragma once

#include <cstdint>
#include <vector>

#include "shm/types.h"

namespace concert::shm {

class Layout;

class WorkerSlots {
 public:
  WorkerSlots(const WorkerSlots&) = delete;
  WorkerSlots& operator=(const WorkerSlots&) = delete;
  ~WorkerSlots();

  // Mark `slot` as running `pid` for `generation`. The ledger is not reset
  // here: it is zero from create() and from Segment::reclaimDeadWorker(),
  // which must run after every exit of a slot's process (graceful or not)
  // before the slot is reused. So this may be called by the master after
  // fork() or by the new worker itself.
  void started(WorkerSlot slot, int pid, uint32_t generation, Millis now);
  // Worker: heartbeat; the master reads it in the janitor.
  void heartbeat(WorkerSlot slot, Millis now);
  Millis lastHeartbeat(WorkerSlot slot) const;
  int pid(WorkerSlot slot) const;  // 0 when free
  uint32_t generation(WorkerSlot slot) const;
  uint32_t running() const;  // slots with a live process

  int eventFd(WorkerSlot slot) const;  // readable when woken
  const std::vector<int>& eventFds() const { return eventfds_; }
  // The worker owning `slot` in this process: wake-ups for it call `fn(arg)`
  // (which must only schedule work) instead of writing the eventfd.
  void setLocalWake(WorkerSlot slot, void (*fn)(void*), void* arg);
  // The slot's worker, its eventfd readable: reads the eventfd, then lowers
  // wake_pending (the rule above); true if the eventfd had been written.
  // Check the shared state again after it.
  bool consumeWake(WorkerSlot slot);
  // Lowers wake_pending alone: later wake-ups write the eventfd again. Only
  // after reading the eventfd (consumeWake does both, in that order).
  void wakeConsumed(WorkerSlot slot);
  void setWaiting(WorkerSlot slot, Resource r, bool waiting);  // "I have parked requests for r"
  void wake(Resource r);                                       // wake every slot waiting for r

 private:
  friend class Segment;
  // One eventfd per slot: `handed` (the ones a previous master image made,
  // still read by its workers: a binary upgrade), else new ones.
  WorkerSlots(Layout& layout, std::vector<int> handed);
  // Master, the slot's process reaped: lower its flags, drain its eventfd,
  // mark it free. Wakes nobody (Segment::reclaimDeadWorker does, once).
  void reclaim(WorkerSlot slot);

  Layout* layout_;
  std::vector<int> eventfds_;
  // This process's own worker slot: a wake-up for it runs `local_wake_`
  // instead of writing its eventfd (no system call to wake oneself).
  uint32_t local_slot_ = UINT32_MAX;
  void (*local_wake_)(void*) = nullptr;
  void* local_wake_arg_ = nullptr;
};

}  // namespace concert::shm
