// Room: the room's rules for page admission, in one place.
//
// The shared segment keeps mechanisms with crash contracts (the ticket
// ring's entries, the page semaphore, the ranked waiting counters, the
// line's credit word, the admission rate's bucket, the mode word). Room
// composes them into the rules; nothing else in the tree decides who goes
// to the origin next. A page guard asks it per request; the ticket ring and
// the cluster line ask it through shm::LineGate (installed once per process,
// Segment::setGate). It holds no state of its own: every answer is computed
// from segment words, so any process may build one.
//
// Who goes first when a page slot frees:
//
//   rank 0           a room pass or an invitation
//   ranks 1..7       the priority classes, in -priority-classes order
//   kSessionRank     a plain session (a valid concert_admit pass)
//   Returned ticket  a holder who missed its turn and came back for the page
//   Waiting ticket   the line, in ticket order
//
// except that while ranked requests wait the line is owed a share of the
// slots (-newcomer-share). A ranked request that takes a slot while the line
// waits adds share / (1 - share) to the line's credit; a line ticket that
// takes a turn while the credit is one or more spends one. So for every
// 1/share slots at least one goes to the line (share 0.2: four sessions,
// then a line visitor). With free = cap - occupancy, ranked = ranked
// requests waiting, owed = min(line depth, whole credit, rate tokens):
//
//   a request of rank r may take a slot iff  free - owed - ranked ahead of r > 0
//   the line sees                            max(free - ranked, min(free, owed))
//                                            free slots (lineFree)
//
// A ranked request that arrives while a slot is free takes it without
// waiting. The line is owed only what it could take now: nothing while it
// stands still, and no more than the admission rate's tokens, else ranked
// requests would wait for slots nobody may use.
//
// How the line moves (flow):
//
//   mode         pre-queue   flow        straight in   ranked requests
//   open         no          ByCap       yes (token)   yes
//   open         yes         Still       no            yes
//   pause        any         Still       no            yes
//   reject       any         Still       no            yes
//   passthrough  any         Everyone    (the guard lets everyone through)
//
// The ticket states, what moves them and who is ready are in the README's
// "Who goes first" and in shm/tickets.h; the model test
// (tests/unit/shm/test_line_model.cpp) checks them against a reference.
#pragma once

#include <cstdint>

#include "shm/line_gate.h"
#include "shm/segment.h"

namespace concert::admission {

class Room final : public shm::LineGate {
 public:
  explicit Room(shm::Segment& segment) : segment_(&segment) {}

  // shm::LineGate
  shm::LineFlow flow() const override;
  int64_t lineFree(int64_t free, int64_t depth) const override;
  shm::LineToken takeToken() override;
  void giveBackToken() override;

  shm::RoomMode mode() const;
  // Nobody waits: no live ticket in the line, no ranked request.
  bool nobodyWaits() const;
  // The door: the room is open and its line moves, nobody waits, a page
  // slot is free and the admission rate has a token. True: the slot is
  // taken for `slot`.
  bool straightIn(shm::WorkerSlot slot);
  // A ranked request's slot (see the top of the file). True: taken, and the
  // line's credit grew by the share if the line waits.
  bool takeRankedSlot(shm::WorkerSlot slot, int rank, double newcomer_share);
  // A ticket's turn: a page slot, then the claim; the slot goes back if the
  // claim fails. True: the ticket left the line and the slot is taken.
  bool takeTurn(shm::WorkerSlot slot, const shm::TicketCookie& cookie, shm::Claimed* claimed);
  // Slots owed to the line now (0 while it stands still).
  int64_t owed() const;

 private:
  shm::Segment* segment_;
};

}  // namespace concert::admission
