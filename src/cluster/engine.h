// The engine's part of one line shared by several hosts (-cluster): what
// lives in Redis, under which keys, and the scripts that change it.
// Every step that must be atomic is one script, so no host ever sees
// half a change; the cluster agent (agent.h) is the only code that talks to
// the engine, and workers never wait for it (shm/cluster.h).
//
// Keys, for the room prefix P (-cluster-room, default "concert"):
//   P:epoch  string   the room's identity, a random word set by the first host
//                     to find none. A host that knew another one learns that
//                     the engine lost the room (restart without persistence,
//                     FLUSHALL): it re-enrolls the line it cached, and for one
//                     lease TTL no host takes new slots (P:grace), since the
//                     engine no longer knows what every host has in flight.
//   P:grace  string   Unix ms until which no slot is granted beyond what a
//                     host has in flight (set on a lost epoch, expires).
//   P:seq    integer  the last ticket number handed out; hosts take blocks
//                     (INCRBY). Only grows; raised to the highest number
//                     re-enrolled after a loss, so no number in a visitor's
//                     cookie is handed out twice.
//   P:order  integer  the last place in line given (INCR per enrolment)
//   P:line   zset     the waiting line: member = ticket id (decimal), score =
//                     its place: the order in which the engine enrolled it.
//                     Nobody is ever placed ahead of a ticket in line, so a
//                     position never grows; a re-enrolment after a loss goes
//                     in the order of the line the host cached.
//   P:tix    hash     id -> "nonce:issued" or "nonce:issued:client" (nonce 16
//                     hex digits, issued Unix ms, the holder's client key 32
//                     hex digits)
//   P:clients hash    client key -> its tickets in P:tix (those enrolled with one)
//   P:full   zset     client key -> Unix s: clients that hold
//                     -max-tickets-per-client tickets in line (any host's):
//                     no host issues them another, and the engine enrolls
//                     none, until one of theirs leaves (or the mark's end)
//   P:back   zset     tickets that missed their turn and whose holder came
//                     back: id -> order of return. They go first when a slot
//                     frees, ahead of the line (as Returned tickets on one host)
//   P:missed zset     tickets whose turn came and was not taken within
//                     -claim-window: they stop holding the line; a touch on
//                     any host moves one to P:back
//   P:ready  zset     id -> engine ms since which its turn has come (the
//                     first `horizon` of P:back then P:line); dropped when
//                     the turn is taken or passes to someone else, and all
//                     of it while the line stands still (no turn comes then,
//                     so none is missed); restarted by a W note (a host's
//                     admission rate had no token for the ticket's holder)
//                     Invariant: every id of P:tix and P:seen is in exactly
//                     one of P:line, P:back, P:missed.
//   P:seen   zset     id -> the engine time (ms) after which the ticket is
//                     abandoned: issue + -first-poll-grace, then each touch +
//                     -token-ttl. Reaped by SYNC.
//   P:ver    integer  raised on every change of P:line: hosts re-read the line
//                     only when it moved
//   P:hosts  zset     host -> lease expiry (engine ms); a host that stops
//                     renewing is dropped with its reservation by the next SYNC
//   P:resv   hash     host -> slots reserved from the cap
//   P:busy   hash     host -> slots in use there (its page occupancy)
//   P:want   hash     host -> engine ms when a request there last found no
//                     slot: such hosts share the free slots, and the others
//                     give their headroom back
//                     Invariant: the sum over hosts of max(resv, busy) stays
//                     within P:cap, except when P:cap was lowered or a host
//                     reported more in flight than it held (both settle as
//                     requests finish: nobody gets a new slot until then).
//   P:cap    integer  the global cap (-cap; POST /_room/cap on any host)
//   P:mode   string   the room's mode (POST /_room/mode on any host). The
//                     line moves as on one host: not at all in pause and
//                     reject, nor in an open room while P:held has a member;
//                     every ticket's turn has come in passthrough; otherwise
//                     turns come as slots free across the room (the horizon)
//   P:held   hash     host -> 1 while a scheduled sale's pre-queue holds that
//                     host's line; dropped with the host's lease
//   P:pre    set      tickets enrolled while P:held had a member: when the
//                     line moves again they are placed anew, in a random
//                     order with -shuffle-prequeue (SYNC)
//   P:bans   zset     client key (32 hex digits) -> ban end (Unix s); expired
//                     members are dropped by SYNC
//   P:promoted zset   "id:nonce" (nonce 16 hex digits) -> the promotion's end
//                     (Unix s): POST /_room/promote on any host; the ticket's
//                     holder collects its room pass on whichever host it
//                     reaches. Expired members are dropped by SYNC.
//   P:revoked zset    "a:b" (a pass id's two words, 16 hex digits each) -> the
//                     end (Unix s) of a session the origin ended on any host
//   P:marks  integer  raised whenever P:bans, P:promoted, P:revoked or P:full
//                     changes: SYNC sends marks only to a host whose copy is
//                     older, and then only the changes since (P:marklog) when
//                     the log still holds them all, else the four lists
//   P:gone   list     "version id" per departure from the line (admitted,
//                     left, reaped, banned, a returned ticket's second miss),
//                     under the line's version it made, the last 16,384:
//                     FETCH tells a host who left since its copy
//   P:gonefloor string the version of the last entry P:gone dropped: a copy
//                     older than it is read anew
//   P:marklog list    "version list member score" per change of a list of
//                     marks (list: b, p, r, f; score "-": taken off), the
//                     last 4,096
// A ban that reaches the engine takes the client's tickets out of the line
// (SYNC), whichever host issued them.
//
// Times are the engine's clock (TIME), so hosts' clocks never meet, except
// the issue time of a ticket and a ban's end, which are only shown or
// compared on a host with its own clock.
//
// Scripts (src/cluster/*.lua, compiled in by embed_scripts.py; each names its
// KEYS and ARGV at its top). The agent loads them once per connection
// (SCRIPT LOAD) and runs them by their SHA1 (EVALSHA), and by their text
// (EVAL) when the engine answers NOSCRIPT (it restarted empty, SCRIPT FLUSH):
//   NOTES    what workers noted since the last round (shm/cluster.h): Enroll,
//            Re-enroll, Touch, Keep, Wait, Leave, Promote, Revoke
//   SYNC     once a round: renew this host's lease and take its share of the
//            cap; reap abandoned tickets; mark turns and missed turns; the
//            line's figures, cap and mode, bans, a block of numbers
//   FETCH    P:back, P:line's head and P:missed, with nonces and issue times
//            (when P:ver moved)
//   RELEASE  a host that stops gives its reservation back
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shm/cluster.h"

struct redisReply;  // hiredis

namespace concert::cluster {

// KEYS of each script, in order, for room prefix `room`.
std::vector<std::string> notesKeys(std::string_view room);
std::vector<std::string> syncKeys(std::string_view room);
std::vector<std::string> fetchKeys(std::string_view room);
std::vector<std::string> releaseKeys(std::string_view room);

extern const char* const kNotesScript;
extern const char* const kSyncScript;
extern const char* const kFetchScript;
extern const char* const kReleaseScript;

// The name Redis gives a script (EVALSHA, SCRIPT LOAD): its SHA1, in hex.
std::string scriptSha(std::string_view script);

// NOTES' ARGV after the two times and the epoch: one string per note.
//   "E id nonce issued"   enroll (not if already in line)
//   "R id nonce issued"   re-enroll after a loss (deadline from the TTL)
//   "T id"                touch
//   "W id"                its turn came, its holder is here, and this host's
//                         admission rate had no token: the turn's clock restarts
//   "L id"                leave
//   "P id nonce until"    promoted (until: Unix s)
//   "V a b until"         a session ended (the pass id's words, hex)
std::string noteArg(const shm::ClusterNoteValue& note, bool reenroll = false);

// What this host tells SYNC.
struct SyncRequest {
  std::string host;          // this host's name in P:hosts
  int64_t lease_ttl_ms = 0;  // -cluster-lease-ttl
  int64_t lease = 0;         // -cluster-lease
  int64_t busy = 0;          // page slots in use here
  int64_t wanted = 0;        // requests that found no slot here since the last round
  int64_t cap = 0;           // the global cap as this host has it
  bool push_cap = false;     // ... changed here (POST /_room/cap, reload)
  std::string mode;          // the room's mode as this host has it
  bool push_mode = false;    // ... changed here
  std::string epoch;         // the room's epoch this host knew ("" = none yet)
  std::string new_epoch;     // a fresh one, used if the engine has none
  int64_t block = 0;         // ticket numbers wanted (0 = none)
  int64_t reap_limit = 1000;
  int64_t claim_window_ms = 10'000;  // -claim-window
  int64_t marks_version = -1;        // P:marks as this host last read it (-1: never)
  bool held = false;                 // a scheduled sale's pre-queue holds this host's line
  bool shuffle = false;              // -shuffle-prequeue: its tickets go in in a random order
  std::vector<std::string> bans;  // bans that began here: "key:until" (32 hex digits, Unix s)
};
std::vector<std::string> syncArgs(const SyncRequest& request);

// The engine's lists of marks (P:bans, P:promoted, P:revoked, P:full).
enum class MarkList { Bans, Promoted, Revoked, Full };

// What SYNC answers.
struct SyncReply {
  shm::ClusterRound round;  // hosts, this host's reservation, horizon, depth, cap
  int64_t version = 0;
  std::string mode;
  std::string epoch;
  bool lost = false;         // the engine had another epoch (or none) than this host knew
  uint64_t block_first = 0;  // first of the block asked for (0: none)
  int64_t reaped = 0;        // tickets abandoned this round
  int64_t missed = 0;        // turns missed this round
  int64_t marks_version = 0;  // P:marks; the three lists below are empty when the host's copy was current
  std::vector<shm::ClusterMarkValue> bans;      // every ban in force: the client key's words, end (Unix s)
  std::vector<shm::ClusterMarkValue> promoted;  // promotions: ticket, nonce, end (Unix s)
  std::vector<shm::ClusterMarkValue> revoked;   // ended sessions: the pass id's words, end (Unix s)
  std::vector<shm::ClusterMarkValue> full;      // clients at -max-tickets-per-client: the key's words, end
  int64_t removed = 0;                          // tickets of newly banned clients taken out this round
  int64_t shuffled = 0;                         // a pre-queue closed: its tickets placed in a random order
  // How the marks came: not at all (the host's copy is current), as the four
  // lists above (every mark in force), or as the changes since the host's copy.
  enum class Marks { None, Lists, Changes } marks = Marks::None;
  struct MarkChange {
    MarkList list;
    shm::ClusterMarkValue mark;  // until 0: the mark was taken off
  };
  std::vector<MarkChange> changes;  // in the order they were made
};

// A reply as a tree of strings and integers, as hiredis delivers it (the
// agent converts; tests build them by hand).
struct Reply {
  enum class Type { Nil, Integer, String, Array, Error } type = Type::Nil;
  int64_t integer = 0;
  std::string str;
  std::vector<Reply> elements;
};

// hiredis's reply as a Reply (the agent's, and the tests' against a real redis-server).
Reply convertReply(const redisReply* r);

std::optional<SyncReply> parseSync(const Reply& reply);

// FETCH: what changed in the line since the host's copy: who left, and the
// tickets placed after the last place number the host has (fetch.lua).
struct FetchReply {
  int64_t version = 0;  // P:ver: the line's version the copy reflects once this is applied
  int64_t depth = 0;    // P:line's length
  bool reset = false;   // the host's copy was too old: start from an empty one
  bool more = false;    // tickets placed after the last listed remain
  std::vector<uint64_t> gone;
  struct Placed {
    shm::ClusterLineEntry entry;  // id, nonce, issued, section
    int64_t order = 0;            // its place number (P:order)
  };
  std::vector<Placed> placed;  // in place order
};
std::optional<FetchReply> parseFetch(const Reply& reply);

}  // namespace concert::cluster
