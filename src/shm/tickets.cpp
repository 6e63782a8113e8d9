// The ticket ring's implementation; its states, who writes which word and
// what a SIGKILL leaves behind are in tickets.h.
#include "shm/tickets.h"

#include <algorithm>

#include "shm/layout.h"
#include "shm/nonce.h"
#include "shm/worker_slots.h"

namespace concert::shm {

namespace {

constexpr Millis kPollInterval = 1000;  // rate limit between accepted polls

struct Lookup {
  bool found = false;
  uint64_t word = 0;
};

// The live waiting entry a cookie names, checked by ticket number and nonce.
Lookup findWaiting(const Layout& layout, const TicketCookie& cookie) {
  Lookup result;
  if (cookie.ticket == 0 || cookie.ticket > kMaxTicket || cookie.nonce == 0) return result;
  const TicketEntry& e = layout.entry(cookie.ticket);
  const uint64_t word = e.state.load(std::memory_order_acquire);
  if (entryTicket(word) != cookie.ticket || entryState(word) != EntryState::Waiting) return result;
  if (e.nonce.load(std::memory_order_acquire) != cookie.nonce) return result;
  // The nonce belongs to this ticket only if the entry was not recycled meanwhile.
  if (e.state.load(std::memory_order_acquire) != word) return result;
  result.found = true;
  result.word = word;
  return result;
}

void syncBits(Layout& layout, uint32_t index) {
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

bool casEntry(Layout& layout, uint64_t ticket, uint64_t& expected, uint64_t desired) {
  if (!layout.entry(ticket).state.compare_exchange_strong(expected, desired, std::memory_order_seq_cst)) return false;
  syncBits(layout, layout.index(ticket));
  return true;
}

void advanceLowWater(const Layout& layout) {
  Header& h = *layout.header;
  for (;;) {
    uint64_t low = h.low_water.load(std::memory_order_seq_cst);
    if (low >= h.next_ticket.load(std::memory_order_seq_cst)) return;
    const uint64_t word = layout.entry(low).state.load(std::memory_order_seq_cst);
    if (entryTicket(word) != low || entryState(word) != EntryState::Finished) return;
    h.low_water.compare_exchange_strong(low, low + 1, std::memory_order_seq_cst);
  }
}

void helpNextTicket(const Layout& layout) {
  Header& h = *layout.header;
  for (;;) {
    uint64_t next = h.next_ticket.load(std::memory_order_seq_cst);
    if (entryTicket(layout.entry(next).state.load(std::memory_order_seq_cst)) != next) return;
    h.next_ticket.compare_exchange_strong(next, next + 1, std::memory_order_seq_cst);
  }
}

uint64_t unfinishedBefore(const Layout& layout, uint64_t ticket) {
  const uint64_t low = layout.header->low_water.load(std::memory_order_seq_cst);
  if (ticket <= low) return 0;
  const uint64_t span = ticket - low;
  return span - layout.finished.circular(low, ticket);
}

int64_t rawPosition(uint64_t ahead, int64_t cap) {
  return static_cast<int64_t>(ahead) - cap + 1;
}

}  // namespace

Issued TicketRing::issue(WorkerSlot slot, int64_t max_queue, Millis now) {
  Layout& layout = *layout_;
  Header& h = *layout.header;
  Issued out;
  if (max_queue > 0 && (queueDepth() >= max_queue || liveQueueDepth() >= max_queue)) {
    out.outcome = IssueOutcome::Breaker;
    return out;
  }

  uint64_t ticket;
  for (;;) {
    uint64_t next = h.next_ticket.load(std::memory_order_seq_cst);
    uint64_t word = layout.entry(next).state.load(std::memory_order_seq_cst);
    const uint64_t held = entryTicket(word);
    if (held == next) {  // reserved by someone who has not advanced next yet
      h.next_ticket.compare_exchange_strong(next, next + 1, std::memory_order_seq_cst);
      continue;
    }
    if (held > next) continue;  // our `next` is stale
    if (next - h.low_water.load(std::memory_order_seq_cst) >= layout.geometry.ring_size) {
      advanceLowWater(layout);
      if (next - h.low_water.load(std::memory_order_seq_cst) >= layout.geometry.ring_size || next > kMaxTicket) {
        layout.counter(Counter::RingFullTotal).fetch_add(1, std::memory_order_relaxed);
        out.outcome = IssueOutcome::RingFull;
        return out;
      }
      continue;
    }
    if (!casEntry(layout, next, word, packEntry(next, EntryState::Reserved, slot))) continue;
    ticket = next;
    // A helper may have advanced it already; either way it is past our ticket.
    h.next_ticket.compare_exchange_strong(next, ticket + 1, std::memory_order_seq_cst);
    break;
  }

  TicketEntry& e = layout.entry(ticket);
  const uint64_t ahead = unfinishedBefore(layout, ticket);
  const int64_t cap = h.page_cap.load(std::memory_order_seq_cst);
  uint64_t reserved = packEntry(ticket, EntryState::Reserved, slot);
  out.cookie.ticket = ticket;
  if (static_cast<int64_t>(ahead) < cap) {
    casEntry(layout, ticket, reserved, packEntry(ticket, EntryState::InFlight, slot));
    out.outcome = IssueOutcome::Ready;
    return out;
  }
  const uint64_t nonce = randomNonce();
  e.nonce.store(nonce, std::memory_order_relaxed);
  e.last_seen.store(low32(now), std::memory_order_relaxed);
  e.last_poll.store(0, std::memory_order_relaxed);
  layout.cookie_sent[layout.index(ticket)].store(low32(now), std::memory_order_relaxed);
  casEntry(layout, ticket, reserved, packEntry(ticket, EntryState::Waiting, slot));
  layout.counter(Counter::QueuedTotal).fetch_add(1, std::memory_order_relaxed);
  out.outcome = IssueOutcome::Queued;
  out.cookie.nonce = nonce;
  out.position = std::max<int64_t>(1, rawPosition(ahead, cap));
  return out;
}

namespace {

// Retires a waiting ticket found expired; false if someone changed it first.
bool expire(Layout& layout, uint64_t ticket, uint64_t word) {
  if (!casEntry(layout, ticket, word, packEntry(ticket, EntryState::Finished, kOwnerNone))) return false;
  layout.counter(Counter::EvictedTotal).fetch_add(1, std::memory_order_relaxed);
  advanceLowWater(layout);
  return true;
}

void fillPosition(const Layout& layout, uint64_t ticket, TicketView& view) {
  const int64_t cap = layout.header->page_cap.load(std::memory_order_seq_cst);
  view.raw_position = rawPosition(unfinishedBefore(layout, ticket), cap);
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
TicketEntry* touchWaiting(Layout& layout, const TicketCookie& cookie, Millis now, Millis ttl, TicketView& view) {
  const Lookup found = findWaiting(layout, cookie);
  if (!found.found) return nullptr;
  TicketEntry& e = layout.entry(cookie.ticket);
  if (elapsed32(now, e.last_seen.load(std::memory_order_relaxed)) > ttl) {
    if (expire(layout, cookie.ticket, found.word)) view.state = TicketState::Expired;
    return nullptr;
  }
  e.last_seen.store(low32(now), std::memory_order_relaxed);
  return &e;
}

}  // namespace

TicketView TicketRing::render(const TicketCookie& cookie, Millis now, Millis ttl) {
  Layout& layout = *layout_;
  TicketView view;
  if (!touchWaiting(layout, cookie, now, ttl, view)) {
    if (view.state == TicketState::Expired) slots_->wake(Resource::PageSlot);
    return view;
  }
  layout.cookie_sent[layout.index(cookie.ticket)].store(low32(now), std::memory_order_relaxed);
  fillPosition(layout, cookie.ticket, view);
  return view;
}

TicketView TicketRing::touch(const TicketCookie& cookie, Millis now, Millis ttl) {
  Layout& layout = *layout_;
  TicketView view;
  if (!touchWaiting(layout, cookie, now, ttl, view)) {
    if (view.state == TicketState::Expired) slots_->wake(Resource::PageSlot);
    return view;
  }
  fillPosition(layout, cookie.ticket, view);
  return view;
}

TicketView TicketRing::poll(const TicketCookie& cookie, Millis now, Millis ttl) {
  Layout& layout = *layout_;
  TicketView view;
  TicketEntry* found = touchWaiting(layout, cookie, now, ttl, view);
  if (!found) {
    if (view.state == TicketState::Expired) slots_->wake(Resource::PageSlot);
    return view;
  }
  TicketEntry& e = *found;
  const uint32_t last_poll = e.last_poll.load(std::memory_order_relaxed);
  if (last_poll != 0 && elapsed32(now, last_poll) < kPollInterval) {
    fillPosition(layout, cookie.ticket, view);
    view.rate_limited = true;
    return view;
  }
  const uint32_t stamp = low32(now);
  e.last_poll.store(stamp == 0 ? 1 : stamp, std::memory_order_relaxed);
  fillPosition(layout, cookie.ticket, view);
  if (view.state == TicketState::Waiting) {
    std::atomic<uint32_t>& sent = layout.cookie_sent[layout.index(cookie.ticket)];
    if (elapsed32(now, sent.load(std::memory_order_relaxed)) >= ttl / 3) {
      view.refresh_cookie = true;
      sent.store(low32(now), std::memory_order_relaxed);
    }
  }
  return view;
}

bool TicketRing::claim(const TicketCookie& cookie, WorkerSlot slot) {
  Layout& layout = *layout_;
  Lookup found = findWaiting(layout, cookie);
  if (!found.found) return false;
  const int64_t cap = layout.header->page_cap.load(std::memory_order_seq_cst);
  if (static_cast<int64_t>(unfinishedBefore(layout, cookie.ticket)) >= cap) return false;
  return casEntry(layout, cookie.ticket, found.word, packEntry(cookie.ticket, EntryState::InFlight, slot));
}

void TicketRing::finish(uint64_t ticket, WorkerSlot slot) {
  Layout& layout = *layout_;
  if (ticket == 0 || ticket > kMaxTicket) return;
  uint64_t word = layout.entry(ticket).state.load(std::memory_order_seq_cst);
  for (;;) {
    if (entryTicket(word) != ticket || entryState(word) != EntryState::InFlight || entryOwner(word) != slot) return;
    if (casEntry(layout, ticket, word, packEntry(ticket, EntryState::Finished, slot))) break;
  }
  advanceLowWater(layout);
}

void TicketRing::retire(uint64_t ticket, bool timeout) {
  Layout& layout = *layout_;
  if (ticket == 0 || ticket > kMaxTicket) return;
  uint64_t word = layout.entry(ticket).state.load(std::memory_order_seq_cst);
  for (;;) {
    if (entryTicket(word) != ticket) return;
    const EntryState state = entryState(word);
    if (state != EntryState::Waiting && state != EntryState::InFlight) return;
    if (casEntry(layout, ticket, word, packEntry(ticket, EntryState::Finished, entryOwner(word)))) break;
  }
  if (timeout) layout.counter(Counter::TimeoutsTotal).fetch_add(1, std::memory_order_relaxed);
  advanceLowWater(layout);
  slots_->wake(Resource::PageSlot);
}

int64_t TicketRing::queueDepth() const {
  const Layout& layout = *layout_;
  const Header& h = *layout.header;
  const uint64_t next = h.next_ticket.load(std::memory_order_seq_cst);
  const uint64_t low = h.low_water.load(std::memory_order_seq_cst);
  if (low >= next) return 0;
  const int64_t unfinished = static_cast<int64_t>((next - low) - layout.finished.circular(low, next));
  const int64_t depth = unfinished - h.page_cap.load(std::memory_order_seq_cst);
  return depth > 0 ? depth : 0;
}

int64_t TicketRing::liveQueueDepth() const {
  return static_cast<int64_t>(layout_->waiting.total());
}

int64_t TicketRing::reapExpired(Millis now, Millis ttl) {
  Layout& layout = *layout_;
  const Header& h = *layout.header;
  const uint64_t next = h.next_ticket.load(std::memory_order_seq_cst);
  int64_t evicted = 0;
  for (uint64_t t = h.low_water.load(std::memory_order_seq_cst); t < next; ++t) {
    TicketEntry& e = layout.entry(t);
    uint64_t word = e.state.load(std::memory_order_seq_cst);
    if (entryTicket(word) != t || entryState(word) != EntryState::Waiting) continue;
    if (elapsed32(now, e.last_seen.load(std::memory_order_relaxed)) <= ttl) continue;
    if (casEntry(layout, t, word, packEntry(t, EntryState::Finished, kOwnerMaster))) ++evicted;
  }
  if (evicted > 0) layout.counter(Counter::EvictedTotal).fetch_add(static_cast<uint64_t>(evicted));
  advanceLowWater(layout);
  if (evicted > 0) slots_->wake(Resource::PageSlot);
  return evicted;
}

int64_t TicketRing::reclaim(WorkerSlot slot) {
  Layout& layout = *layout_;
  helpNextTicket(layout);
  const Header& h = *layout.header;
  const uint64_t next = h.next_ticket.load(std::memory_order_seq_cst);
  const uint64_t low = h.low_water.load(std::memory_order_seq_cst);
  int64_t finished_count = 0;
  for (uint64_t t = low; t < next; ++t) {
    uint64_t word = layout.entry(t).state.load(std::memory_order_seq_cst);
    if (entryTicket(word) != t || entryOwner(word) != slot) continue;
    const EntryState state = entryState(word);
    if (state != EntryState::Reserved && state != EntryState::InFlight) continue;
    if (casEntry(layout, t, word, packEntry(t, EntryState::Finished, slot))) ++finished_count;
  }
  // The dead worker may have been between a state change and its bitmap
  // update: recompute the bits of every live entry, then every count.
  for (uint64_t t = low; t < next; ++t) syncBits(layout, layout.index(t));
  layout.waiting.rebuild();
  layout.finished.rebuild();
  advanceLowWater(layout);
  return finished_count;
}

}  // namespace concert::shm
