// The ticket ring; see tickets.h for the states, the order of admission and
// what a SIGKILL leaves behind.
#include "shm/tickets.h"

#include <algorithm>
#include <cstring>

#include "shm/clients.h"
#include "shm/layout.h"
#include "shm/sale.h"
#include "shm/line_rate.h"
#include "shm/nonce.h"
#include "shm/semaphore.h"
#include "shm/worker_slots.h"

namespace concert::shm {

namespace {

constexpr Millis kPollInterval = 1000;  // rate limit between accepted polls

constexpr int64_t kEveryone = int64_t{1} << 62;  // free slots in passthrough: more than any line

constexpr int kRandomPicks = 16;  // random draws for a pre-queue place before walking the block

bool inLine(EntryState s) {
  return s == EntryState::Waiting || s == EntryState::Returned;
}

// The live entry a cookie names (waiting, returned or missed), checked by
// ticket number and nonce; 0 when there is none.
uint64_t findLive(const Layout& layout, const TicketCookie& cookie) {
  if (cookie.ticket == 0 || cookie.ticket > kMaxTicket || cookie.nonce == 0) return 0;
  const TicketEntry& e = layout.entry(cookie.ticket);
  const uint64_t word = e.state.load(std::memory_order_acquire);
  if (entryTicket(word) != cookie.ticket) return 0;
  const EntryState state = entryState(word);
  if (!inLine(state) && state != EntryState::Missed) return 0;
  if (e.nonce.load(std::memory_order_acquire) != cookie.nonce) return 0;
  // The nonce belongs to this ticket only if the entry was not recycled meanwhile.
  if (e.state.load(std::memory_order_acquire) != word) return 0;
  return word;
}

void syncBits(Layout& layout, uint32_t index) {
  std::atomic<uint64_t>& state = layout.entries[index].state;
  for (;;) {
    const uint64_t word = state.load(std::memory_order_seq_cst);
    const EntryState s = entryState(word);
    // A ticket being issued counts as waiting from the moment its number
    // is taken: it is ahead of every later number, and turning it Waiting
    // must move nobody back.
    const bool waiting = s == EntryState::Waiting || s == EntryState::Reserved;
    const bool returned = s == EntryState::Returned;
    const bool missed = s == EntryState::Missed;
    // A Vacant number of the sale's block holds nobody: nobody is behind it.
    const bool out = s == EntryState::Finished || missed || returned || s == EntryState::Vacant;
    if (layout.out.test(index) != out) layout.out.set(index, out);
    if (layout.waiting.test(index) != waiting) layout.waiting.set(index, waiting);
    if (layout.returned.test(index) != returned) layout.returned.set(index, returned);
    if (layout.missed.test(index) != missed) layout.missed.set(index, missed);
    if (state.load(std::memory_order_seq_cst) == word) return;
  }
}

bool casEntry(Layout& layout, uint64_t ticket, uint64_t& expected, uint64_t desired) {
  if (!layout.entry(ticket).state.compare_exchange_strong(expected, desired, std::memory_order_seq_cst)) return false;
  syncBits(layout, layout.index(ticket));
  return true;
}

// Numbers in the sale's pre-queue block (a power of two: random places are
// drawn with a mask).
uint64_t blockSize(const Layout& layout) {
  return layout.geometry.ring_size / 2;
}

// Whether `ticket` is a number of a block that is opening or open: one an
// arrival may still take, whatever its entry holds now.
bool inOpenBlock(const Layout& layout, uint64_t ticket) {
  const uint64_t block = layout.header->sale.block.load(std::memory_order_seq_cst);
  const BlockPhase phase = blockPhase(block);
  if (phase != BlockPhase::Opening && phase != BlockPhase::Open) return false;
  const uint64_t first = entryTicket(block);
  return ticket >= first && ticket < first + blockSize(layout);
}

// L moves past every ticket that is no longer Reserved or Waiting, and never
// into an open pre-queue block (its numbers may still be taken).
void advanceLowWater(const Layout& layout) {
  Header& h = *layout.header;
  for (;;) {
    uint64_t low = h.low_water.load(std::memory_order_seq_cst);
    if (low >= h.next_ticket.load(std::memory_order_seq_cst)) return;
    if (inOpenBlock(layout, low)) return;
    const uint64_t word = layout.entry(low).state.load(std::memory_order_seq_cst);
    if (entryTicket(word) == low) {
      const EntryState s = entryState(word);
      if (s == EntryState::Reserved || s == EntryState::Waiting || s == EntryState::Free || s == EntryState::Vacant)
        return;
    }
    h.low_water.compare_exchange_strong(low, low + 1, std::memory_order_seq_cst);
  }
}

// How far next_ticket moves past an entry that already names `next`: one,
// or the whole block past a block's head (the only Vacant entry next can
// ever point at).
uint64_t nextStep(const Layout& layout, uint64_t word) {
  return entryState(word) == EntryState::Vacant ? blockSize(layout) : 1;
}

void helpNextTicket(const Layout& layout) {
  Header& h = *layout.header;
  for (;;) {
    uint64_t next = h.next_ticket.load(std::memory_order_seq_cst);
    const uint64_t word = layout.entry(next).state.load(std::memory_order_seq_cst);
    if (entryTicket(word) != next) return;
    h.next_ticket.compare_exchange_strong(next, next + nextStep(layout, word), std::memory_order_seq_cst);
  }
}

// Tickets ahead of `ticket` in the line (waiting, or still being issued).
// Counted as the span to L less the entries that left the line: a bit in
// `out` is only ever set for a number in [L, ticket) (an entry below L is
// reused only for numbers past `ticket`), so a count read while another
// process is between a state change and its bit update can only be too
// high, never lower than an earlier one: a position never grows.
int64_t waitingAhead(const Layout& layout, uint64_t ticket) {
  const uint64_t low = layout.header->low_water.load(std::memory_order_seq_cst);
  if (ticket <= low) return 0;
  return static_cast<int64_t>((ticket - low) - layout.out.circular(low, ticket));
}

// Can an entry hold ticket `next` now? Its old ticket must be out of the line
// (a missed one loses its place; a returned one is kept).
bool reusable(uint64_t word) {
  const EntryState s = entryState(word);
  return s == EntryState::Free || s == EntryState::Finished || s == EntryState::Missed;
}

// The ticket that the entry of number `t` stands for in a walk over the
// numbers [next - R, next): `t` itself, or an older Returned ticket the ring
// has carried past (it keeps its entry, and later numbers of that entry are
// skipped until it leaves); 0 for neither.
uint64_t walkTicket(uint64_t t, uint64_t word) {
  const uint64_t held = entryTicket(word);
  if (held == t) return t;
  if (held != 0 && held < t && entryState(word) == EntryState::Returned) return held;
  return 0;
}

}  // namespace

LineFlow TicketRing::flow() const {
  return gate_ ? gate_->flow() : LineFlow::ByCap;
}

int64_t TicketRing::freeSlots(int64_t own) const {
  switch (flow()) {
    case LineFlow::Still: return 0;
    case LineFlow::Everyone: return kEveryone;
    case LineFlow::ByCap: break;
  }
  const int64_t free = static_cast<int64_t>(pages_->cap()) - pages_->occupancy() + own;
  return gate_ ? gate_->lineFree(free, liveQueueDepth()) : free;
}

void TicketRing::fillView(uint64_t ticket, uint64_t word, TicketView& view) const {
  const Layout& layout = *layout_;
  const int64_t ahead = waitingAhead(layout, ticket);
  const int64_t free = freeSlots(0);
  const bool ready = entryState(word) == EntryState::Returned
                         ? free > 0
                         : ahead + static_cast<int64_t>(layout.returned.total()) < free;
  view.state = ready ? TicketState::Ready : TicketState::Waiting;
  view.raw_position = ahead + 1;
  view.position = ready ? 0 : view.raw_position;
}

Issued TicketRing::issue(WorkerSlot slot, int64_t max_queue, Millis now, const ClientTicketing* client) {
  Layout& layout = *layout_;
  Header& h = *layout.header;
  Issued out;
  uint32_t tracked = Clients::kNone;  // the client's entry, counted one more ticket
  if (client != nullptr && clients_->enter(*client, now, slot, &tracked) == Clients::Enter::Limit) {
    out.outcome = IssueOutcome::ClientLimit;
    return out;
  }
  auto giveBack = [&] {
    if (tracked != Clients::kNone) clients_->giveBack(tracked);
  };
  if (max_queue > 0 && liveQueueDepth() >= max_queue) {
    giveBack();
    out.outcome = IssueOutcome::Breaker;
    return out;
  }

  uint64_t previous = 0;  // the entry's old ticket
  uint64_t ticket = 0;
  if (h.sale.shuffle.load(std::memory_order_seq_cst) != 0 && inPrequeue(h.sale, unixMs()))
    ticket = placeInBlock(slot, previous);
  if (ticket == 0) ticket = takeNext(slot, previous);
  if (ticket == 0) {
    layout.counter(Counter::RingFullTotal).fetch_add(1, std::memory_order_relaxed);
    giveBack();
    out.outcome = IssueOutcome::RingFull;
    return out;
  }

  // The old ticket leaves its client, if nobody did yet: a Missed one loses
  // its place here; a Finished one's leaver may have died or be slow.
  if (previous != 0) clients_->leave(layout.index(ticket), previous);
  TicketEntry& e = layout.entry(ticket);
  const uint64_t nonce = randomNonce();
  layout.client_tags[layout.index(ticket)].store(
      tracked != Clients::kNone ? packClientTag(ticket, layout.ring_bits, tracked) : 0, std::memory_order_seq_cst);
  e.nonce.store(nonce, std::memory_order_relaxed);
  e.last_seen.store(low32(now), std::memory_order_relaxed);
  e.last_poll.store(0, std::memory_order_relaxed);
  e.ready_since.store(0, std::memory_order_relaxed);
  e.seen.store(0, std::memory_order_relaxed);
  layout.cookie_sent[layout.index(ticket)].store(low32(now), std::memory_order_relaxed);
  layout.issued_at[layout.index(ticket)].store(low32(now), std::memory_order_relaxed);
  uint64_t reserved = packEntry(ticket, EntryState::Reserved, slot);
  const uint64_t waiting = packEntry(ticket, EntryState::Waiting, slot);
  casEntry(layout, ticket, reserved, waiting);
  layout.counter(Counter::QueuedTotal).fetch_add(1, std::memory_order_relaxed);
  out.outcome = IssueOutcome::Queued;
  out.cookie = TicketCookie{ticket, nonce};
  TicketView view;
  fillView(ticket, waiting, view);
  out.position = std::max<int64_t>(1, view.raw_position);
  out.ready = view.state == TicketState::Ready;
  return out;
}

uint64_t TicketRing::takeNext(WorkerSlot slot, uint64_t& previous) {
  Layout& layout = *layout_;
  Header& h = *layout.header;
  uint64_t skipped = 0;
  for (;;) {
    uint64_t next = h.next_ticket.load(std::memory_order_seq_cst);
    uint64_t word = layout.entry(next).state.load(std::memory_order_seq_cst);
    const uint64_t held = entryTicket(word);
    if (held == next) {  // reserved by someone who has not advanced next yet (or a block's head)
      h.next_ticket.compare_exchange_strong(next, next + nextStep(layout, word), std::memory_order_seq_cst);
      continue;
    }
    if (held > next) continue;  // our `next` is stale
    if (next - h.low_water.load(std::memory_order_seq_cst) >= layout.geometry.ring_size || !reusable(word)) {
      advanceLowWater(layout);
      if (next > kMaxTicket) return 0;
      // Every entry holds someone who waits (or is being issued): full.
      if (liveQueueDepth() >= static_cast<int64_t>(layout.geometry.ring_size)) return 0;
      uint64_t low = h.low_water.load(std::memory_order_seq_cst);
      if (next - low >= layout.geometry.ring_size) {
        // The oldest waiting ticket is a whole ring behind: the ring bounds
        // the visitors who wait, not the span of numbers, so it is carried
        // (Returned: it keeps its number, its entry and its place at the
        // head) and L moves on. Nobody's position grows: one waiting ticket
        // ahead of everyone becomes one returned ticket ahead of everyone.
        if (!carry(low)) return 0;  // Reserved (being issued) or a block's number: full for now
        advanceLowWater(layout);
        continue;
      }
      word = layout.entry(next).state.load(std::memory_order_seq_cst);
      if (entryTicket(word) < next && entryState(word) == EntryState::Returned) {
        // A returned ticket keeps its entry: this number is skipped (at most
        // a ring's worth in one call: some entry is free, as fewer than R wait).
        if (++skipped > layout.geometry.ring_size) return 0;
        h.next_ticket.compare_exchange_strong(next, next + 1, std::memory_order_seq_cst);
        continue;
      }
      if (entryTicket(word) < next && !reusable(word)) return 0;
      continue;
    }
    if (!casEntry(layout, next, word, packEntry(next, EntryState::Reserved, slot))) continue;
    previous = entryTicket(word);
    const uint64_t ticket = next;  // a failed CAS below overwrites `next`
    // A helper may have advanced it already; either way it is past our ticket.
    h.next_ticket.compare_exchange_strong(next, ticket + 1, std::memory_order_seq_cst);
    return ticket;
  }
}

bool TicketRing::carry(uint64_t ticket) {
  Layout& layout = *layout_;
  uint64_t word = layout.entry(ticket).state.load(std::memory_order_seq_cst);
  for (;;) {
    if (entryTicket(word) != ticket || entryState(word) != EntryState::Waiting || inOpenBlock(layout, ticket))
      return false;
    layout.entry(ticket).ready_since.store(0, std::memory_order_relaxed);
    if (casEntry(layout, ticket, word, packEntry(ticket, EntryState::Returned, entryOwner(word)))) return true;
  }
}

uint64_t TicketRing::openBlock(WorkerSlot slot) {
  Layout& layout = *layout_;
  Header& h = *layout.header;
  const uint64_t size = blockSize(layout);
  for (;;) {
    uint64_t block = h.sale.block.load(std::memory_order_seq_cst);
    switch (blockPhase(block)) {
      case BlockPhase::Open: return block;
      case BlockPhase::Opening:
        if (!finishOpening(block)) return 0;  // its opener is between two steps: not ours to undo
        continue;
      case BlockPhase::Idle: break;
      case BlockPhase::Closing:
      case BlockPhase::Done: return 0;  // this schedule's block is spent
    }
    uint64_t next = h.next_ticket.load(std::memory_order_seq_cst);
    const uint64_t word = layout.entry(next).state.load(std::memory_order_seq_cst);
    const uint64_t held = entryTicket(word);
    if (held == next) {
      helpNextTicket(layout);
      continue;
    }
    if (held > next) continue;  // our `next` is stale
    advanceLowWater(layout);
    // The whole block and what is live before it must fit in the ring, and
    // every number of it then lies a ring or more past its entry's old
    // ticket, which is below L (reusable, or a Returned ticket kept there).
    if (next + size - h.low_water.load(std::memory_order_seq_cst) > layout.geometry.ring_size ||
        next + size > kMaxTicket || !reusable(word))
      return 0;
    const uint64_t opening = packBlock(next, BlockPhase::Opening, slot);
    if (!h.sale.block.compare_exchange_strong(block, opening, std::memory_order_seq_cst)) continue;
    uint64_t expected = word;
    if (!casEntry(layout, next, expected, packEntry(next, EntryState::Vacant, slot))) {
      // An issuer took that number first: give the block word back, try again.
      uint64_t mine = opening;
      h.sale.block.compare_exchange_strong(mine, packBlock(0, BlockPhase::Idle, 0), std::memory_order_seq_cst);
      continue;
    }
    if (entryTicket(word) != 0) clients_->leave(layout.index(next), entryTicket(word));
    finishOpening(opening);
    vacateBlock(next);
  }
}

void TicketRing::vacateBlock(uint64_t first) {
  Layout& layout = *layout_;
  for (uint64_t t = first; t < first + blockSize(layout); ++t) {
    uint64_t word = layout.entry(t).state.load(std::memory_order_seq_cst);
    const uint64_t held = entryTicket(word);
    if (held >= t || !reusable(word)) continue;
    if (casEntry(layout, t, word, packEntry(t, EntryState::Vacant, kOwnerNone)) && held != 0)
      clients_->leave(layout.index(t), held);
  }
}

bool TicketRing::finishOpening(uint64_t block) {
  Layout& layout = *layout_;
  Header& h = *layout.header;
  const uint64_t first = entryTicket(block);
  const uint64_t head = layout.entry(first).state.load(std::memory_order_seq_cst);
  if (entryTicket(head) != first || entryState(head) != EntryState::Vacant) return false;
  uint64_t next = first;
  h.next_ticket.compare_exchange_strong(next, first + blockSize(layout), std::memory_order_seq_cst);
  h.sale.block.compare_exchange_strong(block, packBlock(first, BlockPhase::Open, 0), std::memory_order_seq_cst);
  return true;
}

uint64_t TicketRing::placeInBlock(WorkerSlot slot, uint64_t& previous) {
  Layout& layout = *layout_;
  Header& h = *layout.header;
  const uint64_t block = openBlock(slot);
  if (block == 0) return 0;
  const uint64_t first = entryTicket(block);
  const uint64_t mask = blockSize(layout) - 1;
  // A number of the block nobody holds: Vacant, or its entry still holding
  // an old ticket out of the line (the janitor had not vacated it yet).
  auto take = [&](uint64_t t) {
    uint64_t word = layout.entry(t).state.load(std::memory_order_seq_cst);
    const uint64_t held = entryTicket(word);
    const bool vacant = held == t && entryState(word) == EntryState::Vacant;
    if (!vacant && !(held < t && reusable(word))) return false;
    if (!casEntry(layout, t, word, packEntry(t, EntryState::Reserved, slot))) return false;
    previous = vacant ? 0 : held;
    return true;
  };
  uint64_t ticket = 0;
  for (int pick = 0; pick < kRandomPicks && ticket == 0; ++pick) {
    const uint64_t t = first + (randomNonce() & mask);
    if (take(t)) ticket = t;
  }
  // Nearly full: a walk from a random place finds what is left.
  const uint64_t from = ticket == 0 ? randomNonce() : 0;
  for (uint64_t i = 0; i <= mask && ticket == 0; ++i) {
    const uint64_t t = first + ((from + i) & mask);
    if (take(t)) ticket = t;
  }
  if (ticket == 0) return 0;  // the block is full: after it, in arrival order
  if (h.sale.block.load(std::memory_order_seq_cst) == block) return ticket;
  // The pre-queue closed while we took the place: the closer may have
  // finished the numbers around it already and L may pass them, so the
  // place is given back and the arrival goes to the back of the line.
  if (previous != 0) clients_->leave(layout.index(ticket), previous);
  previous = 0;
  uint64_t reserved = packEntry(ticket, EntryState::Reserved, slot);
  casEntry(layout, ticket, reserved, packEntry(ticket, EntryState::Finished, slot));
  advanceLowWater(layout);
  return 0;
}

SaleTick TicketRing::saleTick(int64_t unix_ms) {
  Layout& layout = *layout_;
  Header& h = *layout.header;
  SaleTick report;
  const uint64_t size = blockSize(layout);
  const bool window = h.sale.shuffle.load(std::memory_order_seq_cst) != 0 && inPrequeue(h.sale, unix_ms);
  uint64_t block = h.sale.block.load(std::memory_order_seq_cst);
  if (window) {
    block = openBlock(kOwnerMaster);
    if (block == 0) return report;
    report.first = entryTicket(block);
    report.open = true;
    vacateBlock(report.first);  // what an opener killed midway left
    return report;
  }
  if (blockPhase(block) == BlockPhase::Open)
    h.sale.block.compare_exchange_strong(block, packBlock(entryTicket(block), BlockPhase::Closing, 0),
                                         std::memory_order_seq_cst);
  block = h.sale.block.load(std::memory_order_seq_cst);
  if (blockPhase(block) != BlockPhase::Closing) return report;
  // Closing: every number nobody took becomes Finished, so L can pass it.
  // A place taken meanwhile is a ticket (its taker sees Closing and gives
  // it back, or saw Open before this pass began and keeps it).
  report.first = entryTicket(block);
  for (uint64_t t = report.first; t < report.first + size; ++t) {
    uint64_t word = layout.entry(t).state.load(std::memory_order_seq_cst);
    for (;;) {
      const uint64_t held = entryTicket(word);
      const bool vacant = held == t && entryState(word) == EntryState::Vacant;
      if (!vacant && !(held < t && reusable(word))) {
        if (held == t && entryState(word) != EntryState::Finished) ++report.placed;
        break;
      }
      if (casEntry(layout, t, word, packEntry(t, EntryState::Finished, kOwnerMaster))) {
        if (!vacant && held != 0) clients_->leave(layout.index(t), held);
        break;
      }
    }
  }
  h.sale.block.compare_exchange_strong(block, packBlock(report.first, BlockPhase::Done, 0), std::memory_order_seq_cst);
  report.closed = true;
  advanceLowWater(layout);
  slots_->wake(Resource::PageSlot);
  return report;
}

TicketEntry* TicketRing::touchLive(const TicketCookie& cookie, Millis now, Millis ttl, Contact contact,
                                   TicketView& view) {
  Layout& layout = *layout_;
  uint64_t word = findLive(layout, cookie);
  if (word == 0) return nullptr;
  TicketEntry& e = layout.entry(cookie.ticket);
  if (elapsed32(now, e.last_seen.load(std::memory_order_relaxed)) > ttl) {
    if (casEntry(layout, cookie.ticket, word, packEntry(cookie.ticket, EntryState::Finished, kOwnerNone))) {
      clients_->leave(layout.index(cookie.ticket), cookie.ticket);
      layout.counter(Counter::EvictedTotal).fetch_add(1, std::memory_order_relaxed);
      layout.counter(Counter::EvictedTtlTotal).fetch_add(1, std::memory_order_relaxed);
      advanceLowWater(layout);
      view.state = TicketState::Expired;
      slots_->wake(Resource::PageSlot);
    }
    return nullptr;
  }
  e.last_seen.store(low32(now), std::memory_order_relaxed);
  if (contact != Contact::Own) e.seen.store(1, std::memory_order_relaxed);
  if (contact == Contact::Page && entryState(word) == EntryState::Missed) {
    // Its holder is back for the page: ahead of the line from now on.
    const uint64_t returned = packEntry(cookie.ticket, EntryState::Returned, entryOwner(word));
    e.ready_since.store(0, std::memory_order_relaxed);
    if (casEntry(layout, cookie.ticket, word, returned)) {
      word = returned;
    } else {
      word = findLive(layout, cookie);
      if (word == 0) return nullptr;
    }
  }
  fillView(cookie.ticket, word, view);
  return &e;
}

TicketView TicketRing::peek(const TicketCookie& cookie) const {
  TicketView view;
  const uint64_t word = findLive(*layout_, cookie);
  if (word != 0) fillView(cookie.ticket, word, view);
  return view;
}

TicketView TicketRing::render(const TicketCookie& cookie, Millis now, Millis ttl, Contact contact) {
  TicketView view;
  if (touchLive(cookie, now, ttl, contact, view))
    layout_->cookie_sent[layout_->index(cookie.ticket)].store(low32(now), std::memory_order_relaxed);
  return view;
}

TicketView TicketRing::touch(const TicketCookie& cookie, Millis now, Millis ttl, Contact contact) {
  TicketView view;
  touchLive(cookie, now, ttl, contact, view);
  return view;
}

TicketView TicketRing::poll(const TicketCookie& cookie, Millis now, Millis ttl) {
  Layout& layout = *layout_;
  TicketView view;
  TicketEntry* found = touchLive(cookie, now, ttl, Contact::Look, view);
  if (!found) return view;
  TicketEntry& e = *found;
  const uint32_t last_poll = e.last_poll.load(std::memory_order_relaxed);
  if (last_poll != 0 && elapsed32(now, last_poll) < kPollInterval) {
    view.rate_limited = true;
    return view;
  }
  const uint32_t stamp = low32(now);
  e.last_poll.store(stamp == 0 ? 1 : stamp, std::memory_order_relaxed);
  if (view.state == TicketState::Waiting) {
    std::atomic<uint32_t>& sent = layout.cookie_sent[layout.index(cookie.ticket)];
    if (elapsed32(now, sent.load(std::memory_order_relaxed)) >= ttl / 3) {
      view.refresh_cookie = true;
      sent.store(low32(now), std::memory_order_relaxed);
    }
  }
  return view;
}

bool TicketRing::claim(const TicketCookie& cookie, Claimed* claimed) {
  Layout& layout = *layout_;
  uint64_t word = findLive(layout, cookie);
  if (word == 0 || !inLine(entryState(word))) return false;
  const LineFlow flow_now = flow();
  if (flow_now == LineFlow::Still) return false;
  const int64_t free = freeSlots(1);
  if (entryState(word) == EntryState::Waiting &&
      waitingAhead(layout, cookie.ticket) + static_cast<int64_t>(layout.returned.total()) >= free)
    return false;
  // When every turn has come there is no cap and so no rate: only a line
  // that moves by the cap spends tokens.
  const bool metered = flow_now == LineFlow::ByCap && gate_ != nullptr;
  const LineToken token = metered ? gate_->takeToken() : LineToken::Unmetered;
  if (token == LineToken::Refused) return false;
  if (!casEntry(layout, cookie.ticket, word, packEntry(cookie.ticket, EntryState::Finished, entryOwner(word)))) {
    if (token == LineToken::Taken) gate_->giveBackToken();
    return false;
  }
  clients_->leave(layout.index(cookie.ticket), cookie.ticket);
  // Everyone behind a Waiting ticket moved one place; a Returned one went
  // in ahead of the line and moved nobody (line_rate.h).
  const bool from_line = entryState(word) == EntryState::Waiting;
  if (from_line) line_rate_->admitted();
  // When everyone's turn has come at once there is no order to invert.
  const bool inversion = from_line && flow_now == LineFlow::ByCap &&
                         waitingAhead(layout, cookie.ticket) >= pages_->cap();
  if (inversion) layout.counter(Counter::FifoInversionsTotal).fetch_add(1, std::memory_order_relaxed);
  if (claimed) {
    claimed->from_line = from_line;
    claimed->waited = std::max<Millis>(0, elapsed32(monotonicMs(), layout.issued_at[layout.index(cookie.ticket)].load(std::memory_order_relaxed)));
    claimed->inversion = inversion;
  }
  advanceLowWater(layout);
  return true;
}

void TicketRing::retire(uint64_t ticket, bool timeout) {
  Layout& layout = *layout_;
  if (ticket == 0 || ticket > kMaxTicket) return;
  uint64_t word = layout.entry(ticket).state.load(std::memory_order_seq_cst);
  for (;;) {
    if (entryTicket(word) != ticket) return;
    const EntryState state = entryState(word);
    if (!inLine(state) && state != EntryState::Missed) return;
    if (casEntry(layout, ticket, word, packEntry(ticket, EntryState::Finished, entryOwner(word)))) break;
  }
  clients_->leave(layout.index(ticket), ticket);
  if (timeout) {
    layout.counter(Counter::TimeoutsTotal).fetch_add(1, std::memory_order_relaxed);
    layout.counter(Counter::TimeoutsQueueHoldTotal).fetch_add(1, std::memory_order_relaxed);
  }
  advanceLowWater(layout);
  slots_->wake(Resource::PageSlot);
}

std::optional<uint64_t> TicketRing::nonceOf(uint64_t ticket) const {
  const Layout& layout = *layout_;
  if (ticket == 0 || ticket > kMaxTicket) return std::nullopt;
  const TicketEntry& e = layout.entry(ticket);
  const uint64_t word = e.state.load(std::memory_order_seq_cst);
  const EntryState state = entryState(word);
  if (entryTicket(word) != ticket || (!inLine(state) && state != EntryState::Missed)) return std::nullopt;
  const uint64_t nonce = e.nonce.load(std::memory_order_seq_cst);
  // Written before the entry turned Waiting; the word unchanged means it is this ticket's.
  if (e.state.load(std::memory_order_seq_cst) != word) return std::nullopt;
  return nonce;
}

bool TicketRing::remove(uint64_t ticket, Counter counted) {
  Layout& layout = *layout_;
  if (ticket == 0 || ticket > kMaxTicket) return false;
  uint64_t word = layout.entry(ticket).state.load(std::memory_order_seq_cst);
  for (;;) {
    if (entryTicket(word) != ticket) return false;
    const EntryState state = entryState(word);
    if (!inLine(state) && state != EntryState::Missed) return false;
    if (casEntry(layout, ticket, word, packEntry(ticket, EntryState::Finished, entryOwner(word)))) break;
  }
  clients_->leave(layout.index(ticket), ticket);
  layout.counter(counted).fetch_add(1, std::memory_order_relaxed);
  advanceLowWater(layout);
  slots_->wake(Resource::PageSlot);
  return true;
}

std::vector<LineEntry> TicketRing::head(size_t limit, Millis now) const {
  const Layout& layout = *layout_;
  std::vector<LineEntry> out;
  const uint64_t next = layout.header->next_ticket.load(std::memory_order_seq_cst);
  for (uint64_t t = layout.header->low_water.load(std::memory_order_seq_cst); t < next && out.size() < limit; ++t) {
    const TicketEntry& e = layout.entry(t);
    const uint64_t word = e.state.load(std::memory_order_seq_cst);
    const EntryState state = entryState(word);
    if (entryTicket(word) != t || (state != EntryState::Waiting && state != EntryState::Returned)) continue;
    LineEntry line;
    line.ticket = t;
    line.returned = state == EntryState::Returned;
    line.age = std::max<Millis>(0, elapsed32(now, layout.issued_at[layout.index(t)].load(std::memory_order_relaxed)));
    line.unseen = std::max<Millis>(0, elapsed32(now, e.last_seen.load(std::memory_order_relaxed)));
    const uint32_t tag = layout.client_tags[layout.index(t)].load(std::memory_order_relaxed);
    if (tagNames(tag, t, layout.ring_bits) && tagClient(tag) < layout.geometry.client_table_size) {
      const ClientEntry& client = layout.clients[tagClient(tag)];
      const uint64_t key[2] = {client.key[0].load(std::memory_order_relaxed), client.key[1].load(std::memory_order_relaxed)};
      std::memcpy(line.client, key, sizeof line.client);
      line.has_client = true;
    }
    out.push_back(line);
  }
  return out;
}

int64_t TicketRing::queueDepth() const {
  return liveQueueDepth() + static_cast<int64_t>(layout_->missed.total());
}

int64_t TicketRing::liveQueueDepth() const {
  return static_cast<int64_t>(layout_->waiting.total() + layout_->returned.total());
}

SweepReport TicketRing::sweep(Millis now, const SweepLimits& limits) {
  Layout& layout = *layout_;
  const Header& h = *layout.header;
  const uint64_t next = h.next_ticket.load(std::memory_order_seq_cst);
  const uint64_t ring = layout.geometry.ring_size;
  const uint64_t first = next > ring ? next - ring : 1;
  const int64_t free = freeSlots(0);
  const int64_t returned_total = static_cast<int64_t>(layout.returned.total());
  SweepReport report;
  int64_t returned_seen = 0;
  int64_t waiting_seen = 0;  // waiting tickets ahead of the one looked at
  auto finish = [&](uint64_t t, uint64_t word) {
    if (!casEntry(layout, t, word, packEntry(t, EntryState::Finished, kOwnerMaster))) return false;
    clients_->leave(layout.index(t), t);
    return true;
  };
  // One live ticket: TTL, first-poll grace, claim window. False when it
  // left the line here.
  auto visit = [&](uint64_t t, TicketEntry& e, uint64_t word, EntryState state) {
    if (state == EntryState::Reserved) {
      ++waiting_seen;  // being issued: already ahead of every later ticket
      return true;
    }
    const int64_t unseen = elapsed32(now, e.last_seen.load(std::memory_order_relaxed));
    if (limits.ttl > 0 && unseen > limits.ttl) {
      if (!finish(t, word)) return true;
      ++report.expired;
      return false;
    }
    if (state == EntryState::Waiting && limits.first_poll > 0 && e.seen.load(std::memory_order_relaxed) == 0 &&
        unseen > limits.first_poll) {
      if (!finish(t, word)) return true;
      ++report.ghosts;
      return false;
    }
    if (state == EntryState::Missed) return true;
    bool ready;
    if (state == EntryState::Returned) {
      ready = returned_seen++ < free;
    } else {
      ready = waiting_seen++ + returned_total < free;
    }
    const uint32_t since = e.ready_since.load(std::memory_order_relaxed);
    if (!ready) {
      if (since != 0) e.ready_since.store(0, std::memory_order_relaxed);
      return true;
    }
    if (since == 0) {
      const uint32_t stamp = low32(now);
      e.ready_since.store(stamp == 0 ? 1 : stamp, std::memory_order_relaxed);
      return true;
    }
    if (limits.claim_window > 0 && elapsed32(now, since) > limits.claim_window) {
      // A first miss keeps the place (Missed, for a page request to bring
      // back); a returned ticket that misses again has had its turn twice.
      if (state == EntryState::Returned) {
        if (!finish(t, word)) return true;
        ++report.missed;
        return false;
      }
      uint64_t expected = word;
      if (casEntry(layout, t, expected, packEntry(t, EntryState::Missed, entryOwner(word)))) ++report.missed;
    }
    return true;  // a missed ticket still holds its client's count
  };
  // The walk also recounts every client's live tickets by their tags, for
  // the client table's repair (clients.h).
  clients_->auditBegin();
  for (uint64_t number = first; number < next; ++number) {
    TicketEntry& e = layout.entry(number);
    const uint64_t word = e.state.load(std::memory_order_seq_cst);
    const uint64_t t = walkTicket(number, word);
    if (t == 0) continue;
    const EntryState state = entryState(word);
    const uint32_t index = layout.index(t);
    if (state == EntryState::Finished) {
      clients_->leave(index, t);  // a tag its leaver left behind (dead, or not there yet)
      continue;
    }
    if (!inLine(state) && state != EntryState::Missed && state != EntryState::Reserved) continue;
    if (!visit(t, e, word, state)) continue;
    const uint32_t tag = layout.client_tags[index].load(std::memory_order_seq_cst);
    if (tagNames(tag, t, layout.ring_bits)) clients_->auditLive(tag);
  }
  report.clients_repaired = clients_->auditEnd(now);
  const int64_t evicted = report.expired + report.ghosts;
  if (evicted > 0) layout.counter(Counter::EvictedTotal).fetch_add(static_cast<uint64_t>(evicted));
  if (report.expired > 0) layout.counter(Counter::EvictedTtlTotal).fetch_add(static_cast<uint64_t>(report.expired));
  if (report.ghosts > 0) layout.counter(Counter::GhostEvictedTotal).fetch_add(static_cast<uint64_t>(report.ghosts));
  if (report.missed > 0) layout.counter(Counter::MissedTurnsTotal).fetch_add(static_cast<uint64_t>(report.missed));
  advanceLowWater(layout);
  if (evicted + report.missed > 0) slots_->wake(Resource::PageSlot);
  line_rate_->roll(now, liveQueueDepth(), pages_->cap());
  return report;
}

int64_t TicketRing::retireClient(uint32_t client) {
  Layout& layout = *layout_;
  const uint64_t next = layout.header->next_ticket.load(std::memory_order_seq_cst);
  const uint64_t ring = layout.geometry.ring_size;
  const uint64_t first = next > ring ? next - ring : 1;
  int64_t retired = 0;
  for (uint64_t number = first; number < next; ++number) {
    const uint32_t index = layout.index(number);
    uint64_t word = layout.entry(number).state.load(std::memory_order_seq_cst);
    for (;;) {
      const uint64_t t = walkTicket(number, word);
      if (t == 0) break;
      const EntryState state = entryState(word);
      if (!inLine(state) && state != EntryState::Missed) break;
      // Read under a word naming t in the line: the tag is t's.
      const uint32_t tag = layout.client_tags[index].load(std::memory_order_seq_cst);
      if (!tagNames(tag, t, layout.ring_bits) || tagClient(tag) != client) break;
      if (casEntry(layout, t, word, packEntry(t, EntryState::Finished, entryOwner(word)))) {
        clients_->leave(index, t);
        ++retired;
        break;
      }
    }
  }
  if (retired > 0) {
    layout.counter(Counter::EvictedBannedTotal).fetch_add(static_cast<uint64_t>(retired), std::memory_order_relaxed);
    advanceLowWater(layout);
    slots_->wake(Resource::PageSlot);
  }
  return retired;
}

void TicketRing::resync() {
  Layout& layout = *layout_;
  for (uint32_t i = 0; i < layout.geometry.ring_size; ++i) syncBits(layout, i);
  layout.waiting.rebuild();
  layout.returned.rebuild();
  layout.missed.rebuild();
  layout.out.rebuild();
  advanceLowWater(layout);
}

int64_t TicketRing::reclaim(WorkerSlot slot) {
  Layout& layout = *layout_;
  // A block its opener left half open: finished if the head is placed,
  // else given back (nobody else may undo a live opener's claim).
  uint64_t block = layout.header->sale.block.load(std::memory_order_seq_cst);
  if (blockPhase(block) == BlockPhase::Opening && entryOwner(block) == slot && !finishOpening(block))
    layout.header->sale.block.compare_exchange_strong(block, packBlock(0, BlockPhase::Idle, 0),
                                                      std::memory_order_seq_cst);
  helpNextTicket(layout);
  const Header& h = *layout.header;
  const uint64_t next = h.next_ticket.load(std::memory_order_seq_cst);
  const uint64_t ring = layout.geometry.ring_size;
  const uint64_t first = next > ring ? next - ring : 1;
  int64_t finished_count = 0;
  for (uint64_t t = first; t < next; ++t) {
    uint64_t word = layout.entry(t).state.load(std::memory_order_seq_cst);
    if (entryTicket(word) != t || entryOwner(word) != slot || entryState(word) != EntryState::Reserved) continue;
    if (casEntry(layout, t, word, packEntry(t, EntryState::Finished, slot))) {
      clients_->leave(layout.index(t), t);  // if its issuer wrote the tag; else the janitor mends the count
      ++finished_count;
    }
  }
  // The dead worker may have been between a state change and its bitmap
  // update: recompute the bits of every entry, then every count.
  for (uint64_t t = first; t < next; ++t) syncBits(layout, layout.index(t));
  layout.waiting.rebuild();
  layout.returned.rebuild();
  layout.missed.rebuild();
  layout.out.rebuild();
  advanceLowWater(layout);
  return finished_count;
}

}  // namespace concert::shm
