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
// the two steps leaves Reserved(t, slot), which reclaimDeadWorker finishes.
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
// reaper, and reclaimDeadWorker. finish() does not wake: its one caller (the
// page guard's release) finishes the ticket first and then returns the page
// slot, and releasePage() wakes once for both.
//
// Times in an entry are 32-bit milliseconds (layout.h). The reaper and a
// concurrent poll can race on an expired ticket: the reaper may retire a
// ticket in the instant a poll refreshes it; that ticket was already past
// its TTL when the reaper looked.
#include <algorithm>

#include "shm/nonce.h"
#include "shm/segment_impl.h"

namespace concert::shm {

namespace {

constexpr Millis kPollInterval = 1000;  // rate limit between accepted polls

struct Lookup {
  bool found = false;
  uint64_t word = 0;
};

// The live waiting entry a cookie names, checked by ticket number and nonce.
Lookup findWaiting(const SegmentCore& impl, const TicketCookie& cookie) {
  Lookup result;
  if (cookie.ticket == 0 || cookie.ticket > kMaxTicket || cookie.nonce == 0) return result;
  const TicketEntry& e = impl.entry(cookie.ticket);
  const uint64_t word = e.state.load(std::memory_order_acquire);
  if (entryTicket(word) != cookie.ticket || entryState(word) != EntryState::Waiting) return result;
  if (e.nonce.load(std::memory_order_acquire) != cookie.nonce) return result;
  // The nonce belongs to this ticket only if the entry was not recycled meanwhile.
  if (e.state.load(std::memory_order_acquire) != word) return result;
  result.found = true;
  result.word = word;
  return result;
}

}  // namespace

void SegmentCore::syncBits(uint32_t index) {
  std::atomic<uint64_t>& state = layout.entries[index].state;
  for (;;) {
    const uint64_t word = state.load(std::memory_order_seq_cst);
    const bool waiting = entryState(word) == EntryState::Waiting;
    const bool finished = entryState(word) == EntryState::Finished;
    if (layout.waiting.test(index) != waiting) layout.waiting.set(index, waiting);
    if (layout.finished.test(index) != finished) layout.finished.set(index, finished);
    if (state.load(std::memory_order_seq_cst) == word) return;
  }
}

bool SegmentCore::casEntry(uint64_t ticket, uint64_t& expected, uint64_t desired) {
  if (!entry(ticket).state.compare_exchange_strong(expected, desired, std::memory_order_seq_cst)) return false;
  syncBits(index(ticket));
  return true;
}

void SegmentCore::advanceLowWater() {
  Header& h = *layout.header;
  for (;;) {
    uint64_t low = h.low_water.load(std::memory_order_seq_cst);
    if (low >= h.next_ticket.load(std::memory_order_seq_cst)) return;
    const uint64_t word = entry(low).state.load(std::memory_order_seq_cst);
    if (entryTicket(word) != low || entryState(word) != EntryState::Finished) return;
    h.low_water.compare_exchange_strong(low, low + 1, std::memory_order_seq_cst);
  }
}

void SegmentCore::helpNextTicket() {
  Header& h = *layout.header;
  for (;;) {
    uint64_t next = h.next_ticket.load(std::memory_order_seq_cst);
    if (entryTicket(entry(next).state.load(std::memory_order_seq_cst)) != next) return;
    h.next_ticket.compare_exchange_strong(next, next + 1, std::memory_order_seq_cst);
  }
}

uint64_t SegmentCore::unfinishedBefore(uint64_t ticket) const {
  const uint64_t low = layout.header->low_water.load(std::memory_order_seq_cst);
  if (ticket <= low) return 0;
  const uint64_t span = ticket - low;
  return span - layout.finished.circular(low, ticket);
}

namespace {

int64_t rawPosition(uint64_t ahead, int64_t cap) {
  return static_cast<int64_t>(ahead) - cap + 1;
}

}  // namespace

Issued Segment::issue(WorkerSlot slot, int64_t max_queue, Millis now) {
  Impl& impl = *impl_;
  Header& h = *impl.layout.header;
  Issued out;
  if (max_queue > 0 && (queueDepth() >= max_queue || liveQueueDepth() >= max_queue)) {
    out.outcome = IssueOutcome::Breaker;
    return out;
  }

  uint64_t ticket;
  for (;;) {
    uint64_t next = h.next_ticket.load(std::memory_order_seq_cst);
    uint64_t word = impl.entry(next).state.load(std::memory_order_seq_cst);
    const uint64_t held = entryTicket(word);
    if (held == next) {  // reserved by someone who has not advanced next yet
      h.next_ticket.compare_exchange_strong(next, next + 1, std::memory_order_seq_cst);
      continue;
    }
    if (held > next) continue;  // our `next` is stale
    if (next - h.low_water.load(std::memory_order_seq_cst) >= impl.geometry.ring_size) {
      impl.advanceLowWater();
      if (next - h.low_water.load(std::memory_order_seq_cst) >= impl.geometry.ring_size || next > kMaxTicket) {
        impl.counter(Counter::RingFullTotal).fetch_add(1, std::memory_order_relaxed);
        out.outcome = IssueOutcome::RingFull;
        return out;
      }
      continue;
    }
    if (!impl.casEntry(next, word, packEntry(next, EntryState::Reserved, slot))) continue;
    ticket = next;
    // A helper may have advanced it already; either way it is past our ticket.
    h.next_ticket.compare_exchange_strong(next, ticket + 1, std::memory_order_seq_cst);
    break;
  }

  TicketEntry& e = impl.entry(ticket);
  const uint64_t ahead = impl.unfinishedBefore(ticket);
  const int64_t cap = h.page_cap.load(std::memory_order_seq_cst);
  uint64_t reserved = packEntry(ticket, EntryState::Reserved, slot);
  out.cookie.ticket = ticket;
  if (static_cast<int64_t>(ahead) < cap) {
    impl.casEntry(ticket, reserved, packEntry(ticket, EntryState::InFlight, slot));
    out.outcome = IssueOutcome::Ready;
    return out;
  }
  const uint64_t nonce = randomNonce();
  e.nonce.store(nonce, std::memory_order_relaxed);
  e.last_seen.store(low32(now), std::memory_order_relaxed);
  e.last_poll.store(0, std::memory_order_relaxed);
  impl.layout.cookie_sent[impl.index(ticket)].store(low32(now), std::memory_order_relaxed);
  impl.casEntry(ticket, reserved, packEntry(ticket, EntryState::Waiting, slot));
  impl.counter(Counter::QueuedTotal).fetch_add(1, std::memory_order_relaxed);
  out.outcome = IssueOutcome::Queued;
  out.cookie.nonce = nonce;
  out.position = std::max<int64_t>(1, rawPosition(ahead, cap));
  return out;
}

namespace {

// Retires a waiting ticket found expired; false if someone changed it first.
bool expire(SegmentCore& impl, uint64_t ticket, uint64_t word) {
  if (!impl.casEntry(ticket, word, packEntry(ticket, EntryState::Finished, kOwnerNone))) return false;
  impl.counter(Counter::EvictedTotal).fetch_add(1, std::memory_order_relaxed);
  impl.advanceLowWater();
  return true;
}

void fillPosition(const SegmentCore& impl, uint64_t ticket, TicketView& view) {
  const int64_t cap = impl.layout.header->page_cap.load(std::memory_order_seq_cst);
  view.raw_position = rawPosition(impl.unfinishedBefore(ticket), cap);
  if (view.raw_position <= 0) {
    view.state = TicketState::Ready;
    view.position = 0;
  } else {
    view.state = TicketState::Waiting;
    view.position = view.raw_position;
  }
}

// The lookup render() and poll() share: a live waiting ticket is touched
// (last seen = now) and returned; one past its TTL is retired (the view says
// Expired); anything else leaves the view Unknown.
TicketEntry* touchWaiting(SegmentCore& impl, const TicketCookie& cookie, Millis now, Millis ttl, TicketView& view) {
  const Lookup found = findWaiting(impl, cookie);
  if (!found.found) return nullptr;
  TicketEntry& e = impl.entry(cookie.ticket);
  if (elapsed32(now, e.last_seen.load(std::memory_order_relaxed)) > ttl) {
    if (expire(impl, cookie.ticket, found.word)) view.state = TicketState::Expired;
    return nullptr;
  }
  e.last_seen.store(low32(now), std::memory_order_relaxed);
  return &e;
}

}  // namespace

TicketView Segment::render(const TicketCookie& cookie, Millis now, Millis ttl) {
  Impl& impl = *impl_;
  TicketView view;
  if (!touchWaiting(impl, cookie, now, ttl, view)) {
    if (view.state == TicketState::Expired) wake(Resource::PageSlot);
    return view;
  }
  impl.layout.cookie_sent[impl.index(cookie.ticket)].store(low32(now), std::memory_order_relaxed);
  fillPosition(impl, cookie.ticket, view);
  return view;
}

TicketView Segment::touch(const TicketCookie& cookie, Millis now, Millis ttl) {
  Impl& impl = *impl_;
  TicketView view;
  if (!touchWaiting(impl, cookie, now, ttl, view)) {
    if (view.state == TicketState::Expired) wake(Resource::PageSlot);
    return view;
  }
  fillPosition(impl, cookie.ticket, view);
  return view;
}

TicketView Segment::poll(const TicketCookie& cookie, Millis now, Millis ttl) {
  Impl& impl = *impl_;
  TicketView view;
  TicketEntry* found = touchWaiting(impl, cookie, now, ttl, view);
  if (!found) {
    if (view.state == TicketState::Expired) wake(Resource::PageSlot);
    return view;
  }
  TicketEntry& e = *found;
  const uint32_t last_poll = e.last_poll.load(std::memory_order_relaxed);
  if (last_poll != 0 && elapsed32(now, last_poll) < kPollInterval) {
    fillPosition(impl, cookie.ticket, view);
    view.rate_limited = true;
    return view;
  }
  const uint32_t stamp = low32(now);
  e.last_poll.store(stamp == 0 ? 1 : stamp, std::memory_order_relaxed);
  fillPosition(impl, cookie.ticket, view);
  if (view.state == TicketState::Waiting) {
    std::atomic<uint32_t>& sent = impl.layout.cookie_sent[impl.index(cookie.ticket)];
    if (elapsed32(now, sent.load(std::memory_order_relaxed)) >= ttl / 3) {
      view.refresh_cookie = true;
      sent.store(low32(now), std::memory_order_relaxed);
    }
  }
  return view;
}

bool Segment::claim(const TicketCookie& cookie, WorkerSlot slot) {
  Impl& impl = *impl_;
  Lookup found = findWaiting(impl, cookie);
  if (!found.found) return false;
  const int64_t cap = impl.layout.header->page_cap.load(std::memory_order_seq_cst);
  if (static_cast<int64_t>(impl.unfinishedBefore(cookie.ticket)) >= cap) return false;
  return impl.casEntry(cookie.ticket, found.word, packEntry(cookie.ticket, EntryState::InFlight, slot));
}

void Segment::finish(uint64_t ticket, WorkerSlot slot) {
  Impl& impl = *impl_;
  if (ticket == 0 || ticket > kMaxTicket) return;
  uint64_t word = impl.entry(ticket).state.load(std::memory_order_seq_cst);
  for (;;) {
    if (entryTicket(word) != ticket || entryState(word) != EntryState::InFlight || entryOwner(word) != slot) return;
    if (impl.casEntry(ticket, word, packEntry(ticket, EntryState::Finished, slot))) break;
  }
  impl.advanceLowWater();
}

void Segment::retire(uint64_t ticket, bool timeout) {
  Impl& impl = *impl_;
  if (ticket == 0 || ticket > kMaxTicket) return;
  uint64_t word = impl.entry(ticket).state.load(std::memory_order_seq_cst);
  for (;;) {
    if (entryTicket(word) != ticket) return;
    const EntryState state = entryState(word);
    if (state != EntryState::Waiting && state != EntryState::InFlight) return;
    if (impl.casEntry(ticket, word, packEntry(ticket, EntryState::Finished, entryOwner(word)))) break;
  }
  if (timeout) impl.counter(Counter::TimeoutsTotal).fetch_add(1, std::memory_order_relaxed);
  impl.advanceLowWater();
  wake(Resource::PageSlot);
}

int64_t Segment::queueDepth() const {
  const Impl& impl = *impl_;
  const Header& h = *impl.layout.header;
  const uint64_t next = h.next_ticket.load(std::memory_order_seq_cst);
  const uint64_t low = h.low_water.load(std::memory_order_seq_cst);
  if (low >= next) return 0;
  const int64_t unfinished = static_cast<int64_t>((next - low) - impl.layout.finished.circular(low, next));
  const int64_t depth = unfinished - h.page_cap.load(std::memory_order_seq_cst);
  return depth > 0 ? depth : 0;
}

int64_t Segment::liveQueueDepth() const {
  return static_cast<int64_t>(impl_->layout.waiting.total());
}

int64_t Segment::reapExpired(Millis now, Millis ttl) {
  Impl& impl = *impl_;
  const Header& h = *impl.layout.header;
  const uint64_t next = h.next_ticket.load(std::memory_order_seq_cst);
  int64_t evicted = 0;
  for (uint64_t t = h.low_water.load(std::memory_order_seq_cst); t < next; ++t) {
    TicketEntry& e = impl.entry(t);
    uint64_t word = e.state.load(std::memory_order_seq_cst);
    if (entryTicket(word) != t || entryState(word) != EntryState::Waiting) continue;
    if (elapsed32(now, e.last_seen.load(std::memory_order_relaxed)) <= ttl) continue;
    if (impl.casEntry(t, word, packEntry(t, EntryState::Finished, kOwnerMaster))) ++evicted;
  }
  if (evicted > 0) impl.counter(Counter::EvictedTotal).fetch_add(static_cast<uint64_t>(evicted));
  impl.advanceLowWater();
  if (evicted > 0) wake(Resource::PageSlot);
  return evicted;
}

int64_t SegmentCore::reclaimTickets(WorkerSlot slot) {
  helpNextTicket();
  const Header& h = *layout.header;
  const uint64_t next = h.next_ticket.load(std::memory_order_seq_cst);
  const uint64_t low = h.low_water.load(std::memory_order_seq_cst);
  int64_t finished_count = 0;
  for (uint64_t t = low; t < next; ++t) {
    uint64_t word = entry(t).state.load(std::memory_order_seq_cst);
    if (entryTicket(word) != t || entryOwner(word) != slot) continue;
    const EntryState state = entryState(word);
    if (state != EntryState::Reserved && state != EntryState::InFlight) continue;
    if (casEntry(t, word, packEntry(t, EntryState::Finished, slot))) ++finished_count;
  }
  // The dead worker may have been between a state change and its bitmap
  // update: recompute the bits of every live entry, then every count.
  for (uint64_t t = low; t < next; ++t) syncBits(index(t));
  layout.waiting.rebuild();
  layout.finished.rebuild();
  advanceLowWater();
  return finished_count;
}

}  // namespace concert::shm
