// The carved segment: what lives where in the shared mapping, the meaning
// of every word, and the process-local view (Layout) every subsystem handle
// reads it through. Private to src/shm.
//
// The mapping is one MAP_SHARED region of a file (a memfd, or the state
// dir's segment file) mapped by the master before the first fork, so it
// sits at the same address in every process and the raw pointers kept in
// Layout are valid everywhere. Nothing in it is a pointer: a master that maps
// it again after a restart or a binary upgrade finds every word meaning what
// it meant. It is carved once into fixed arrays at 64-byte-aligned offsets
// and never allocated from again. A fresh file reads as zeros without
// taking memory (ftruncate makes it sparse), and a zero std::atomic of a
// lock-free integer type is that integer 0, so the large arrays (ticket
// ring, bitmaps, client tags, pass table, revocations, client table) are
// used as they come, without touching (and committing) every page at
// start-up; only the header is written.
//
// Word by word, who writes (each subsystem's file says more):
//   Header      master at create (magic, layout_version and the geometry
//               never change after: Segment::checkHeader compares them with
//               this binary's); page_cap / configured cap / generation by
//               the master (and POST /_room/cap from any worker); asset_cap
//               only at create; long_lived_cap by the master; next_ticket, low_water, utilization,
//               line_admitted and counters by everyone; ban_horizon by strikers, forward only; the
//               line's pace (LinePace) by the master's janitor; line_credit by CAS from anyone
//               (sessions.h).
//   RoomControl (in the header) the mode by the master and POST /_room/mode;
//               configured_mode, rate_interval and rate_burst by the master
//               only; rate_tat by CAS from every admitter (modes.h,
//               admit_rate.h).
//   OnceTable   (in the header) each word by CAS from anyone claiming a mark
//               (invitations, promote signatures, single-use passes,
//               promoted tickets); a word is a whole mark, nothing to
//               reclaim (once.h).
//   SaleControl (in the header) start_ms, prequeue_ms and shuffle by the
//               master only (start, reload); the block word by CAS from
//               anyone opening or closing the pre-queue's block, the
//               master's janitor included (sale.h, tickets.h).
//   SlotRecord  page / asset / long-lived counters: only the slot's own worker (and the
//               master in reclaim, after the worker is dead); pid, generation:
//               master; heartbeat: the worker; waiting mask: the worker;
//               sessions_waiting and ranked_waiting: the slot's worker (and
//               the master in reclaim, sessions.h); histogram cells: only
//               the slot's worker (slot 0's EngineRoundTrip cells: the
//               cluster agent), never reset.
//   TicketEntry state word by CAS from anyone (issuer, claimer, finisher,
//               retirer, master); nonce and times by the issuer and touches;
//               the issue time (parallel array) by the issuer only; the
//               cookie-sent time (parallel array) by the issuer and by
//               whoever sends the ticket's cookies again.
//   Ring bits   waiting, returned, missed, out (CountedBits): each bit by
//               whoever moved its entry's state word, the counts above them
//               by the same writers (store, then verify) and rebuilt by the
//               master in reclaim (counted_bits.h).
//   Client tag  (per ring entry) stored by the issuer while the entry is
//               Reserved; cleared by CAS by whoever leaves the ticket's
//               client (finishers, the reusing issuer, the master).
//   Pass table  state word by CAS; cells only by their own slot (and master
//               in reclaim); home-bucket locks by creators.
//   Revocations state word by CAS; id and until by the writer holding the
//               entry (and the master in reclaim).
//   Clients     state word by CAS; key, strikes and ban by the writer
//               holding the entry; the live count by CAS from anyone;
//               last_seen by issuers and strikers; audit by the master;
//               create_lock by creators (and the master in reclaim).
//   History     the master's janitor only, one entry a second (seqlock per
//               entry, history.h); everyone else only reads.
//   ClusterArea enabled, fail_open and lease by the master (create,
//               reload); cap by the master, POST /_room/cap and the cluster
//               agent; the engine's state, hosts, reservation and its
//               lease, horizon, depth, round trips, the mirrors and the marks
//               by the agent; ticket numbers stored by the agent and taken by
//               CAS by workers; notes appended by workers and consumed by the
//               agent; pending, wanted, local_next, recent, touched, polled
//               and waited by workers (pending reset by the agent). cluster.h
//               has the word-by-word list.
//
// A SIGKILL leaves the words as they were at that instruction: every
// structure here is laid out so that what a dead worker held is named by its
// slot number (per-slot counters and cells, ticket and pass owners, lock
// words holding slot + 1, revocation and client-entry writers), and
// Segment::reclaimDeadWorker finds it from the words alone. The header's
// shared words (next_ticket, low_water, counters) are only ever moved by
// single atomic steps that leave them valid. One thing is mended rather than
// reclaimed: a client's live count, which a SIGKILL can leave one too high
// (clients.h); the master's janitor recounts it from the tags.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "shm/counted_bits.h"
#include "shm/types.h"

namespace concert::shm {

constexpr uint64_t kMagic = 0x54524543'4e4f4321ull;  // "!CONCERT" little-endian
constexpr uint32_t kLayoutVersion = 19;

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// ------------------------------------------------------------------ tickets
// Ticket state word: ticket number (48 bits) | state (4 bits) | owner (12 bits).
// Ticket numbers only grow in one entry (t, t + R, t + 2R, ...), so a CAS on
// this word can never succeed against a recycled entry (no ABA).
enum class EntryState : uint64_t {
  Free = 0,      // never used
  Reserved = 1,  // ticket number taken, issuer still filling the entry (owner = issuer)
  Waiting = 2,   // in line, holds a cookie
  Missed = 3,    // its turn came and was not taken within the claim window: out of the line
  Finished = 4,  // admitted (claimed), retired, expired or abandoned
  Returned = 5,  // a missed ticket whose holder came back: ahead of the line
  Vacant = 6,    // a number of the sale's pre-queue block nobody holds yet: out of the line (tickets.h)
};

constexpr uint64_t kTicketBits = 48;
constexpr uint64_t kMaxTicket = (uint64_t{1} << kTicketBits) - 1;
constexpr uint32_t kOwnerMaster = 0xfff;  // the master's janitor
constexpr uint32_t kOwnerNone = 0xffe;
constexpr uint32_t kMaxWorkerSlots = 0xffe;

constexpr uint64_t packEntry(uint64_t ticket, EntryState state, uint32_t owner) {
  return (ticket << 16) | (static_cast<uint64_t>(state) << 12) | (owner & 0xfffu);
}
constexpr uint64_t entryTicket(uint64_t word) {
  return word >> 16;
}
constexpr EntryState entryState(uint64_t word) {
  return static_cast<EntryState>((word >> 12) & 0xf);
}
constexpr uint32_t entryOwner(uint64_t word) {
  return static_cast<uint32_t>(word & 0xfff);
}

// 32 bytes. Times are CLOCK_MONOTONIC milliseconds truncated to 32 bits and
// compared as signed differences: exact while two times are < 24.8 days
// apart, and a waiting ticket never lives longer than TTL (<= 24 h) plus one
// janitor period.
struct TicketEntry {
  std::atomic<uint64_t> state;
  std::atomic<uint64_t> nonce;
  std::atomic<uint32_t> last_seen;
  std::atomic<uint32_t> last_poll;    // 0: never polled
  std::atomic<uint32_t> ready_since;  // 0: not seen ready by the janitor (see tickets.h)
  std::atomic<uint32_t> seen;         // 1 once its holder came back after the issuing request
};
static_assert(sizeof(TicketEntry) == 32);

// ------------------------------------------------------------------ state words
// The entry state word of every shared table (passes, revocations, clients):
// version (32 bits) | state (4 bits) | owner slot (12 bits). Each table has
// its own State enum and its own names for these four (packPass, ...).
template <typename State>
constexpr uint64_t packStateWord(uint32_t version, State state, uint32_t owner) {
  return (uint64_t{version} << 16) | (static_cast<uint64_t>(state) << 12) | (owner & 0xfffu);
}
constexpr uint32_t stateWordVersion(uint64_t word) {
  return static_cast<uint32_t>(word >> 16);
}
template <typename State>
constexpr State stateWordState(uint64_t word) {
  return static_cast<State>((word >> 12) & 0xf);
}
constexpr uint32_t stateWordOwner(uint64_t word) {
  return static_cast<uint32_t>(word & 0xfff);
}

// ------------------------------------------------------------------ passes
// Pass state word: version (32 bits) | state (4 bits) | owner slot (12 bits).
enum class PassState : uint64_t {
  Empty = 0,     // never used: ends a probe chain
  Creating = 1,  // claimed by `owner`, id being written
  Live = 2,
  Removing = 3,   // master sweep checking the cells one last time
  Tombstone = 4,  // removed: reusable, does not end a probe chain
};

inline constexpr auto& packPass = packStateWord<PassState>;
inline constexpr auto& passVersion = stateWordVersion;
inline constexpr auto& passState = stateWordState<PassState>;
inline constexpr auto& passOwner = stateWordOwner;

// ------------------------------------------------------------------ revocations
// Revocation state word: version (32 bits) | state (4 bits) | owner slot (12
// bits); the states are explained in revocations.h.
enum class RevocationState : uint64_t {
  Empty = 0,    // never used: ends a probe chain
  Writing = 1,  // `owner` is writing a new id and until: not a revocation
  Live = 2,     // id revoked while now < until; free once until has passed
  Raising = 3,  // `owner` is raising until, id unchanged: still a revocation
};

inline constexpr auto& packRevocation = packStateWord<RevocationState>;
inline constexpr auto& revocationVersion = stateWordVersion;
inline constexpr auto& revocationState = stateWordState<RevocationState>;
inline constexpr auto& revocationOwner = stateWordOwner;

// 32 bytes: a probe reads state, id and until together, two entries a line.
struct RevocationEntry {
  std::atomic<uint64_t> state;
  std::atomic<uint64_t> id[2];
  std::atomic<int64_t> until;  // Unix seconds
};
static_assert(sizeof(RevocationEntry) == 32);

// ------------------------------------------------------------------ clients
// Client state word: version (32 bits) | state (4 bits) | owner slot (12
// bits); the states are explained in clients.h.
enum class ClientState : uint64_t {
  Empty = 0,     // never used: ends a probe chain
  Claiming = 1,  // `owner` is taking it for a new client: key not valid
  Live = 2,      // a client's entry
  Updating = 3,  // `owner` is writing its strikes and ban; key unchanged
  Vacant = 4,    // free (a claim a dead writer left half done); does not end a chain
};

inline constexpr auto& packClient = packStateWord<ClientState>;
inline constexpr auto& clientVersion = stateWordVersion;
inline constexpr auto& clientState = stateWordState<ClientState>;
inline constexpr auto& clientOwner = stateWordOwner;

// Two 32-bit halves in one word, stored and read in one step: the live
// count (changes | count), strikes (window start | count), the ban (until
// | bans so far) and the janitor's audit (changes | since + 1).
constexpr uint64_t packHalves(uint32_t high, uint32_t low) {
  return (uint64_t{high} << 32) | low;
}
constexpr uint32_t highHalf(uint64_t word) {
  return static_cast<uint32_t>(word >> 32);
}
constexpr uint32_t lowHalf(uint64_t word) {
  return static_cast<uint32_t>(word);
}

// One client, one cache line. Times are monotonic seconds (secondsOf).
struct alignas(64) ClientEntry {
  std::atomic<uint64_t> state;
  std::atomic<uint64_t> key[2];
  std::atomic<uint64_t> live;     // changes (every +1 and -1) | live tickets
  std::atomic<uint64_t> strikes;  // window start | strikes in the window
  std::atomic<uint64_t> ban;      // until (banned while now < until) | bans so far
  std::atomic<uint64_t> audit;    // master janitor: `live` changes seen | first seen off + 1 (0: none)
  std::atomic<uint32_t> last_seen;
  std::atomic<uint32_t> create_lock;  // as a home bucket: creator's slot + 1, 0 = free
};
static_assert(sizeof(ClientEntry) == 64);

// Client tag, one per ring entry: which client's count a ticket holds.
// (ticket's lap mod 256) << 24 | (client index + 1); 0 = none (untracked).
constexpr uint32_t kMaxClientTable = 1u << 23;  // index + 1 fits in 24 bits
constexpr uint32_t packClientTag(uint64_t ticket, uint32_t ring_bits, uint32_t client) {
  return (static_cast<uint32_t>((ticket >> ring_bits) & 0xff) << 24) | ((client + 1) & 0xffffffu);
}
constexpr bool tagNames(uint32_t tag, uint64_t ticket, uint32_t ring_bits) {
  return tag != 0 && (tag >> 24) == static_cast<uint32_t>((ticket >> ring_bits) & 0xff);
}
constexpr uint32_t tagClient(uint32_t tag) {
  return (tag & 0xffffffu) - 1;
}

// ------------------------------------------------------------------ line pace
// The line's smoothed pace and the janitor's open bucket (line_rate.h).
constexpr int64_t kNeverPassed = INT64_MIN;  // last_pass before the janitor's first pass

struct alignas(64) LinePace {
  std::atomic<uint64_t> estimate;       // pace per slot << 32 | slow reference per slot (float32s); 0 = none yet
  std::atomic<uint64_t> bucket;         // waited ms << 32 | line_admitted at the bucket's start (mod 2^32)
  std::atomic<int64_t> bucket_cap;      // janitor only: the page cap when the open bucket started
  std::atomic<int64_t> last_pass;       // janitor only: its last pass (kNeverPassed before the first)
  std::atomic<uint64_t> last_admitted;  // janitor only: line_admitted at its last pass
  std::atomic<int64_t> last_depth;      // janitor only: waiting + returned tickets at its last pass
};

// ------------------------------------------------------------------ room control
// The room's mode and the admission rate's bucket (modes.h, admit_rate.h).
// Every word is read and stored in one atomic step, so a SIGKILL leaves each
// valid: a mode is either set or not; a token a dead admitter took and never
// used is one admission fewer in that second, nothing more.
struct alignas(64) RoomControl {
  std::atomic<uint32_t> mode;                 // RoomMode now: master, POST /_room/mode
  std::atomic<uint32_t> configured_mode;      // master: the configured mode when it last set the mode
  std::atomic<int64_t> rate_interval;         // master: ns between admissions at the rate; 0 = no limit
  std::atomic<int64_t> rate_burst;            // master: admissions the bucket holds at most (>= 1)
  alignas(64) std::atomic<int64_t> rate_tat;  // everyone, by CAS: the bucket's theoretical arrival time (ns)
};

// ------------------------------------------------------------------ capacity
// What the master learned about the origin's capacity (capacity.h).
struct alignas(64) CapacityCells {
  std::atomic<uint32_t> adaptive_stopped;       // a runtime cap stopped -adaptive: any worker, cleared by the master
  std::atomic<uint32_t> adaptive_active;        // master: -adaptive moves the cap now
  std::atomic<int64_t> base_latency_us;         // master: -adaptive's unqueued time to first byte; 0 unknown
  std::atomic<int64_t> origin_queue_milli;      // master: -adaptive's estimate of requests queued inside the origin
  std::atomic<int64_t> recommended_cap;         // master: the advisor's cap; 0 not known yet
  std::atomic<int64_t> knee_latency_us;         // master: the advisor's unqueued time to first byte
  std::atomic<int64_t> peak_throughput_milli;   // master: the advisor's most pages per second (x 1000)
  std::atomic<int64_t> origin_status_active;    // master, -origin-status: busy origin processes; -1 unknown
  std::atomic<int64_t> origin_status_total;     // master, -origin-status: origin processes
  std::atomic<int64_t> origin_status_queue;     // master, -origin-status: connections waiting in its listen queue
  std::atomic<int64_t> origin_status_max_reached;  // master, -origin-status: times it ran out of processes
};

// ------------------------------------------------------------------ once marks
// Single-use marks (once.h): one word per entry, 0 = never used; sizes in types.h.

struct alignas(64) OnceTable {
  std::atomic<uint64_t> words[kOnceEntries];
};

// ------------------------------------------------------------------ scheduled sale
// The sale's schedule and its pre-queue block (sale.h, tickets.h). The
// schedule words are the master's (start, reload); the block word moves by
// CAS from anyone: first ticket (48 bits) | BlockPhase (4 bits) | owner
// slot (12 bits, the opener while Opening), packed like an entry word.
enum class BlockPhase : uint64_t {
  Idle = 0,     // no block: none opened yet for this schedule
  Opening = 1,  // `owner` is placing the head entry (Vacant(first)) and moving next_ticket past the block
  Open = 2,     // [first, first + block size) belongs to the pre-queue: arrivals take random places in it
  Closing = 3,  // the pre-queue is over: its untaken numbers are being finished
  Done = 4,     // every number of the block is a ticket or Finished; a new schedule makes it Idle again
};

constexpr uint64_t packBlock(uint64_t first, BlockPhase phase, uint32_t owner) {
  return (first << 16) | (static_cast<uint64_t>(phase) << 12) | (owner & 0xfffu);
}
constexpr BlockPhase blockPhase(uint64_t word) {
  return static_cast<BlockPhase>((word >> 12) & 0xf);
}

struct alignas(64) SaleControl {
  std::atomic<int64_t> start_ms;            // master: the event start, Unix ms; 0 = no sale
  std::atomic<int64_t> prequeue_ms;         // master: the pre-queue opens this long before the start; 0 = none
  std::atomic<uint32_t> shuffle;            // master: 1 = pre-queue arrivals take random places in the block
  alignas(64) std::atomic<uint64_t> block;  // anyone, by CAS: packBlock
};

// ------------------------------------------------------------------ header
struct alignas(64) PaddedCounter {
  std::atomic<uint64_t> value;
};

struct alignas(64) Header {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t ring_size;
  uint64_t total_bytes;
  uint32_t worker_slots;
  uint32_t pass_table_size;
  uint32_t revocation_table_size;
  uint32_t client_table_size;
  uint64_t boot_id[2];                  // the machine's boot when created: its times are this boot's monotonic clock
  std::atomic<int64_t> asset_cap;       // fixed while a process maps it; set again by a master that maps it anew
  std::atomic<int64_t> long_lived_cap;  // set at create and by the master on reload
  std::atomic<int64_t> page_cap;
  std::atomic<int64_t> configured_page_cap;
  std::atomic<uint32_t> generation;
  alignas(64) std::atomic<uint64_t> next_ticket;    // next number to issue (first is 1)
  alignas(64) std::atomic<uint64_t> low_water;      // no ticket below it is Reserved or Waiting
  alignas(64) std::atomic<uint64_t> utilization;    // bit pattern of a double
  alignas(64) std::atomic<int64_t> line_credit;     // sessions.h: the line's owed slots, in thousandths
  alignas(64) std::atomic<uint32_t> ban_horizon;    // clients.h: the latest ban until ever set (seconds)
  alignas(64) std::atomic<uint64_t> line_admitted;  // line_rate.h: admissions from the line, ever
  alignas(64) std::atomic<int64_t> quarantined;     // semaphore.h: page slots of ended requests the origin may still serve
  std::atomic<int64_t> quarantine_until;            // semaphore.h: when they come back (monotonic ms)
  LinePace pace;                                    // line_rate.h
  PaddedCounter counters[kCounterCount];            // one per CONCERT_COUNTERS entry
  RoomControl room;                                 // modes.h, admit_rate.h
  OnceTable once;                                   // once.h
  SaleControl sale;                                 // sale.h, tickets.h
  CapacityCells capacity;                           // capacity.h
};

// One histogram's cells in one worker slot (histograms.h).
struct HistogramCells {
  std::atomic<uint64_t> buckets[kHistogramBounds + 1];  // per bucket, the last +Inf
  std::atomic<uint64_t> sum_micros;
};

// One per worker slot; page and asset counters on their own cache lines
// because every acquisition in every worker sums them.
struct alignas(64) SlotRecord {
  alignas(64) std::atomic<int64_t> page;
  alignas(64) std::atomic<int64_t> asset;
  alignas(64) std::atomic<int64_t> long_lived;
  alignas(64) std::atomic<int64_t> sessions_waiting;  // sessions.h
  std::atomic<int64_t> ranked_waiting[kPriorityRanks];  // sessions.h: room passes and priority classes
  alignas(64) std::atomic<int64_t> pid;
  std::atomic<int64_t> heartbeat;
  std::atomic<uint32_t> generation;
  std::atomic<uint32_t> waiting_mask;  // bit per Resource
  std::atomic<uint32_t> wake_pending;  // the eventfd was written and not read yet
  alignas(64) HistogramCells histograms[kHistogramCount];  // histograms.h: only this slot's worker
};

// ------------------------------------------------------------------ history
// The dashboard's last hour (history.h): sample n in entries[n % kHistorySamples].
constexpr size_t kHistoryWords = 8;  // the words of one HistorySample (its index is implied)

struct HistoryEntry {
  std::atomic<uint64_t> seq;  // 0: never written; 2n + 1: sample n being written; 2n + 2: holds sample n
  std::atomic<uint64_t> words[kHistoryWords];
};

struct alignas(64) HistoryRing {
  std::atomic<uint64_t> written;  // samples ever written
  alignas(64) HistoryEntry entries[kHistorySamples];
};

// ------------------------------------------------------------------ cluster
// The host's cache of the engine's line and its mailbox to the engine
// (cluster.h). Sizes in types.h (kCluster*).

// One ticket of the engine's line, as the agent last read it.
struct ClusterTicket {
  std::atomic<uint64_t> id;
  std::atomic<uint64_t> nonce;
  std::atomic<int64_t> issued_ms;  // Unix ms
};

// One copy of the line's head: order[r] is the ticket of rank r (0 = the
// head; returned tickets, then the line, then missed ones, cluster.h); index[] is an open-addressing map id -> rank (word id << 16 | rank,
// 0 = empty, linear probing from the id's hash).
struct ClusterMirror {
  std::atomic<uint32_t> count;
  std::atomic<uint32_t> returned;   // order[0, returned) are returned tickets (LineSection)
  std::atomic<uint32_t> waiting;    // order[returned, returned + waiting) the line
  std::atomic<uint32_t> local;      // then tickets issued here while the engine is away; then missed ones
  std::atomic<uint32_t> truncated;  // the line is longer than kClusterMirror
  ClusterTicket order[kClusterMirror];
  std::atomic<uint64_t> index[kClusterIndex];
};

// A worker's note to the engine (cluster.h): seq = (its position + 1) << 8 |
// NoteKind once written (0 or an older lap: not yet).
struct ClusterNote {
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> id;  // a ticket, or a key's first word (Revoke)
  std::atomic<uint64_t> nonce;
  std::atomic<int64_t> issued_ms;
  std::atomic<uint64_t> key_a, key_b;  // Enroll: the holder's client key (0, 0: none)
};

// Marks the room's hosts share (cluster.h): a ban in force (a, b = the
// client key's two words), a promotion (a = ticket, b = nonce) or an ended
// session (a, b = the pass id's two words), and its end (Unix s), as the
// agent last read them from the engine. The agent rewrites a table, sorted
// by (a, b), under `version` (odd while it writes).
struct ClusterMark {
  std::atomic<uint64_t> a, b;
  std::atomic<int64_t> until;
};

struct alignas(64) ClusterMarks {
  std::atomic<uint64_t> version;
  std::atomic<uint32_t> count;
  ClusterMark marks[kClusterMarks];
};

struct alignas(64) ClusterArea {
  std::atomic<uint32_t> enabled;    // master at create: -cluster is set
  std::atomic<uint32_t> fail_open;  // master at create and reload: -cluster-fail open
  std::atomic<int64_t> cap;         // the global cap: master (config), POST /_room/cap, the agent (engine)
  std::atomic<int64_t> lease;       // master: -cluster-lease
  std::atomic<uint64_t> host_id;    // master at create: this host's random id in the room, kept across reloads
  std::atomic<uint32_t> push;       // master on reload: kPushCap | kPushMode changed by the file; the agent clears
  alignas(64) std::atomic<uint32_t> state;  // agent: ClusterState
  std::atomic<int32_t> hosts;               // agent: hosts last seen (this one included)
  std::atomic<int64_t> reserved;            // agent: slots this host holds from the global cap
  std::atomic<int64_t> horizon;             // agent: tickets ranked below it may take a slot
  std::atomic<int64_t> engine_horizon;      // agent: the engine's last horizon (horizon, unless it is away)
  std::atomic<int64_t> positions_from_ms;   // agent: no position is shown before (monotonic ms; the room rebuilt)
  std::atomic<int64_t> depth;               // agent: the engine's line, everyone waiting
  std::atomic<int64_t> refreshed_ms;        // agent: when the mirror was last published (monotonic ms)
  std::atomic<int64_t> lease_until_ms;      // agent: the reservation is used until then (monotonic ms; 0: no end)
  std::atomic<uint64_t> round_trips;        // agent: engine round trips, ever
  alignas(64) std::atomic<int64_t> pending;       // workers +1 per ticket issued, agent: 0 on publish
  alignas(64) std::atomic<uint64_t> numbers;      // agent stores, workers take by CAS: next << 16 | left
  alignas(64) std::atomic<uint64_t> local_next;   // workers: ids issued while the engine is away
  alignas(64) std::atomic<uint64_t> wanted;       // workers: a ready ticket found no local slot
  alignas(64) std::atomic<uint64_t> mirror_version;  // agent: +1 when a publish starts, +1 when it ends
  std::atomic<uint32_t> active;                      // agent: which mirror readers use
  alignas(64) std::atomic<uint64_t> notes_reserved;  // workers, by CAS: notes taken
  alignas(64) std::atomic<uint64_t> notes_read;      // agent: notes consumed
  alignas(64) std::atomic<uint64_t> recent[kClusterRecent];  // id << 17 | departed << 16 | seconds (mod 2^16)
  alignas(64) std::atomic<uint64_t> touched[kClusterRecent];  // id << 16 | seconds (mod 2^16) of its last Touch note
  alignas(64) std::atomic<uint64_t> polled[kClusterRecent];   // id << 16 | tenths of a second (mod 2^16) of its last poll
  alignas(64) std::atomic<uint64_t> waited[kClusterRecent];   // id << 16 | tenths of a second (mod 2^16): last Wait note
  ClusterMarks bans;      // agent: the room's bans in force (P:bans)
  ClusterMarks promoted;  // agent: tickets promoted on any host (P:promoted)
  ClusterMarks revoked;   // agent: sessions the origin ended on any host (P:revoked)
  ClusterMarks full;      // agent: clients at -max-tickets-per-client in the room's line (P:full)
  ClusterNote notes[kClusterNotes];
  ClusterMirror mirrors[2];
};

// ------------------------------------------------------------------ the view
// This process's pointers into the mapping (identical in every forked
// process) and the geometry it was carved with. Filled once by
// Segment::create; every subsystem handle keeps a pointer to it.
class Layout {
 public:
  Geometry geometry;
  uint64_t ring_mask = 0;
  uint32_t pass_mask = 0;
  uint32_t revocation_mask = 0;
  uint32_t client_mask = 0;
  uint32_t ring_bits = 0;  // ring_size == 1 << ring_bits

  Header* header = nullptr;
  SlotRecord* slots = nullptr;
  TicketEntry* entries = nullptr;
  std::atomic<uint32_t>* cookie_sent = nullptr;  // per ring entry, ms (32-bit)
  std::atomic<uint32_t>* issued_at = nullptr;    // per ring entry, ms (32-bit): when the ticket was issued
  CountedBits waiting;                           // bit i: entry i is Waiting
  CountedBits returned;                          // bit i: entry i is Returned
  CountedBits missed;                            // bit i: entry i is Missed
  CountedBits out;                               // bit i: entry i left the line (Finished, Missed, Returned)
  std::atomic<uint64_t>* pass_state = nullptr;   // PassState word per entry
  std::atomic<uint64_t>* pass_id = nullptr;      // two words per entry
  std::atomic<int64_t>* pass_last_used = nullptr;
  std::atomic<uint32_t>* pass_cells = nullptr;  // [entry][slot][proto]
  std::atomic<uint32_t>* pass_locks = nullptr;  // home-bucket creation locks: owner slot + 1, 0 = free
  RevocationEntry* revocations = nullptr;
  ClientEntry* clients = nullptr;
  std::atomic<uint32_t>* client_tags = nullptr;  // per ring entry (packClientTag)
  HistoryRing* history = nullptr;
  ClusterArea* cluster = nullptr;

  TicketEntry& entry(uint64_t ticket) const { return entries[ticket & ring_mask]; }
  uint32_t index(uint64_t ticket) const { return static_cast<uint32_t>(ticket & ring_mask); }
  std::atomic<uint64_t>& counter(Counter c) const { return header->counters[static_cast<size_t>(c)].value; }
  std::atomic<uint32_t>& passCell(uint32_t index, WorkerSlot slot, PassProto proto) const {
    return pass_cells[(static_cast<size_t>(index) * geometry.worker_slots + slot) * 2 + static_cast<size_t>(proto)];
  }
};

// Small helpers shared by the .cpp files of src/shm.

// The hash of a 16-byte pass id (its two words), for a table's home bucket:
// splitmix64's finaliser over the words combined.
inline uint64_t hashId(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b * 0x9e3779b97f4a7c15ull);
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// A 16-byte pass id as two words, and its home bucket in a table of mask + 1
// entries (the pass table and the revocation table key on the same ids).
struct IdKey {
  uint64_t a, b;
  uint32_t home;
};

inline IdKey makeIdKey(const uint8_t id[16], uint32_t mask) {
  IdKey key;
  std::memcpy(&key.a, id, 8);
  std::memcpy(&key.b, id + 8, 8);
  key.home = static_cast<uint32_t>(hashId(key.a, key.b)) & mask;
  return key;
}
inline uint32_t low32(Millis ms) {
  return static_cast<uint32_t>(static_cast<uint64_t>(ms));
}
inline int64_t elapsed32(Millis now, uint32_t then) {
  return static_cast<int32_t>(low32(now) - then);
}
// Monotonic seconds in 32 bits (the client table's times): they wrap after
// 136 years of uptime.
inline uint32_t secondsOf(Millis ms) {
  return ms <= 0 ? 0 : static_cast<uint32_t>(ms / 1000);
}
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  sched_yield();
#endif
}

}  // namespace concert::shm
