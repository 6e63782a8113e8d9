// The admission rate (-admit-rate and -admit-burst): at most `rate`
// admissions of visitors without a session per unit of time, direct or from
// the line, on top of the cap, shared by every worker. Sessions are never
// metered.
//
// The bucket is one word, kept the GCRA way (virtual scheduling): `tat`, the
// theoretical arrival time of the next admission in CLOCK_MONOTONIC
// nanoseconds. With T = the interval between admissions (1 s / rate) and B
// the burst:
//   available(now) = (now + B*T - max(tat, now)) / T     (B when tat <= now)
//   take(now):       tat' = max(tat, now) + T,  allowed iff tat' - now <= B*T
// so an idle bucket fills up to B and then holds; take() is one CAS loop on
// `tat`, lock-free, and giveBack() one fetch_sub of T. No refill step, no
// second word to keep in step with the first, and 64-bit nanoseconds do not
// wrap.
//
// Who uses it: a direct admission takes a token after its page slot (and
// gives the slot back without one: the visitor takes a ticket instead);
// TicketRing::claim takes one before a ticket leaves the line and gives it
// back when the claim loses its race. TicketRing::freeSlots counts only as
// many free slots as there are tokens, so with the bucket empty no ticket's
// turn comes: the line waits, nobody is ready, and the janitor counts no
// missed turn for it. Nothing wakes waiters when tokens come back with time:
// held requests are rechecked by the worker's 250 ms timer and event streams
// every second, which loses no token while the burst holds at least a
// quarter second's worth (the default burst is one second's worth).
//
// Words (RoomControl in layout.h): rate_interval (T, 0 = no limit) and
// rate_burst (B), the master's at start and on reload; rate_tat by every
// admitter, by CAS. Reconfiguring refills the bucket. A SIGKILL leaves every
// word valid; a worker killed between its take() and its admission loses one
// token, nothing else. Nothing names a slot: nothing to reclaim.
#pragma once

#include <cstdint>
#include <limits>

#include "shm/handle.h"
#include "shm/types.h"

namespace concert::shm {

class AdmitRate final : public Handle {
 public:
  static constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();

  // Master: `interval_ns` between admissions (0: no limit), at most `burst`
  // (>= 1) at once. A change refills the bucket; the same values change nothing.
  void configure(int64_t interval_ns, int64_t burst, int64_t now_ns);
  bool limited() const;

  // Admissions the bucket allows at `now_ns` (kUnlimited without a limit).
  int64_t available(int64_t now_ns) const;
  // Takes one admission's token; false when the bucket is empty.
  bool take(int64_t now_ns);
  // Returns a token taken for an admission that did not happen.
  void giveBack();

 private:
  friend class Segment;
  AdmitRate(Layout& layout, WorkerSlots& slots) : Handle(layout, slots) {}
  int64_t reclaim(WorkerSlot) override { return 0; }  // nothing per slot
};

}  // namespace concert::shm
