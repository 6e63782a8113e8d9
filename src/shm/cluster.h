// The host's side of one line shared by several hosts (-cluster): a cache of
// the engine's line, the host's share of the global cap, and a mailbox of
// notes to the engine. The engine itself (Redis) and the one process that
// talks to it, the cluster agent, are in src/cluster/; workers never wait for
// the engine: they read this cache and drop notes here.
//
// Words (ClusterArea in layout.h) and who writes them:
//   enabled, fail_open, lease      the master (create, reload)
//   cap                            the global cap: the master (config),
//                                  POST /_room/cap in any worker, the agent
//                                  (the engine's value); the page semaphore's
//                                  cap is this host's share of it (reserved)
//   state, hosts, reserved,        the agent, once per round with the engine
//   horizon, depth, refreshed_ms,
//   lease_until_ms
//   numbers                        the agent stores a block of ticket numbers
//                                  (next << 16 | left); workers take one by CAS
//   local_next                     workers: ids handed out while the engine is
//                                  away and no block is left (kLocalIds | n)
//   pending                        workers +1 per ticket issued; the agent
//                                  sets 0 when it publishes the line
//   wanted                         workers: a ticket whose turn came found no
//                                  free slot here (the agent asks for more)
//   mirrors, active, version       the agent (publish); read by everyone
//   notes                          workers append, the agent consumes
//   recent                         workers (a ticket issued here, or seen
//                                  here before the engine listed it, or
//                                  claimed here)
//   touched, polled                workers: when this host last sent a
//                                  ticket's Touch note, last answered its
//                                  poll (the one-second poll limit, as the
//                                  ticket ring keeps per ticket)
//   waited                         workers: when this host last sent a
//                                  ticket's Wait note
//
// The line in the cache. The agent copies the engine's line (ids, nonces,
// issue times; head first, at most kClusterMirror) into the mirror not in
// use and then makes it the one in use, with `version` raised before and
// after. A reader takes `active`, reads that copy and re-reads `version`: if
// it rose by 2 or more, the copy it read may have been rewritten meanwhile
// and it reads again (a few times, then takes the ticket as pending). So a
// writer never blocks a reader, and a SIGKILLed agent leaves the copy in use
// whole (the master starts another agent).
//
// The copy lists returned tickets, then the line's head, then missed
// tickets (LineSection), each in the engine's order; a ticket's rank is its
// index in that list.
//
// A ticket's place on this host, looked up by its cookie:
//   ranked   in the copy with the cookie's nonce: returned or waiting, its
//            turn has come when rank < horizon (the engine's, or with the
//            engine away and -cluster-fail open this host's; never with
//            closed). A Local ticket (issued here while the engine is away)
//            takes turns the same way but shows no position.
//            Position: 1 for a returned ticket, else its rank in the line
//            alone + 1 (returned tickets go first but are not counted ahead:
//            a position never grows). A missed ticket shows no position
//            (where it returns is the engine's next word) and its holder's touch (a page request, a poll, a stream; not
//            the hold of the request it was issued to) goes to the engine at
//            once, which returns it; a returned ticket that misses again
//            leaves the line, so a turn comes back once.
//   pending  not in the copy yet (issued less than kPendingMs ago, here or on
//            another host), or perhaps beyond the copy's end (a line longer
//            than kClusterMirror), or the engine is away (until the agent
//            lists it as Local): waits at the back of the line (position =
//            depth + 1, not shown), not ready
//   gone     anything else: admitted, reaped, removed, forged (Unknown)
// `recent` remembers ids for kPendingMs: a ticket issued here, a ticket
// presented here that the copy does not list (first seen), and a ticket
// that left the line here (departed: claimed, retired or removed here,
// before the engine's line says so).
//
// The engine away. With -cluster-fail closed nobody new is admitted from
// the line. With open the agent keeps the line moving on this host alone,
// in ticket order of its own line, every round it would have had
// (publishAway): the copy keeps the engine's line as it was last read (so
// every position shown stands still: none grows, and the engine's own,
// once back, is no larger), the tickets issued here since go at its back
// as Local (a turn, but no position: their place in the room is not known
// until the engine lists them), and the horizon becomes this host's: the
// ranks up to the `free`-th ticket whose holder was seen here within
// kPresentMs and has not left, where free is this host's fail-mode share
// (cap / hosts) less the slots in use, as the gate lets the line use it.
// Tickets of other hosts' visitors in between do not hold the line here.
// Once the engine answers, the agent sends what happened (enrolments and
// departures) and copies the engine's line again. While the engine is away
// (either mode, or this host's lease lapsed) no position is shown: this
// host's copy stops where its last round left it and another host's may be
// newer, so a position could grow from one host to the next. A holder whose
// turn had come by the engine's last horizon, seen here while this host
// cannot let it in, sends a Wait note: the engine restarts the turn's clock
// once back, and the outage costs nobody their turn.
//
// Readiness and the cap. The engine sums every host's free slots into the
// horizon (slots free across all hosts: the global cap less what is in
// flight everywhere); a ticket ranked below it may take a slot on whichever
// host its holder reaches. Taking it needs a slot of this host's page
// semaphore, whose cap is the host's reservation: the sum of all
// reservations never exceeds the global cap (engine.h), so the origin never
// sees more than the cap. A turn that finds no slot here is held, as any
// turn that finds no slot, raises `wanted`, which the agent turns into a
// larger reservation, and sends a Wait note: its holder is here, so the
// engine restarts the turn's clock rather than count it missed. Tickets of the first `horizon` ranks may be admitted
// in any order, hence at most hosts x -cluster-lease inversions. Each host
// meters the admission rate (-admit-rate) ÷ hosts (the agent sets it), so
// the room admits at most the rate. A turn whose
// claim finds no token of this host's admission rate sends a
// Wait note (at most one per ticket every kWaitEveryMs): the engine restarts
// the turn's clock, so no turn is missed for want of a token here.
//
// The reservation's lease. The engine drops a host's reservation once the
// host has not renewed it for -cluster-lease-ttl, and hands those slots to
// the others. So the agent publishes with each round `lease_until_ms`: the
// time SYNC was sent plus half the TTL (the engine's lease began later, so
// this ends first; the other half lets requests admitted here finish before
// their slots go elsewhere). Past it, with the agent's state still Up (the
// agent stopped, or is stuck), every process here takes the engine for away
// by itself: state() reads Down, and the page semaphore's cap reads 0
// (sharedCapNow) whatever the agent does, in either fail mode: an agent
// that stops renewing while it still takes the engine for up is stuck, not
// cut off, and the engine, reachable, gives the share to the other hosts, so
// this host using any of it would put the room past its cap. Its next round
// lifts it. (An agent that finds the engine away goes Down first, within a
// quarter of the TTL, and its share is then the fail mode's.)
//
// Notes to the engine (kClusterNotes entries): Enroll (a ticket issued
// here), Touch (its holder was seen here: the engine's TTL and first-poll
// grace restart from the last touch on any host; at most one per ticket
// every kTouchEveryMs from this host, `touched` remembers when), Leave
// (claimed, retired, removed here). A writer takes a position by CAS only while fewer than
// kClusterNotes are unread, writes the note, then its seq. The agent reads
// notes in order; a note whose seq is not written within kNoteWaitMs (its
// writer was killed in between) is skipped. A full mailbox drops the note:
// an Enroll lost so is a ticket that never reaches the engine (its holder
// arrives anew after kPendingMs), a Touch lost is one touch less, a Leave
// lost leaves the ticket to the engine's TTL.
//
// Ticket numbers. The agent takes a block from the engine's counter (a few
// numbers per host at a time, renewed at least every kBlockAgeMs): a number
// names a ticket, it does not place it. The engine places each ticket in
// the order it enrolls them (engine.h, P:order), so a ticket's place is its
// host's next round after its issue, and two visitors arriving at different
// hosts within one round may be placed in either order. When the block runs
// out before the agent's next round (a burst), or while the engine is away,
// ids come from kLocalIds up: from a random start per host, then counting,
// so that they are unique in practice; they are placed like any other.
//
// Per client. A ticket's Enroll note carries its holder's client key
// (-max-tickets-per-client, bans): the engine counts each client's tickets
// in the whole line and enrolls no more than the limit; a client at the
// limit is marked full for every host (`full`), which then issues it no
// ticket (ClientLimit) until one of its tickets leaves. Two hosts may each
// issue one in the same round: the engine enrolls only what the limit
// allows, and the extra ticket's holder finds it gone (kPendingMs later)
// and is refused on asking again. A ban that reaches the engine takes the
// client's tickets out of the line, whichever host issued them.
//
// Bans, promotions and ended sessions. A ban that begins on a host goes to
// the engine (the agent finds it in the client table, clients.h); a ticket
// promoted by POST /_room/promote on a host goes there as a Promote note, a
// session the origin ended (Concert-Session: end) as a Revoke note. Every
// host's agent copies the room's marks into `bans`, `promoted` and `revoked`
// (at most kClusterMarks each, sorted) under a seqlock (`version` odd while
// it writes; a reader that keeps finding it changing answers "no", as the
// client table fails open), and the request path looks there too by binary
// search: the ban check (bannedRemotely), the collection of a promoted
// ticket's room pass (promotedElsewhere), the session check
// (revokedElsewhere), whichever host the visitor reaches.
//
// A SIGKILLed worker leaves at most a note position taken and never
// written (skipped), a ticket number taken and never used (a gap: ranks,
// not numbers, are positions), a recent word half-decided (one word, CAS).
// Nothing names a slot: reclaim has nothing to do.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "shm/handle.h"
#include "shm/line.h"
#include "shm/line_gate.h"
#include "shm/types.h"

namespace concert::shm {

struct ClusterMarks;
class LineRate;
class PageSemaphore;

enum class ClusterState : uint32_t {
  Off = 0,      // no -cluster
  Joining = 1,  // started, the engine not reached yet: as Down
  Up = 2,       // the engine answered the last round in time
  Down = 3,     // unreachable or too slow: -cluster-fail decides
};

// Touch: its holder came back for the page (a missed ticket returns, once);
// Keep: its holder is still here (a poll, a stream, a hold), no return.
// Wait: its turn came and its holder is here, but this host's admission rate
// had no token (the engine restarts the turn's clock).
enum class NoteKind : uint8_t { Enroll = 1, Touch = 2, Leave = 3, Promote = 4, Revoke = 5, Keep = 6, Wait = 7 };

struct ClusterNoteValue {
  NoteKind kind = NoteKind::Touch;
  uint64_t id = 0;
  uint64_t nonce = 0;
  int64_t issued_ms = 0;  // Enroll: Unix ms; Promote, Revoke: the end, Unix s
  uint64_t key_a = 0, key_b = 0;  // Enroll: the holder's client key (clients.h) as two words; 0, 0: none
};

// A mark the room's hosts share (bans, promotions): two words and an end (Unix s).
struct ClusterMarkValue {
  uint64_t a = 0, b = 0;
  int64_t until = 0;
};

// Where a ticket stands in the engine (engine.h: P:back, P:line, P:missed).
enum class LineSection : uint8_t {
  Returned,  // missed its turn, its holder came back: first when a slot frees
  Waiting,   // in line
  Missed,    // its turn came and was not taken: holds no place until its holder asks for the page
  Local,     // issued here while the engine is away (publishAway): ranked for turns, shown no position
};

// One ticket of the engine's line as the agent read it.
struct ClusterLineEntry {
  uint64_t id = 0;
  uint64_t nonce = 0;
  int64_t issued_ms = 0;
  LineSection section = LineSection::Waiting;
};

// What the agent learnt in one round, for publish().
struct ClusterRound {
  int32_t hosts = 0;
  int64_t reserved = 0;
  int64_t horizon = 0;
  int64_t depth = 0;
  int64_t cap = 0;
  Millis lease_until_ms = 0;  // the reservation is used until then (monotonic ms; 0: no end)
};

struct ClusterArea;
// The page semaphore's cap on this host now, of `share` (its cap word): the
// share while the host's lease holds (or without -cluster), the fail-mode
// share once it lapsed with the agent's state still Up (the file comment).
int64_t sharedCapNow(const ClusterArea& area, int64_t share, Millis now);

class ClusterLine final : public Handle, public Line {
 public:
  static constexpr Millis kPendingMs = 3'000;
  static constexpr Millis kNoteWaitMs = 1'000;
  static constexpr Millis kBlockAgeMs = 500;
  static constexpr Millis kTouchEveryMs = 2'000;
  static constexpr Millis kWaitEveryMs = 500;
  // A holder seen here within this is taken for present (publishAway).
  static constexpr Millis kPresentMs = 5'000;
  static constexpr uint64_t kLocalIds = uint64_t{1} << 46;  // ids below are the engine's numbers
  static constexpr uint64_t kMaxId = (uint64_t{1} << 47) - 1;

  ClusterLine(Layout& layout, WorkerSlots& slots, PageSemaphore& pages, LineRate& line_rate)
      : Handle(layout, slots), pages_(&pages), line_rate_(&line_rate) {}

  // The room's rules this process asks (line_gate.h); nullptr: the cap alone.
  void setGate(LineGate* gate) { gate_ = gate; }

  bool enabled() const;
  // Down also while the agent's state is Up but this host's lease lapsed.
  ClusterState state() const;
  int32_t hosts() const;
  int64_t reserved() const;
  int64_t horizon() const;
  int64_t engineHorizon() const;  // the engine's last (horizon() is this host's own while it is away)
  uint64_t roundTrips() const;
  bool failOpen() const;

  // The global cap (the page semaphore's cap is this host's share).
  int64_t cap() const;
  void setCap(int64_t cap);  // master (config), POST /_room/cap; the agent sends it on

  // -- Line (tickets.h has the contracts; the file comment says how they differ)
  Issued issue(WorkerSlot slot, int64_t max_queue, Millis now, const ClientTicketing* client = nullptr) override;
  TicketView render(const TicketCookie& cookie, Millis now, Millis ttl, Contact contact = Contact::Page) override;
  TicketView touch(const TicketCookie& cookie, Millis now, Millis ttl, Contact contact = Contact::Page) override;
  TicketView poll(const TicketCookie& cookie, Millis now, Millis ttl) override;
  bool claim(const TicketCookie& cookie, Claimed* claimed = nullptr) override;
  void retire(uint64_t ticket, bool timeout) override;
  bool remove(uint64_t ticket, Counter counted = Counter::EvictedRemovedTotal) override;
  std::optional<uint64_t> nonceOf(uint64_t ticket) const override;
  std::vector<LineEntry> head(size_t limit, Millis now) const override;
  int64_t queueDepth() const override;
  int64_t liveQueueDepth() const override;

  // A ticket whose turn came found no free slot here (the agent asks the
  // engine for more); with its cookie, a Wait note too: its holder is here.
  void wantSlot(const TicketCookie* cookie = nullptr);

  // A ban in force for `key` (clients.h keys) that began on another host.
  bool bannedRemotely(const uint8_t key[16], int64_t unix_s) const;
  // Ticket `ticket` (with `nonce`) was promoted on some host, until a time past `unix_s`.
  bool promotedElsewhere(uint64_t ticket, uint64_t nonce, int64_t unix_s) const;
  // A promotion made here, for every host (until: Unix s).
  void promote(uint64_t ticket, uint64_t nonce, int64_t until);
  // A session (pass `id`) ended elsewhere, until a time past `unix_s`.
  bool revokedElsewhere(const uint8_t id[16], int64_t unix_s) const;
  // The client holds -max-tickets-per-client tickets in the room's line (the
  // engine counts them over every host), at `unix_s`.
  bool clientFull(const uint8_t key[16], int64_t unix_s) const;
  // A session ended here, for every host (until: Unix s).
  void revoke(const uint8_t id[16], int64_t until);

  // -- the master
  // Also draws this host's id on the first call (0 is never an id).
  void configure(bool enabled, bool fail_open, int64_t lease);
  // A reload changed the cap (kPushCap) and/or the mode (kPushMode) in the
  // file: the agent's next round sends them to every host, whatever the
  // room had (the file wins over older values, as on one host).
  static constexpr uint32_t kPushCap = 1, kPushMode = 2;
  void pushOnNextRound(uint32_t what);
  // This host in the room: unique by construction (a random id drawn once
  // per segment, so it survives reloads and a new agent), whatever the
  // machine's name or the master's pid.
  uint64_t hostId() const;

  // -- the agent
  void setState(ClusterState state);
  // A new block of ticket numbers [first, first + count) replaces what is
  // left of the old one.
  void offerNumbers(uint64_t first, uint32_t count);
  uint32_t numbersLeft() const;
  // The round's figures, then (when `line` is set) the line itself, head
  // first; pending goes back to 0. Wakes PageSlot waiters when positions or
  // turns may have moved.
  void publish(const ClusterRound& round, const std::vector<ClusterLineEntry>* line, bool truncated, Millis now);
  // The engine is away and this host admits on its own (-cluster-fail
  // open): the copy keeps the engine's line as it was, with `unplaced` (the
  // tickets issued here that the engine has not listed) at the back of the
  // line as Local, and the horizon becomes this host's own (the file
  // comment). The state stays Down.
  void publishAway(const std::vector<ClusterLineEntry>& unplaced, Millis now);
  // The line as last published (re-enrolment after the engine lost it).
  std::vector<ClusterLineEntry> mirrored() const;
  // The engine lost the room and the hosts re-enroll their copies: no
  // position is shown before `until` (monotonic ms), the first-poll grace
  // in which the tickets a copy listed but that had left meanwhile (every
  // host re-enrolls its own copy, a round old at most) are reaped; shown
  // before, they would count ahead and a position could grow.
  void hidePositionsUntil(Millis until);
  // Up to `max` unread notes, in order (a note whose writer died unwritten
  // for kNoteWaitMs is skipped).
  std::vector<ClusterNoteValue> takeNotes(size_t max, Millis now);
  // Demand seen since the last call (workers' turns that found no slot).
  uint64_t takeWanted();
  // What a reload asked to push (pushOnNextRound); pushed() clears it once
  // the engine took it.
  uint32_t pendingPush() const;
  void pushed(uint32_t what);
  // The room's bans in force (a, b: the client key's words) and promotions (a: ticket, b: nonce).
  void setRemoteBans(const std::vector<ClusterMarkValue>& bans);
  void setPromotions(const std::vector<ClusterMarkValue>& promoted);
  void setRevocations(const std::vector<ClusterMarkValue>& revoked);
  void setFullClients(const std::vector<ClusterMarkValue>& full);
  void countRoundTrip();

 private:
  friend class Segment;
  int64_t reclaim(WorkerSlot) override { return 0; }  // nothing names a slot (see the file comment)

  enum class Where { Ranked, Pending, Gone };
  struct Found {
    Where where = Where::Gone;
    int64_t rank = 0;      // Ranked: in the whole list (returned, line, missed)
    int64_t position = 0;  // Ranked: what the visitor is shown
    LineSection section = LineSection::Waiting;
    uint64_t nonce = 0;
    int64_t issued_ms = 0;
  };
  // Where the ticket is (reads the copy in use; notes first sightings in recent).
  Found find(const TicketCookie& cookie, Millis now);
  std::optional<Found> lookup(uint64_t id) const;  // the copy in use only
  TicketView view(const TicketCookie& cookie, Millis now, Contact contact);
  bool ready(int64_t rank) const;
  void post(const ClusterNoteValue& note);
  static void setMarks(ClusterMarks& table, std::vector<ClusterMarkValue> marks);
  // The copy not in use becomes `line` and then the one in use (the agent only).
  void writeCopy(const std::vector<ClusterLineEntry>& line, bool truncated);
  // The ticket's holder was seen here within kPresentMs, and it has not left.
  bool present(uint64_t id, Millis now) const;
  bool hasMark(const ClusterMarks& table, uint64_t a, uint64_t b, int64_t unix_s) const;
  // A Touch note, unless this host sent one for the ticket less than kTouchEveryMs ago.
  void touchNote(const TicketCookie& cookie, Millis now);
  // A Wait note, unless this host sent one for the ticket less than kWaitEveryMs ago.
  void waitNote(const TicketCookie& cookie, Millis now);
  uint64_t takeNumber();
  // recent: the word for `id`, or 0.
  uint64_t recentWord(uint64_t id) const;
  void remember(uint64_t id, Millis now, bool departed);

  LineFlow flow() const { return gate_ ? gate_->flow() : LineFlow::ByCap; }

  PageSemaphore* pages_;
  uint64_t stuck_at_ = UINT64_MAX;  // takeNotes (the agent's process): a note not written yet
  Millis stuck_since_ = 0;
  LineRate* line_rate_;
  LineGate* gate_ = nullptr;
};

}  // namespace concert::shm
