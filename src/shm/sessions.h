// Sessions waiting for a page slot, and the line's share of freed slots
// (traffic.md §3): the one place where the order of admission between
// admitted visitors (sessions) and the line is decided.
//
// Order when a slot frees: sessions first, then the line, except that while
// both wait the line is owed a share of the slots. A session that takes a
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
// States: one waiting counter per worker slot (SlotRecord::sessions_waiting,
// only its own worker writes it, +1 on entering the wait, -1 on leaving);
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
  void enter(WorkerSlot slot);  // a session request starts waiting for a slot
  void leave(WorkerSlot slot);  // it stops waiting (admitted, timed out, gone); wakes the line
  int64_t waiting() const;

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
  void addCredit(int64_t delta);
};

}  // namespace concert::shm
