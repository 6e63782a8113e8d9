// Ranked requests waiting for a page slot (room passes, priority classes,
// sessions), and the line's credit: the counters the room's order of
// admission is computed from (admission/room.h has the rule; this file only
// keeps the words).
//
// States: waiting counters per worker slot and rank (SlotRecord::
// sessions_waiting for kSessionRank, ::ranked_waiting[r] for the others;
// only its own worker writes them, +1 on entering the wait, -1 on leaving);
// the credit is a header word in thousandths of a slot, moved by CAS and
// kept within [0, kMaxCredit]. A SIGKILL leaves the dead slot's waiting
// count (reclaim() zeroes it) and the credit as it was (always valid).
#pragma once

#include <atomic>
#include <cstdint>

#include "shm/handle.h"
#include "shm/types.h"

namespace concert::shm {

class Sessions : public Handle {
 public:
  // A ranked request starts waiting for a slot / stops waiting (admitted,
  // timed out, gone; leaving wakes the line).
  void enter(WorkerSlot slot, int rank = kSessionRank);
  void leave(WorkerSlot slot, int rank = kSessionRank);
  int64_t waiting() const;  // every rank
  // Requests waiting with a better rank than `rank` (0 for rank 0).
  int64_t waitingAhead(int rank) const;

  int64_t creditMilli() const;
  // Moves the credit by `delta` thousandths of a slot, within [0, kMaxCredit].
  void addCredit(int64_t delta);

  static constexpr int64_t kUnit = 1000;             // one slot of credit
  static constexpr int64_t kMaxCredit = 4 * kUnit;  // bounds a burst of debts

 protected:
  friend class Segment;
  Sessions(Layout& layout, WorkerSlots& slots) : Handle(layout, slots) {}

 private:
  int64_t reclaim(WorkerSlot slot) override;
  std::atomic<int64_t>& counter(WorkerSlot slot, int rank);
};

}  // namespace concert::shm
