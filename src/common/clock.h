// Time as Concert uses it. Every process of one Concert instance runs on the
// same machine, so CLOCK_MONOTONIC readings are comparable across the master
// and all workers; the shared segment stores monotonic times, but for a
// scheduled sale's start, which is wall time (Unix ms) by its definition.
#pragma once

#include <cstdint>
#include <ctime>

namespace concert {

using Millis = int64_t;  // milliseconds on CLOCK_MONOTONIC

inline Millis monotonicMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<Millis>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

inline int64_t monotonicUs() {  // microseconds on CLOCK_MONOTONIC
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

inline int64_t monotonicNs() {  // nanoseconds on CLOCK_MONOTONIC
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline int64_t unixMs() {  // milliseconds on CLOCK_REALTIME (a scheduled sale's start is wall time)
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

inline int64_t unixSeconds() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec;
}

}  // namespace concert
