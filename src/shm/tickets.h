// The ticket ring: the line of waiting visitors, in FIFO order across every
// worker, lock-free in shared memory.
//
// The line holds waiting visitors only. A request that takes a page slot
// leaves the line at that moment (its ticket is Finished); how long it then
// stays in flight is the page semaphore's business (semaphore.h) and never
// holds up the ring. So one request in flight for a day plus any number of
// short ones never fill the ring, and neither do visitors who leave: a
// ticket is refused only when -max-queue visitors wait (the breaker), or
// when every entry holds someone who waits (the ring is sized past that).
//
// Carrying. The span of live numbers is not bounded by who waits: one
// visitor at the head of a room that stays full, and a ring's worth of
// arrivals behind it who left. When the next number is a whole ring ahead of
// L, the issuer carries the ticket at L: Waiting -> Returned, same number,
// same entry, same cookie; it stays first (a returned ticket goes first) and
// everyone else's position drops by one. L then moves on, and a later number
// whose entry a Returned ticket keeps is skipped (never handed out), so
// [L, next) spans less than a ring again and the counts below stay exact.
// A carried ticket is Returned like any other: a walk over the numbers
// [next - R, next) (the janitor, a ban) finds it at whichever number of its
// entry it reaches, and its claim window and TTL apply.
//
// Numbers: next_ticket is the next number to hand out (the first is 1);
// low_water L is the lowest ticket that may still be Reserved or Waiting.
// Ticket t lives in entry t mod R, and [L, next) spans at most R tickets.
//
// Entry life (state word = ticket | state | owner, changed only by CAS):
//   Free/Finished/Missed (old ticket) --issuer--> Reserved(t, issuer)
//   Reserved --issuer--> Waiting(t)                 nonce and times written first
//   Waiting  --claim--> Finished                    its turn, and the claimer holds a page slot
//   Waiting  --janitor: turn not taken within the claim window--> Missed
//   Waiting  --issuer: a whole ring behind the next number--> Returned (carried)
//   Missed   --its holder comes back with a page request--> Returned
//   Returned --claim--> Finished;  --janitor: claim window again--> Finished
//            (a turn comes back once: polls and streams never return a
//            ticket, so a holder who watches the line and never comes for
//            the page holds nobody up for longer than one claim window)
//   Waiting/Returned/Missed --retire, TTL, first-poll grace--> Finished
//   Reserved of a dead worker --master reclaim--> Finished
//   old ticket (number in a sale's block) --block opener, janitor--> Vacant(t)
//   Vacant or old ticket (in an open block) --pre-queue arrival--> Reserved(t)
//   Vacant or old ticket (in a closing block) --janitor--> Finished
// Issuing reserves the entry BEFORE advancing next_ticket (and anyone who
// sees entry(next) already holding number next helps advance it), so every
// number below next has an entry that names it, and a worker killed between
// the two steps leaves Reserved(t, slot), which reclaim() finishes. An entry
// is reused for t + R once t is below L and not Returned: a Missed ticket
// that old loses its place (its holder comes back as a new arrival).
//
// The room's rules (mode, pre-queue, sessions' share, admission rate) come
// in through the process's LineGate alone (line_gate.h, freeSlots): while
// the line stands still, or the rate's bucket is empty, no ticket is ready,
// so none can be claimed and the janitor never takes one for a missed turn;
// when everyone may go, every ticket is ready.
//
// Order of admission when a slot frees: sessions first (admitted visitors
// clicking on; the room keeps the line's share of slots while both wait),
// then Returned tickets (a holder who missed its turn and came back keeps its
// place, ahead of the line), then the line in ticket order. With free = the
// free slots the line sees (cap - occupancy, less what waiting sessions go
// first for: LineGate::lineFree):
//   a Returned ticket is ready iff free > 0;
//   a Waiting ticket t is ready iff waiting[L, t) + returned < free.
// Position (what the visitor is shown) = waiting[L, t) + 1: live visitors
// ahead in the line only (a ticket still being issued, Reserved, counts as
// waiting: its number is already ahead of every later one). Nobody is ever inserted ahead of a waiting ticket
// and missed or returned tickets are not counted, so a position never grows;
// readiness is where priority and the cap come in. The waiting, returned and
// missed bitmaps (CountedBits) answer the counts in O(log R); each bit is a
// pure function of its entry's state word, resynced by whoever changes the
// word (syncBits), so a worker killed mid-update leaves nothing the master
// cannot recompute from the words themselves.
//
// Claim: the claimer first takes a page slot, then claims (Waiting or
// Returned -> Finished), counting its own slot as free for the check; if the
// claim fails it gives the slot back. So a slot only ever goes to a ticket
// whose turn it is, and the origin never sees more than cap.
//
// The janitor (master, once a second, sweep()) walks the live part of the
// ring: tickets unseen for longer than the TTL are evicted; a ticket whose
// holder never came back after the issuing request (no poll, no request
// with its cookie, no held request) is abandoned after -first-poll-grace; a
// ready ticket (stamped ready_since on the first pass that sees it ready) not
// claimed within -claim-window becomes Missed and stops holding the line.
//
// Wake-ups: anything that moves the line can make waiting tickets ready, and
// held requests and event streams learn that only through a PageSlot
// wake-up. Every path that takes a ticket out of the line without taking a
// slot therefore ends in one: retire(), an expiry found by render/touch/poll,
// the janitor's sweep, and reclaim(). A claim needs none (the line moved by
// one and so did the free slots), and a page release wakes by itself.
//
// Clients (clients.h). A ticket issued for a client carries a tag in a
// parallel array (layout.h: the ticket's lap mod 256 and the client entry's
// index + 1; 0 = untracked), written by the issuer while the entry is
// Reserved, after the client's count was taken. Every path that takes a
// ticket out of the line for good then "leaves" its client: claim, retire,
// an expiry found by render/touch/poll, the janitor's TTL and first-poll
// grace, a ban (retireClient), reclaim of a Reserved ticket, and the issuer
// that reuses the entry (a Missed ticket losing its place, or a Finished one
// whose leaver has not left yet); the janitor also leaves any tag a Finished
// ticket still carries. Leaving is a CAS of the tag from the value naming
// that ticket (its lap tells a reused entry's new tag from the old) to 0;
// only the winner subtracts from the client's count, so the count moves once
// per ticket whichever paths race. A Missed ticket keeps its count: it still
// holds a place. The janitor's walk also recounts the live tags per client
// for the client table's repair.
//
// Who writes: the state word by CAS from anyone (issuer, claimer, retirer,
// toucher, the master's janitor and reclaim); nonce, last_seen, last_poll,
// seen and cookie_sent by the issuer and by touches (render / touch / poll);
// the client tag by the issuer, and cleared by CAS by whoever leaves;
// ready_since by the janitor; next_ticket and low_water by anyone, forward
// only, by CAS; the sale's block word by CAS from its opener, helpers, the
// janitor and reclaim (see "Scheduled sale" below).
//
// A SIGKILL leaves at most: Reserved entries owned by the dead slot
// (reclaim() finishes them and leaves their client if the tag was written;
// a client count taken and not tagged is the janitor's to mend, clients.h),
// a tag a dead finisher did not clear (the janitor or the next issuer of the
// entry leaves it), bitmap bits or counts that disagree with the
// state words (reclaim() resyncs every entry's bits and rebuilds the counts),
// next_ticket one behind an entry that already names the next number (the
// next issuer, or reclaim, helps it forward; a block's head moves it a whole
// block), a sale's block word Opening(P, slot) (reclaim finishes the opening
// or gives the word back), block numbers not vacated yet (the janitor's next
// pass), and a page slot taken for a
// claim not made (the slot's page counter: the page semaphore's reclaim).
// Waiting entries belong to visitors' cookies, not to the worker that issued
// them, and stay in line.
//
// Scheduled sale (sale.h). Visitors' cookies name ticket number + nonce, so
// the line cannot be renumbered at the start: the shuffle happens at
// arrival instead. When the pre-queue opens (with -shuffle-prequeue), a
// block of K = R/2 numbers [P, P + K) is set aside: the block word
// (SaleControl.block, layout.h) goes Idle -> Opening(P, opener) by CAS, the
// opener turns entry P into Vacant(P) (the block's head) as an issuer would
// reserve it, next_ticket jumps to P + K, and the word becomes Open. A
// worker killed between those steps leaves Opening(P, slot): anyone who sees
// the head placed finishes the opening (the jump is helped like next_ticket
// always is: an entry naming `next` moves it on, by K when it is the head,
// the only Vacant entry next can point at); reclaim() gives the word back
// when the head was never placed. Opening needs the block and everything
// live before it within the ring (P + K - L <= R), so every number of the
// block lies a ring or more past its entry's old ticket, which is out of the
// line below L; when that does not hold, pre-queue arrivals are numbered in
// arrival order (the pre-queue still holds the line; only the shuffle is
// lost) and the janitor tries again on its next pass.
//   A pre-queue arrival takes a place drawn uniformly at random among the
// block's untaken numbers (kernel CSPRNG, randomNonce(); a few draws, then a
// walk from a random place): Vacant(t), or an old ticket out of the line the
// janitor has not vacated yet, CAS to Reserved(t), then Waiting as any
// issue. n arrivals placed uniformly at random in the block are, in number
// order, a uniform shuffle of their arrival order, fixed when the last of
// them arrives: at the start nothing is renumbered. A full block (K
// pre-queue visitors at once, which -max-queue normally forbids: the ring is
// sized 2 x (max-queue + cap)) sends later arrivals after it, in arrival
// order. Without -shuffle-prequeue there is no block: pre-queue arrivals are
// numbered as usual.
//   Right after opening, the opener vacates the block's numbers (old
// ticket -> Vacant: K CASes, once per sale), and the janitor does it again
// on each pass while the block is open, for an opener killed midway. Vacant
// counts as out of the line (in no waiting, returned or missed bit, set in
// `out`), so positions and depths count nobody for it; an entry not vacated
// yet (a Free one) would count as someone ahead, which only ever holds a
// ticket back, never lets one pass the cap. L never
// enters it: Vacant stops L, and so does any number of an Opening or Open
// block, whatever its entry holds. Nobody's turn comes meanwhile (the line
// stands still: freeSlots is 0), so a position growing while a pre-queue
// arrival takes a place ahead of a ticket numbered after the block (a full
// block) is never acted on; the waiting page shows the time to the start,
// not positions, during the pre-queue.
//   When the pre-queue is over (its start has come, or a reload ended it),
// the janitor moves Open -> Closing and finishes every untaken number of the
// block (Vacant or old ticket -> Finished), then Closing -> Done; a killed
// janitor is the master's death, and a closer that did not get to Done is
// simply run again on the next pass. An arrival that took a place re-reads
// the block word: if it is no longer the Open word it placed under, it gives
// the place back (Finished) and queues at the back. Either it read Open
// after its CAS, so any L walk past its number (which reads Closing first,
// then the entry) sees it Reserved; or it sees Closing and gives back. So no
// Reserved or Waiting ticket is ever left below L, and every pre-queue
// arrival holds exactly one ticket.
//
// Times in an entry are 32-bit milliseconds (layout.h). The janitor and a
// concurrent poll can race on an expired ticket: the janitor may retire a
// ticket in the instant a poll refreshes it; that ticket was already past
// its TTL when the janitor looked.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "shm/handle.h"
#include "shm/line.h"
#include "shm/line_gate.h"
#include "shm/types.h"

namespace concert::shm {

class Clients;
class LineRate;
class Semaphore;
struct TicketEntry;

class TicketRing final : public Handle, public Line {
 public:
  TicketRing(Layout& layout, WorkerSlots& slots, const Semaphore& pages, Clients& clients, LineRate& line_rate)
      : Handle(layout, slots), pages_(&pages), clients_(&clients), line_rate_(&line_rate) {}

  // The room's rules this process asks (line_gate.h); nullptr: the cap alone.
  void setGate(LineGate* gate) { gate_ = gate; }

  // A new arrival joins the line at the back. With a client: its live
  // tickets first (ClientLimit at max_per_client; the ticket is counted and
  // tagged, or untracked when the client table has no room for it, see
  // clients.h). Then the breaker: max_queue > 0 and liveQueueDepth() >=
  // max_queue. queued_total is counted here. Without a client the ticket is
  // untracked.
  Issued issue(WorkerSlot slot, int64_t max_queue, Millis now, const ClientTicketing* client = nullptr) override;

  // Waiting-page render of a known ticket: touches it (last seen = now,
  // cookie sent = now; seen unless `contact` is Own) and returns its state.
  // Expired tickets are retired (and PageSlot waiters woken, as for every
  // path that takes a ticket out of the line without a slot). A missed
  // ticket whose holder comes back with a page request (Contact::Page) is
  // Returned: ahead of the line; a poll or a stream does not return it.
  TicketView render(const TicketCookie& cookie, Millis now, Millis ttl, Contact contact = Contact::Page) override;

  // A held request's or event stream's recheck: touches the ticket like
  // render() but leaves the "cookie sent" time alone (no cookie goes out).
  TicketView touch(const TicketCookie& cookie, Millis now, Millis ttl, Contact contact = Contact::Page) override;

  // /queue/status poll: as render with Contact::Look, plus the 1-second rate
  // limit (a limited poll still touches the ticket) and refresh_cookie after
  // ttl/3.
  TicketView poll(const TicketCookie& cookie, Millis now, Millis ttl) override;

  // The ticket's state and place as a poll would see them now, touching
  // nothing: no TTL check, no return, no "seen" (read-only callers, and the
  // line's model test).
  TicketView peek(const TicketCookie& cookie) const;

  // The caller holds a page slot taken for this ticket: if it is the
  // ticket's turn (counting that slot as free), the ticket leaves the line
  // (Finished) and true is returned; otherwise the caller gives the slot back.
  // A Waiting ticket's claim is an admission from the line (line_rate.h).
  // Never while the line stands still (LineFlow::Still); while it moves by
  // the cap the claim spends the gate's token (the admission rate).
  // `claimed` (optional) learns how long the ticket waited and where it
  // came from.
  //
  // FIFO inversions: tickets whose turn came together (fewer older waiting
  // tickets than the cap) take their slots in the order their holders come
  // back; that is concurrency, not unfairness. A Waiting ticket claimed while
  // a whole room's worth (the cap) or more of older tickets still wait in
  // line jumped people whose turn had not come: fifo_inversions_total counts
  // it. The check recounts after the claim, independently of the readiness
  // test before it, so a bug or race there shows up here.
  bool claim(const TicketCookie& cookie, Claimed* claimed = nullptr) override;

  // A ticket that will never be admitted (a held request whose client left
  // before its cookie went out). Counted in timeouts_total and
  // timeouts_queue_hold_total when `timeout`.
  // Wakes PageSlot waiters: tickets behind it may have become ready.
  void retire(uint64_t ticket, bool timeout) override;

  // An operator removes a ticket (DELETE /_room/queue/<ticket>): a Waiting,
  // Returned or Missed ticket leaves the line (Finished), its client's
  // count drops, evicted_removed_total counts it and PageSlot waiters are
  // woken. Its holder's next poll finds no place and arrives anew. False
  // when no such ticket holds a place. A promotion (POST /_room/promote,
  // /queue/promote) takes the ticket out the same way, counted in
  // promoted_total instead: the places behind it shrink by one, none grows.
  bool remove(uint64_t ticket, Counter counted = Counter::EvictedRemovedTotal) override;

  // The nonce of a ticket that holds a place (waiting, returned or missed),
  // to check a reference to it (admission/room_pass.h); nullopt otherwise.
  std::optional<uint64_t> nonceOf(uint64_t ticket) const override;

  // The head of the line, oldest first: up to `limit` Returned and Waiting
  // tickets in ticket order (a Returned ticket goes first when a slot
  // frees, but is listed at its number). A read-only walk from low_water;
  // a ticket changing state meanwhile is listed as it was when read.
  std::vector<LineEntry> head(size_t limit, Millis now) const override;

  // Everyone holding a place: waiting, returned and missed tickets.
  int64_t queueDepth() const override;
  // Visitors waiting for their turn: waiting and returned tickets. The
  // breaker, positions and readiness count these.
  int64_t liveQueueDepth() const override;

  // Master janitor, once a second: TTL expiry, first-poll grace, claim
  // window (see the file comment). Counts evicted_total, evicted_ttl_total,
  // ghost_evicted_total and missed_turns_total; wakes PageSlot waiters when
  // the line moved.
  // Also the client table's recount and repair (clients.h), and the line's
  // pace: the janitor's pass rolls its buckets (line_rate.h).
  SweepReport sweep(Millis now, const SweepLimits& limits);

  // Master janitor, once a second, with the wall clock: a sale's pre-queue
  // block (see the file comment). Opens it while the pre-queue is on (if no
  // arrival did already) and vacates its untaken numbers; when the
  // pre-queue is over, closes it (untaken numbers Finished) and wakes
  // PageSlot waiters.
  SaleTick saleTick(int64_t unix_ms);

 private:
  friend class Segment;
  // Segment::strike, on a ban: every live ticket tagged with client entry
  // `client` leaves the line (Finished, counted in evicted_banned_total);
  // PageSlot waiters are woken.
  int64_t retireClient(uint32_t client);
  int64_t reclaim(WorkerSlot slot) override;  // finishes its Reserved tickets
  // Every entry's bits from its state word, then every count, then L
  // (Segment, after it wrote entries directly: a copy into a new ring).
  void resync();
  // cap - occupancy (+ own: slots the caller holds for this), as the gate
  // lets the line use them: 0 while the line stands still, everyone when
  // every turn has come (line_gate.h).
  int64_t freeSlots(int64_t own) const;
  // A waiting ticket a whole ring behind the back of the line becomes
  // Returned (see takeNext); false when `ticket` cannot be carried now.
  bool carry(uint64_t ticket);
  // The next number at the back of the line, Reserved for `slot`; 0 when the
  // ring is full. `previous`: the entry's old ticket.
  uint64_t takeNext(WorkerSlot slot, uint64_t& previous);
  // The Open block word, opening the block if none was for this schedule;
  // 0 when it cannot be (spent, being opened by another, no room).
  uint64_t openBlock(WorkerSlot slot);
  // The rest of an opening whose head is placed (the jump, then Open);
  // false when the head is not placed (yet).
  bool finishOpening(uint64_t block);
  // Every number of the block whose entry still holds an old ticket out of
  // the line becomes Vacant (the opener right after opening, the janitor on
  // each pass while it is open).
  void vacateBlock(uint64_t first);
  // A random untaken place in the open block, Reserved for `slot`; 0 when
  // there is no block or it is full.
  uint64_t placeInBlock(WorkerSlot slot, uint64_t& previous);
  void fillView(uint64_t ticket, uint64_t word, TicketView& view) const;
  // Touch shared by render, touch and poll: nullptr when the cookie names no
  // live ticket (view Unknown, or Expired after retiring it).
  TicketEntry* touchLive(const TicketCookie& cookie, Millis now, Millis ttl, Contact contact, TicketView& view);

  LineFlow flow() const;

  const Semaphore* pages_;
  Clients* clients_;
  LineRate* line_rate_;
  LineGate* gate_ = nullptr;
};

}  // namespace concert::shm
