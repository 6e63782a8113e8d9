// The ticket ring: page admission in FIFO order across every worker,
// lock-free in shared memory.
//
// Numbers: next_ticket is the next number to hand out (the first is 1);
// low_water L is the lowest ticket that may be unfinished (every ticket below
// it is finished). Live tickets are [L, next), at most R of them; ticket t
// lives in entry t mod R.
//
// Entry life (state word = ticket | state | owner, changed only by CAS):
//   Free/old ticket --issuer--> Reserved(t, issuer)
//   Reserved --issuer--> InFlight(t, issuer)        fast path, ready at once
//   Reserved --issuer--> Waiting(t)                 nonce and times written first
//   Waiting  --claim--> InFlight(t, claimer)        ready and nonce matches
//   Waiting  --retire/expire/reap--> Finished
//   InFlight --finish/retire--> Finished
//   Reserved/InFlight of a dead worker --master reclaim--> Finished
// Issuing reserves the entry BEFORE advancing next_ticket (and anyone who
// sees entry(next) already holding number next helps advance it), so every
// number below next has an entry that names it, and a worker killed between
// the two steps leaves Reserved(t, slot), which reclaim() finishes.
// An entry is reused for t + R only when L > t, i.e. t is finished.
//
// Readiness (the window): t is ready iff fewer than cap unfinished tickets
// are ahead of it: ahead(t) = (t - L) - finished[L, t). Position = ahead -
// cap + 1 (>= 1 when waiting). A retired ticket ahead of you is finished, so
// it improves your position at once; one behind you changes nothing. The
// finished and waiting bitmaps (CountedBits) answer the range counts in
// O(log R); each bit is a pure function of its entry's state word, resynced
// by whoever changes the word (syncBits), so a worker killed mid-update
// leaves nothing the master cannot recompute from the words themselves.
//
// Wake-ups: a finished ticket can make waiting tickets ready, and a request
// held on its connection (-queue-hold) only learns that through a PageSlot
// wake-up. Every path that finishes a ticket therefore ends in one, after
// the window has moved: retire(), an expiry found by render/touch/poll, the
// reaper, and reclaim(). finish() does not wake: its one caller (the
// page guard's release) finishes the ticket first and then returns the page
// slot, and the page semaphore's release() wakes once for both.
//
// Who writes: the state word by CAS from anyone (issuer, claimer, finisher,
// retirer, the master's reaper and reclaim); nonce, last_seen, last_poll and
// cookie_sent by the issuer and by touches (render / touch / poll);
// next_ticket and low_water by anyone, forward only, by CAS.
//
// A SIGKILL leaves at most: Reserved or InFlight entries owned by the dead
// slot (reclaim() finishes them), bitmap bits or counts that disagree with
// the state words (reclaim() resyncs every live entry's bits and rebuilds
// the counts), and next_ticket one behind an entry that already names the
// next number (the next issuer, or reclaim, helps it forward). Waiting
// entries belong to visitors' cookies, not to the worker that issued them,
// and stay in line.
//
// Times in an entry are 32-bit milliseconds (layout.h). The reaper and a
// concurrent poll can race on an expired ticket: the reaper may retire a
// ticket in the instant a poll refreshes it; that ticket was already past
// its TTL when the reaper looked.
#pragma once

#include <cstdint>

#include "shm/handle.h"
#include "shm/types.h"

namespace concert::shm {

class TicketRing final : public Handle {
 public:
  using Handle::Handle;

  // A new arrival. Applies the breaker first (max_queue > 0 and either
  // queueDepth() >= max_queue or liveQueueDepth() >= max_queue). On Ready the
  // ticket is already claimed for `slot` (in flight, owned by slot); the caller
  // still takes a page slot from the page semaphore. On Queued the ticket
  // waits; queued_total is counted here.
  Issued issue(WorkerSlot slot, int64_t max_queue, Millis now);

  // Waiting-page render of a known ticket: touches it (last seen = now,
  // cookie sent = now) and returns its state. Expired tickets are retired
  // (and PageSlot waiters woken, as for every path that finishes a ticket).
  TicketView render(const TicketCookie& cookie, Millis now, Millis ttl);

  // A held request's recheck (-queue-hold): touches the ticket like render()
  // (last seen = now; expired tickets are retired) but leaves the "cookie
  // sent" time alone, since no cookie is sent while the request is held.
  TicketView touch(const TicketCookie& cookie, Millis now, Millis ttl);

  // /queue/status poll: as render, plus the 1-second rate limit (a limited
  // poll still touches the ticket) and refresh_cookie after ttl/3.
  // An expired ticket is retired and counted in evicted_total.
  TicketView poll(const TicketCookie& cookie, Millis now, Millis ttl);

  // Ready ticket -> in flight, owned by `slot`. False if it is not (or no
  // longer) a live ready ticket: treat the request as a new arrival.
  bool claim(const TicketCookie& cookie, WorkerSlot slot);

  // The in-flight ticket's request ended (completed, client gone, error).
  // Does not wake anyone: the caller returns the page slot right after
  // (the page semaphore's release wakes PageSlot waiters once the window has
  // moved too), or wakes PageSlot waiters itself when it held no slot.
  void finish(uint64_t ticket, WorkerSlot slot);

  // A waiting ticket that will never be admitted (client gone while waiting
  // for a slot, token failure). Counted in timeouts_total when `timeout`.
  // Wakes PageSlot waiters: tickets behind it may have become ready.
  void retire(uint64_t ticket, bool timeout);

  int64_t queueDepth() const;      // unfinished tickets - cap, floored at 0
  int64_t liveQueueDepth() const;  // tickets holding a cookie (waiting or ready, not yet claimed)

  // Master janitor: retire waiting tickets unseen for longer than `ttl`, in
  // batches, lock-free. Returns how many were evicted (evicted_total += that);
  // wakes PageSlot waiters when it evicted any.
  int64_t reapExpired(Millis now, Millis ttl);

 private:
  int64_t reclaim(WorkerSlot slot) override;  // finishes its Reserved/InFlight tickets
};

}  // namespace concert::shm
