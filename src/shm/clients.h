// The client table: per-client live-ticket counts, strikes and bans
// (admission/abuse.h), shared by every worker, so a client's tickets, strikes
// and ban are the same whichever worker it reaches.
//
// A client is a 16-byte key the caller builds (an IPv4 address as
// IPv4-mapped IPv6, or the /64 of an IPv6 one). Clients the caller exempts
// (-abuse-allow, -bypass-cidrs) never get an entry: the caller does not ask.
//
// Open addressing with linear probing over at most kWindow (32) entries from
// the key's home bucket. One entry = one cache line (ClientEntry, layout.h):
// state word, key, live-ticket count, strikes (count | window start), ban
// (until | bans so far), last seen, the janitor's audit word and the home
// bucket's creation lock. Times are monotonic seconds. State word = version
// | state | owner:
//   Empty/Vacant --creator--> Claiming(owner) --creator--> Live      new client
//   Live (idle: evicted) --creator--> Claiming(owner) --> Live       another client
//   Live --striker--> Updating(owner) --striker--> Live              strikes, ban
// Every transition adds 1 to the version. Empty ends a probe chain (no
// entry becomes Empty again, so a client's entry lies on an unbroken run
// from its home); Vacant does not. Claiming and Updating are the entry's
// write lock: one writer at a time, taken by CAS on the word, released by
// storing the next version. Creating a client also holds its home bucket's
// creation lock (create_lock, creator slot + 1), so two workers seeing the
// same new client at once make one entry, not two.
//
// Readers never write and never wait: banned() reads the state word, the
// key and the ban, then the word again (a seqlock); Updating keeps the key,
// and the ban is one word, so a reader needs no writer to finish. A word
// that keeps changing under it for kReadTries reads makes it answer "not
// banned" (fail open). Before any probe, banned() compares now with the
// header's ban_horizon, the latest ban until ever set: with no ban in force
// anywhere the check is one load.
//
// Live tickets. issue() (tickets.h) with a client finds or creates its
// entry and adds 1 to the count by CAS, refusing at max_per_client
// (IssueOutcome::ClientLimit); then it issues as usual, writing the ring
// entry's client tag (layout.h: lap mod 256 | index + 1); on Breaker or
// RingFull it gives the 1 back. Whoever takes the ticket out of the line for
// good (claim, retire, TTL, first-poll grace, a ban, reclaim, the issuer
// that reuses its entry) "leaves" the client: CAS the tag from the value
// naming that ticket to 0, and only the CAS winner subtracts 1, so the count
// moves once per ticket whichever paths race. The count is changed by CAS
// outside the entry lock; a creator evicting an entry claims it first and
// then checks the count is 0, while an issuer adds 1 first and then checks
// the entry still holds its key (both sequentially consistent), so either
// the evictor sees the ticket and backs off, or the issuer sees the claim,
// gives the 1 back and looks again. An entry with live tickets is therefore
// never evicted and a tag's index stays its client's while the tag lives.
// Every change of the count also adds 1 to its upper half (changes).
//
// One entry per client: creators of a key share its home bucket's lock and
// look again under it, waiting (kClaimWaits) for any entry another writer
// is claiming, since an eviction that finds its victim busy after all hands
// it back. Only a writer stuck in a claim for longer than that can leave a
// client two entries for a while (lookups use the first in probe order;
// the other goes idle and is evicted in time). A tag names its ticket by
// the lap mod 256: a leaver stalled for 256 laps of the ring could clear a
// later ticket's tag of the same client (one count one low, mended like the
// rest).
//
// Strikes and bans (Segment::strike). A strike of weight w opens a window
// of 10 minutes at the client's first strike (count = w); within it strikes
// add up; one after it opens a new window. Reaching AbusePolicy::threshold
// bans the client for `ban`, doubled for each earlier ban of this entry (ban
// k lasts ban << (k - 1)), at most 24 h, and empties the window; the
// client's live tickets leave the line at once (retired, PageSlot waiters
// woken). While banned, strikes are counted (abuse_strikes_total) but
// change nothing. A ban ends by itself when its time is up; the count of
// bans stays with the entry, so a repeat ban doubles as long as the client
// keeps its entry.
//
// What happens when the table is full. A new client takes the first Vacant
// entry of its window, else the Empty one that ends the chain, else the
// oldest idle entry: no live ticket, not banned now, least recently seen
// (issue and strike refresh last_seen). A banned entry or one with live
// tickets is never taken. When no entry of the window can be taken (or the
// bucket's creation lock stays held by another writer), the request is not
// tracked: issue() gives an untracked ticket (tag 0, no per-client limit for
// it), a strike is dropped (StrikeOutcome::recorded false; it still counts
// in abuse_strikes_total), and client_table_full_total counts each such
// request. The table has max(4096, ring / 4) entries (computeGeometry), so
// this takes a window of 32 clients that all hold tickets or bans.
//
// Repair (the master's janitor, TicketRing::sweep, once a second). A SIGKILL
// between adding 1 and writing the tag, between winning the tag and
// subtracting 1, or between adding 1 and giving it back leaves a count one
// too high. The sweep's walk of the ring recounts the live tags of every
// client (and leaves any tag a Finished ticket still carries: a leaver that
// died or is slow); an entry whose count disagrees with its recount with no
// change of the count for at least kRepairAfter (60 s; the audit word keeps
// the changes value and when the disagreement was first seen) gets the
// recount, by CAS on the count word (SweepReport::clients_repaired). The
// 60 s leave time for operations in flight, which disagree for microseconds.
//
// Who writes: the state word by CAS (creators, strikers, the master in
// reclaim); key, strikes and ban by the writer holding the entry; the count
// by CAS from anyone (issuers, leavers, the janitor's repair); last_seen by
// issuers and strikers (a hint for eviction only); audit by the master;
// create_lock by creators (and the master in reclaim); ban_horizon by
// strikers, forward only (CAS to the max).
//
// A SIGKILL leaves at most: one entry Claiming or Updating owned by the dead
// slot, one creation lock holding its slot + 1, and a count one too high
// (above). reclaim() turns its Claiming entry into Vacant (a half-written key
// is no client's; if the claim was an eviction cut short, the evicted client
// loses its entry as evicted clients do), its Updating entry back into Live
// (key whole, strikes and ban each one whole word: the strike being written
// is in or out), and frees its lock; the janitor mends the count.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "shm/handle.h"
#include "shm/types.h"

namespace concert::shm {

// One client and its live tickets, as topByTickets() saw them.
struct ClientTickets {
  std::array<uint8_t, 16> key{};
  int64_t tickets = 0;
};

// One client banned now, as bans() saw it.
struct ClientBan {
  std::array<uint8_t, 16> key{};
  int64_t seconds_left = 0;
};

class Clients final : public Handle {
 public:
  using Handle::Handle;

  // Is the client banned at `now`? Reads only; never waits for a writer
  // (fails open). Done on every request while bans are on.
  bool banned(const uint8_t key[16], Millis now) const;
  // The client's live tickets (0 without an entry).
  int64_t liveTickets(const uint8_t key[16]) const;
  // Clients banned at `now` (a scan of the table: the banned_clients gauge).
  int64_t bannedCount(Millis now) const;
  // Every client banned at `now` (a scan that reads only, as
  // topByTickets(); the cluster agent sends them to the other hosts).
  std::vector<ClientBan> bans(Millis now) const;
  // Clients with an entry (a scan: tests and diagnostics).
  int64_t tracked() const;
  // The (at most) `limit` clients holding the most live tickets, most first
  // (ties: lower key first); clients without a live ticket are left out. A
  // scan of the table that reads only: each entry under its state word, as
  // banned() does (an entry that keeps changing is passed by), its count a
  // recent value (/_room/report).
  std::vector<ClientTickets> topByTickets(size_t limit) const;
  // Entries held Claiming or Updating plus creation locks held, right now: 0
  // when nobody is writing and every dead writer was reclaimed.
  int64_t writing() const;

 private:
  friend class Segment;
  friend class TicketRing;
  static constexpr uint32_t kNone = 0xffffffffu;

  enum class Enter { Tracked, Limit, Untracked };
  // issue(): find or create the client's entry and add one live ticket
  // unless it holds max_per_client (> 0) already. Tracked: *index names the
  // entry. Untracked counts client_table_full_total.
  Enter enter(const ClientTicketing& client, Millis now, WorkerSlot slot, uint32_t* index);
  // Takes back what enter() added (the ticket was not issued).
  void giveBack(uint32_t index);
  // The ticket in ring entry `ring_index` has left the line (or is leaving
  // its entry): if the tag still names it, clear it and, if this call
  // cleared it, subtract 1 from its client's count.
  void leave(uint32_t ring_index, uint64_t ticket);
  // Segment::strike; *index names the entry when recorded.
  StrikeOutcome strike(const uint8_t key[16], int weight, const AbusePolicy& policy, Millis now, WorkerSlot slot,
                       uint32_t* index);

  // The master janitor's recount, driven by TicketRing::sweep: begin, then
  // the tag of every live ticket, then end (compares and repairs).
  void auditBegin();
  void auditLive(uint32_t tag);
  int64_t auditEnd(Millis now);

  // The entry holding `key` (Live or Updating), or kNone; creates it when
  // `create` (kNone then means the table is full or its bucket stayed locked).
  uint32_t locate(const uint8_t key[16], Millis now, WorkerSlot slot, bool create);
  uint32_t create(const uint8_t key[16], Millis now, WorkerSlot slot);
  bool holds(uint32_t index, const uint8_t key[16]) const;

  int64_t reclaim(WorkerSlot slot) override;  // its Claiming or Updating entry, its creation lock

  std::vector<uint32_t> recount_;  // master only: live tags per entry in the current sweep
};

}  // namespace concert::shm
