// Ranked requests waiting for a page slot (room passes, priority classes,
// sessions), and the line's share of freed slots: the one place where the
// order of admission between everyone who goes ahead of the line, and the
// line, is decided.
//
// Order when a slot frees (types.h, ranks): room passes (rank 0), then the
// priority classes in -priority-classes order (ranks 1..7), then sessions
// (kSessionRank), then the line; except that while any of them wait the line
// is owed a share of the slots. Among ranks: a request of rank r may take a
// slot iff  free - owed - waitingAhead(r) > 0, so a freed slot goes to the
// best rank waiting; requests of one rank race for it as sessions always did.
// Below, "session" means any ranked request. A session that takes a
// slot while the line waits adds share / (1 - share) to the line's credit;
// a line ticket that claims a slot while credit is one or more spends one.
// So for every 1/share slots at least one goes to the line (share 0.2: four
// sessions, then a line visitor). The rule is applied on both sides:
//   a session may take a slot iff  free - owed > 0
//   the line sees                   max(free - waiting, min(free, owed))
//                                   free slots (TicketRing::freeSlots)
// with free = cap - occupancy, waiting = sessions waiting now, and
// owed = min(line depth, whole credit). A session that arrives while a slot
// is free takes it without waiting. The cap itself is the page semaphore's:
// nothing here can admit anyone past it.
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

  // Slots the line is owed now, given how many visitors wait in it.
  int64_t owed(int64_t line_depth) const;
  // Free slots as the line sees them (see the top of this file).
  int64_t lineFree(int64_t free, int64_t line_depth) const;
  // A session took a slot while `line_depth` visitors waited.
  void sessionAdmitted(int64_t line_depth, double share);
  // A line visitor took a slot.
  void lineAdmitted();
  int64_t creditMilli() const;  // for the tests

  static constexpr int64_t kUnit = 1000;             // one slot of credit
  static constexpr int64_t kMaxCredit = 4 * kUnit;  // bounds a burst of debts

 protected:
  friend class Segment;
  Sessions(Layout& layout, WorkerSlots& slots) : Handle(layout, slots) {}

 private:
  int64_t reclaim(WorkerSlot slot) override;
  std::atomic<int64_t>& counter(WorkerSlot slot, int rank);
  void addCredit(int64_t delta);
};

}  // namespace concert::shm
