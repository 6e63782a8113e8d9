// The room's mode: one word in the segment that every worker reads on each
// page admission, so a change applies to all of them at once.
//
//   open         the cap and the line as usual
//   pause        nobody new goes in, neither straight nor from the line: new
//                arrivals get tickets and wait, waiting tickets keep their
//                places, and no ticket's turn comes (TicketRing::freeSlots is
//                0), so the janitor never counts a missed turn for the pause.
//                Sessions go on (without the line's owed share: the line
//                takes nothing meanwhile). Back to open, the line moves again
//                in ticket order.
//   reject       page requests without a pass get the maintenance page (503 +
//                Retry-After); the line stands still as in pause; sessions go on
//   passthrough  no cap for pages: every page request goes to the origin.
//                A request still takes a page slot when one is free, so the
//                occupancy and its invariant (never above the cap) hold in
//                every mode; one that finds none goes without a slot, and it
//                and one that arrives while anybody waits count in
//                would_queue_total. Every waiting ticket is ready: its holder
//                goes straight in and the ticket leaves the line, or, not
//                back within the claim window, misses its turn as usual.
// Switching back from passthrough with more than cap in flight: the slotless
// requests are invisible to the page semaphore, so for as long as they run
// the origin sees up to cap plus them; no slot leaks (each request gives back
// exactly what it took) and the cap binds fully again once they are done.
//
// Words (RoomControl in layout.h): `mode`, written by the master at start and
// on a reload that changes the configured mode, and by POST /_room/mode from
// any worker; `configured_mode`, the master's only: the mode the
// configuration asked for when the master last set the mode, so that a reload
// can tell a runtime override (kept) from a change in the file (applied),
// as for the page cap (semaphore.h). A SIGKILL leaves both valid (one store
// each); nothing names a slot, so nothing is reclaimed.
#pragma once

#include <cstdint>

#include "shm/handle.h"
#include "shm/types.h"

namespace concert::shm {

class Modes final : public Handle {
 public:
  RoomMode mode() const;
  // Every worker sees `mode` from now on; returns the mode it replaced.
  // Wakes PageSlot waiters: held requests and event streams look again
  // (leaving pause lets the line move).
  RoomMode set(RoomMode mode);

  RoomMode configured() const;
  void setConfigured(RoomMode mode);  // master

  // Whether the line moves: a ticket's turn can come (open and
  // passthrough), and nobody may go straight in unless it does. A scheduled
  // sale's pre-queue (sale.h) holds an open room's line as pause does;
  // passthrough, an operator's override, goes on through it.
  bool lineMoves() const;

 private:
  friend class Segment;
  Modes(Layout& layout, WorkerSlots& slots) : Handle(layout, slots) {}
  int64_t reclaim(WorkerSlot) override { return 0; }  // nothing per slot
};

}  // namespace concert::shm
