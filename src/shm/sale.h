// A scheduled sale (-event-start, -prequeue, -shuffle-prequeue): the schedule
// in the segment, so every worker sees the same one and a SIGHUP reload keeps
// what the pre-queue already did.
//
//   before start - prequeue   the room works as usual
//   pre-queue (until start)   nobody goes straight in and no ticket's turn
//                             comes (the line stands still as in pause:
//                             Modes::lineMoves is false, TicketRing::freeSlots
//                             0); sessions go on; arrivals get tickets
//   from the start            the line moves again in ticket order
//
// With -shuffle-prequeue the pre-queue's arrivals are not numbered in arrival
// order: each takes a place drawn at random in a block of ticket numbers
// reserved when the pre-queue opens, so at the start their order is a uniform
// shuffle fixed once, and later arrivals are numbered after the block. The
// block's life and its invariants are the ring's (tickets.h, "Scheduled
// sale"); this handle holds the schedule the ring reads.
//
// Words (SaleControl in layout.h): start_ms, prequeue_ms and shuffle, the
// master's only (at start and on every reload); the block word, by CAS from
// anyone (tickets.h). A reload that leaves the schedule alone changes
// nothing; one that moves the start lets a spent block (Done) open again for
// the new pre-queue. The three schedule words are stored one by one: a worker
// reading them in the middle of a reload sees the old or the new value of
// each, for that one read. A SIGKILL leaves them valid (one store each);
// nothing here names a slot (an opener's slot in the block word is the
// ring's to reclaim).
#pragma once

#include <cstdint>

#include "shm/handle.h"
#include "shm/types.h"

namespace concert::shm {

struct SaleControl;  // layout.h

// Whether the sale's pre-queue holds the line at `unix_ms` (Unix
// milliseconds): from start - prequeue until the start. For the code of
// src/shm that reads the schedule words itself (the ring, the modes).
bool inPrequeue(const SaleControl& sale, int64_t unix_ms);

class Sale final : public Handle {
 public:
  // Master only. start_unix_ms 0: no sale. Returns true when the start
  // moved (a new block may open for it).
  bool schedule(int64_t start_unix_ms, Millis prequeue, bool shuffle);

  int64_t startMs() const;  // 0: no sale
  bool shuffles() const;
  // Whether the pre-queue holds the line at `unix_ms` (Unix milliseconds).
  bool prequeue(int64_t unix_ms) const;
  // While the pre-queue holds the line: seconds until the start, rounded
  // up (at least 1); 0 otherwise.
  int64_t startsIn(int64_t unix_ms) const;

 private:
  friend class Segment;
  Sale(Layout& layout, WorkerSlots& slots) : Handle(layout, slots) {}
  int64_t reclaim(WorkerSlot) override { return 0; }  // the block's opener is the ring's (tickets.h)
};

}  // namespace concert::shm
