// The revocation table: concert_admit pass ids whose session the origin ended
// (Concert-Session: end), each until the latest time a pass with that id
// could still be valid. Every worker writes it and reads it on every session
// request, so a pass ended on one worker is refused on all.
//
// Open addressing with linear probing over at most kMaxProbe entries from the
// id's home bucket. Entry = state word, id (two words), until (Unix seconds:
// it is compared with pass expiries, which are wall-clock, so a clock step
// moves both alike). State word = version | state | owner:
//   Empty --writer--> Writing(owner) --writer--> Live
//   Live (until passed: free) --writer--> Writing(owner) --> Live   reused
//   Live (another id, table full) --writer--> Writing(owner) --> Live   replaced
//   Live (same id) --writer--> Raising(owner) --writer--> Live    until raised
// Empty ends a probe chain (an entry never becomes Empty again, so every id
// lies on an unbroken run from its home). A Live entry is a revocation while
// now < until; once until has passed it is free for reuse and nobody needs to
// sweep it. Raising never changes the id and stores until in one step, so
// readers treat it as Live; Writing is skipped (not a revocation yet, or no
// longer one).
//
// Readers never block and never write: revoked() reads the state word, the
// id and until, then the state word again, and re-reads an entry whose word
// changed meanwhile (only a writer's progress changes it). Writers claim an
// entry with one CAS on its word, so two writers never write one entry; two
// concurrent first revocations of one id may end in two entries, which is
// harmless (a reader stops at the first live match, and both carry about the
// same until).
//
// Full: when no entry in the id's probe window is Empty or past its until,
// the Live entry expiring soonest is overwritten (revoke() says Replaced).
// That can only shorten a revocation, never lengthen or invent one: the pass
// whose entry was taken is accepted again until its own expiry. The table
// has max(4096, pass table size) entries (types.h, computeGeometry): at
// least as many as the passes -asset-users-max says are alive at once.
// Entries being written are never taken; if every entry in the window stays
// claimed by other writers for kMaxRounds rounds (only with stuck writers in
// a table smaller than their number), revoke() records nothing and says Busy.
//
// Who writes: the state word by CAS (writers; the master in reclaim); id and
// until only by the writer that holds the entry in Writing or Raising (and
// until by the master in reclaim, after that writer is dead).
//
// A SIGKILL leaves at most one entry Writing or Raising with the dead slot as
// owner (its id possibly half written). reclaim() turns a Writing entry into
// a free one (until 0, then Live: the revocation being written is lost, and
// so is the response that would have announced it, which had not gone out)
// and a Raising one back into Live (until is the old or the raised value,
// both whole); nothing else in the table names the slot.
#pragma once

#include <cstdint>

#include "shm/handle.h"
#include "shm/types.h"

namespace concert::shm {

class Revocations final : public Handle {
 public:
  using Handle::Handle;

  // Pass `id` is refused while now < until (Unix seconds); a second
  // revocation of the same id keeps the later until. Any worker.
  RevokeOutcome revoke(const uint8_t id[16], int64_t until, int64_t now, WorkerSlot slot);
  // Is pass `id` revoked at `now` (Unix seconds)? Reads only, never waits.
  bool revoked(const uint8_t id[16], int64_t now) const;
  // Revocations in force at `now` (a full scan: for tests and diagnostics).
  int64_t active(int64_t now) const;
  // Entries some writer holds (Writing or Raising) right now: 0 when nobody
  // is revoking and every dead writer was reclaimed.
  int64_t writing() const;

 private:
  int64_t reclaim(WorkerSlot slot) override;  // its Writing or Raising entry
};

}  // namespace concert::shm
