// LineGate: what the line's mechanics ask the room's rules.
//
// The ticket ring and the cluster line decide who is ready from the words
// they own (entries, counts, the engine's horizon) and one number they do
// not: how many page slots the line may use now. That number is policy (the
// room's mode, a scheduled sale's pre-queue, the sessions' share, the
// admission rate), so it comes from a LineGate that the room implements
// (admission/room.h) and each process installs once (Segment::setGate).
//
// The gate is process-local and holds no state of its own that a crash
// could leave half written: every answer is computed from segment words.
// Without a gate the line moves by the cap alone (free page slots, no mode,
// no rate): the mechanism with no policy on top, as the shm tests use it.
#pragma once

#include <cstdint>

namespace concert::shm {

// How the line moves now.
enum class LineFlow {
  Still,     // nobody's turn comes (pause, reject, a sale's pre-queue)
  ByCap,     // turns come as page slots free, in ticket order (open)
  Everyone,  // every ticket's turn has come (passthrough)
};

// A turn taken from the line may cost the admission rate a token.
enum class LineToken {
  Refused,    // the rate allows no admission now
  Unmetered,  // no rate applies: nothing was taken
  Taken,      // one token taken (giveBackToken() undoes it)
};

class LineGate {
 public:
  virtual ~LineGate() = default;
  virtual LineFlow flow() const = 0;
  // ByCap: of `free` page slots (cap - occupancy, plus the caller's own),
  // how many the line may use with `depth` visitors in it.
  virtual int64_t lineFree(int64_t free, int64_t depth) const = 0;
  virtual LineToken takeToken() = 0;
  virtual void giveBackToken() = 0;
};

}  // namespace concert::shm
