// The plain value types of src/shm: what callers pass to the segment's
// subsystems and get back from them. Nothing here lives in shared memory or
// holds a resource; they are copied freely, so a SIGKILL leaves nothing of
// them behind. The words they describe are in layout.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "common/clock.h"
#include "shm/counters.h"
#include "shm/gauges.h"

namespace concert::shm {

using WorkerSlot = uint32_t;  // index into the worker-slot table
constexpr WorkerSlot kNoSlot = 0xffffffffu;

// ---------------------------------------------------------------- geometry
struct Geometry {
  uint32_t ring_size = 1u << 16;              // power of two; live tickets at most ring_size
  uint32_t worker_slots = 4;                  // >= 2 * workers (old and new generation side by side)
  uint32_t pass_table_size = 1u << 16;        // power of two; passes tracked at once
  uint32_t revocation_table_size = 1u << 12;  // power of two; sessions ended and not yet expired
  uint32_t client_table_size = 1u << 12;      // power of two, at most 2^23; clients tracked at once
};

// ring: next power of two >= 2 * (max_queue + cap), at least 2^12;
// max_queue == 0 (unlimited) gives 2^20. slots: 2 * workers (at least 2).
// pass table: next power of two >= asset_users_max. revocations: the pass
// table's size, at least 2^12. clients: next power of two >= ring / 4, at
// least 2^12, at most 2^23.
Geometry computeGeometry(int64_t max_queue, int32_t cap, int workers, int32_t asset_users_max);

// ---------------------------------------------------------------- ranks
// Who waits ahead of whom for a page slot (admission/room.h): rank 0 is a room
// pass (promoted or invited visitors), ranks 1.. the origin's priority
// classes in -priority-classes order, then plain sessions; the line comes
// after all of them.
constexpr int kPriorityRanks = 8;             // room pass + at most 7 priority classes
constexpr int kRoomPassRank = 0;
constexpr int kSessionRank = kPriorityRanks;  // a concert_admit pass and nothing more

// ---------------------------------------------------------------- once marks
constexpr uint32_t kOnceEntries = 4096;  // once.h: marks held at most
constexpr uint32_t kOnceWindow = 32;     // entries probed from a key's home

// ---------------------------------------------------------------- cluster
constexpr uint32_t kClusterMirror = 16384;             // cluster.h: the engine's line cached, head first
constexpr uint32_t kClusterIndex = 2 * kClusterMirror;  // the cache's id -> rank map
constexpr uint32_t kClusterNotes = 8192;               // notes to the engine not yet sent
constexpr uint32_t kClusterRecent = 4096;              // tickets issued or first seen lately
constexpr uint32_t kClusterMarks = 8192;               // bans, promotions, ended sessions, across the room

// ---------------------------------------------------------------- histograms and history
constexpr size_t kHistogramCount = 4;     // histograms.h: one per Histogram
constexpr size_t kHistogramBounds = 16;   // histograms.h: finite upper bounds; one more bucket is +Inf
constexpr size_t kHistorySamples = 3600;  // history.h: one hour at one sample a second

// ---------------------------------------------------------------- tickets
// What the room_ticket cookie carries (admission/cookies.h encodes it): the
// ticket number and the random nonce that proves the visitor was given it.
struct TicketCookie {
  uint64_t ticket = 0;
  uint64_t nonce = 0;
};

enum class IssueOutcome {
  Queued,       // a waiting ticket; `ready` says whether its turn has come already
  Breaker,      // max-queue visitors wait: 503, no ticket taken
  RingFull,     // no free ring entry: answered like the breaker, counted in ring_full_total
  ClientLimit,  // the client holds max_per_client live tickets already: 429, no ticket taken
};

// Who is asking for a ticket, for -max-tickets-per-client (clients.h). The
// caller builds the key: an IPv4 address as IPv4-mapped IPv6, or an IPv6
// address with its low 64 bits zeroed.
struct ClientTicketing {
  uint8_t key[16] = {};
  int32_t max_per_client = 0;  // live tickets at most; 0: unlimited (the ticket is still counted)
};

// One ticket at the head of the line, as GET /_room/queue lists it
// (TicketRing::head).
struct LineEntry {
  uint64_t ticket = 0;
  bool returned = false;  // missed its turn and came back: ahead of the line
  Millis age = 0;         // since issued
  Millis unseen = 0;      // since its holder was last seen
  bool has_client = false;
  uint8_t client[16] = {};  // the client key (clients.h) its place is counted against
};

// What a successful claim took out of the line (TicketRing::claim).
struct Claimed {
  bool from_line = false;  // a Waiting ticket; false: a Returned one (it had missed its turn)
  Millis waited = 0;       // since the ticket was issued
  bool inversion = false;  // admitted past a room's worth of older waiting tickets (fifo_inversions_total)
};

struct Issued {
  IssueOutcome outcome = IssueOutcome::Breaker;
  TicketCookie cookie;   // valid for Queued
  int64_t position = 0;  // Queued: >= 1
  bool ready = false;    // Queued: a page slot may be taken with it now (claim)
};

// What the master's janitor does to the line on each pass (TicketRing::sweep).
struct SweepLimits {
  Millis ttl = 0;           // a waiting ticket unseen this long is abandoned (0: not checked this pass)
  Millis first_poll = 0;    // a ticket whose holder never came back is abandoned after this
  Millis claim_window = 0;  // a turn not taken within this stops holding the line
};

struct SweepReport {
  int64_t expired = 0;           // past the TTL (evicted_total)
  int64_t ghosts = 0;            // never came back (ghost_evicted_total, evicted_total)
  int64_t missed = 0;            // turns not taken (missed_turns_total)
  int64_t clients_repaired = 0;  // client live counts set to the recount (clients.h)
};

// What the janitor did to a sale's pre-queue block (TicketRing::saleTick).
struct SaleTick {
  bool open = false;    // the block is open (the pre-queue is on)
  bool closed = false;  // the block was closed on this pass
  uint64_t first = 0;   // the block's first number (open or closed)
  int64_t placed = 0;   // closed: pre-queue tickets still holding a place in it
};

enum class TicketState {
  Unknown,  // no such live ticket (admitted already, reaped, forged, other instance)
  Expired,  // it was waiting but its sliding TTL ran out; now retired
  Waiting,  // still in line: `position` >= 1 (live visitors ahead + 1)
  Ready,    // its turn: a page slot may be taken with it (claim)
};

// Who presents a ticket's cookie, which decides what the contact may do:
//   Page  a page request: its holder is back (seen), and a ticket that
//         missed its turn gets it back (Returned), ahead of the line. A turn
//         comes back at most once: a returned ticket that misses again
//         leaves the line.
//   Look  a /queue/status poll or a /queue/events stream: its holder is
//         here (seen, kept from the TTL), but looking takes no turn back, so
//         a holder who watches and never comes does not hold up the line.
//   Own   the request that was issued the ticket, while it is held or sent
//         its first waiting page: keeps the ticket from the TTL, but is no
//         return (the first-poll grace still applies once it is answered).
enum class Contact : uint8_t { Page, Look, Own };

struct TicketView {
  TicketState state = TicketState::Unknown;
  int64_t position = 0;         // Waiting: >= 1
  int64_t raw_position = 0;     // live visitors ahead + 1, also when ready (position is 0 then)
  bool rate_limited = false;    // poll(): previous accepted poll < 1 s ago
  bool refresh_cookie = false;  // cookies were last sent >= ttl/3 ago (now stamped as sent)
  // Waiting: false while the engine has not placed the ticket yet (-cluster,
  // cluster.h): `position` is then only an estimate, and may be too low.
  bool placed = true;
};

// ---------------------------------------------------------------- passes
enum class PassProto { H1 = 0, H2 = 1 };

struct PassHold {  // returned by PassTable::tryAcquire; give it back to release
  uint32_t index = 0xffffffffu;
  PassProto proto = PassProto::H1;
  bool valid() const { return index != 0xffffffffu; }
};

enum class PassAcquire {
  Acquired,
  AtCap,      // this pass already has cap requests in flight for this protocol: wait or 429
  TableFull,  // no entry free or idle for a new pass: the request gets 503 (counted in pass_table_full_total)
};

// ---------------------------------------------------------------- revocations
enum class RevokeOutcome {
  Added,     // a new entry (an empty one, or one whose revocation had run out)
  Extended,  // the id was revoked already: its until is now the later of the two
  Replaced,  // no free entry near its home: the one expiring soonest was overwritten
  Ignored,   // until is not after now: nothing to record
  Busy,      // every entry near its home stayed claimed by other writers: nothing recorded
};

// ---------------------------------------------------------------- clients
// Strikes and bans (Segment::strike, clients.h). threshold strikes within
// 10 minutes ban the client for `ban`, doubled on each repeat, at most 24 h.
struct AbusePolicy {
  int32_t threshold = 0;  // 0: strikes never ban
  Millis ban = 600000;
};

struct StrikeOutcome {
  bool recorded = false;        // false: no entry could be had for the client (client_table_full_total)
  bool banned_now = false;      // this strike started a ban
  Millis ban_for = 0;           // banned_now: how long
  int32_t strikes = 0;          // strikes in the client's current window (0 right after a ban began)
  int64_t tickets_retired = 0;  // banned_now: the client's tickets that left the line
};

// ---------------------------------------------------------------- waits
// Resources a worker can wait for across processes. A release of one wakes
// (eventfd write) every worker slot that registered waiters for it.
enum class Resource : uint32_t { PageSlot = 0, AssetSlot = 1, PassSlot = 2, LongLivedSlot = 3 };

// ---------------------------------------------------------------- modes
// The room's mode (-mode; modes.h keeps it in the segment).
// Open is 0, so a fresh segment is open.
enum class RoomMode : uint32_t {
  Open = 0,         // the cap and the line as usual
  Pause = 1,        // nobody new is admitted (direct or from the line); places are kept; sessions go on
  Reject = 2,       // page requests without a pass get the maintenance page (503); sessions go on
  Passthrough = 3,  // no cap for pages; what the cap would have queued is counted (would_queue_total)
};

constexpr std::string_view roomModeName(RoomMode mode) {
  switch (mode) {
    case RoomMode::Open: return "open";
    case RoomMode::Pause: return "pause";
    case RoomMode::Reject: return "reject";
    case RoomMode::Passthrough: return "passthrough";
  }
  return "open";
}

// "open", "pause", "reject" or "passthrough" (exactly); nullopt otherwise.
constexpr std::optional<RoomMode> parseRoomMode(std::string_view name) {
  for (RoomMode mode : {RoomMode::Open, RoomMode::Pause, RoomMode::Reject, RoomMode::Passthrough})
    if (roomModeName(mode) == name) return mode;
  return std::nullopt;
}

// ---------------------------------------------------------------- stats
struct StatsSnapshot {
  // One field per gauge, named by its stats key (gauges.h).
#define CONCERT_GAUGE_FIELD(key, kind, source, metric, help) GaugeField<GaugeKind::kind>::type key{};
  CONCERT_GAUGES(CONCERT_GAUGE_FIELD)
#undef CONCERT_GAUGE_FIELD
  bool cluster = false;  // -cluster (cluster.h): the Cluster gauges are read and reported

  // One field per counter, named by its stats key (counters.h).
#define CONCERT_COUNTER_FIELD(name, key) uint64_t key = 0;
  CONCERT_COUNTERS(CONCERT_COUNTER_FIELD)
#undef CONCERT_COUNTER_FIELD

  // The field of counter `c`.
  uint64_t counter(Counter c) const {
    return const_cast<StatsSnapshot*>(this)->counter(c);
  }
  uint64_t& counter(Counter c) {
    switch (c) {
#define CONCERT_COUNTER_CASE(name, key) \
  case Counter::name: return key;
      CONCERT_COUNTERS(CONCERT_COUNTER_CASE)
#undef CONCERT_COUNTER_CASE
    }
    return queued_total;  // unreachable: the switch covers every Counter
  }
};

// What Segment::reclaimDeadWorker returned to the pool (for the log line).
struct ReclaimReport {
  int64_t page_slots = 0;
  int64_t tickets_finished = 0;
  int64_t asset_slots = 0;
  int64_t pass_holds = 0;
  int64_t long_lived_slots = 0;
  int64_t revocation_writes = 0;  // entries it was writing (not a hold: not in total())
  int64_t client_writes = 0;      // client entries and bucket locks it held (not in total() either)
  int64_t quarantined = 0;        // of page_slots: counted until the origin may be done with them
  int64_t total() const { return page_slots + asset_slots + pass_holds + long_lived_slots; }
};

}  // namespace concert::shm
