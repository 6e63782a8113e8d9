// The "upstream saturated" / "draining" lines (logged on the
// full and not-full edges). At full cap those edges alternate on nearly
// every request, so a worker writes at most one such line per second: the
// first edge is logged at once, later ones within the second are folded,
// and flush() (the worker's 1 s tick) logs where the room ended up if that
// differs from the last line. The log always ends on the current state.
// One per worker process, owned by the worker and reached through the
// AdmissionContext.
#pragma once

#include "common/clock.h"
#include "shm/segment.h"

namespace concert::admission {

constexpr Millis kSaturationLogGapMs = 1000;

class SaturationLog {
 public:
  void edge(const shm::Segment& segment, const char* what, Millis now);
  void flush(const shm::Segment& segment, Millis now);

 private:
  const char* last_logged_ = nullptr;  // the edge the log shows now
  const char* pending_ = nullptr;      // a later edge not logged yet
  Millis last_ms_ = -kSaturationLogGapMs;
};

}  // namespace concert::admission
