// Small helpers every libevent callback of the data path uses.
#pragma once

#include <sys/time.h>

#include <exception>

#include "common/clock.h"

namespace concert::worker {

inline timeval toTimeval(Millis ms) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

// Runs `body`; whatever it throws goes to `fail(what)` instead of unwinding
// through libevent. A callback that fails closes its own connection (and
// releases what it held) and nothing else.
template <typename Body, typename Fail>
void guarded(Body&& body, Fail&& fail) noexcept {
  try {
    body();
  } catch (const std::exception& e) {
    fail(e.what());
  } catch (...) {
    fail("unknown exception");
  }
}

}  // namespace concert::worker
