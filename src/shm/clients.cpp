// The client table's implementation; its states, who writes which word, the
// full-table rule, the janitor's repair and what a SIGKILL leaves behind are
// in clients.h.
#include "shm/clients.h"

#include <sched.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "shm/layout.h"

namespace concert::shm {

namespace {

constexpr uint32_t kWindow = 32;
// A reader gives up on an entry whose word changed under it this many times
// (writers hold an entry for a few stores): it answers as if not banned.
constexpr int kReadTries = 64;
// Rounds a writer retries when it keeps losing races or finds its entry
// locked; far more than a live writer's hold, far less than a stall.
constexpr int kMaxRounds = 1 << 10;
// Spins for a home bucket's creation lock; then the request is not tracked.
constexpr int kLockSpins = 1 << 12;
// Scans of the window by a creator holding the lock before it gives up.
constexpr int kCreateTries = 16;
// Looks a creator gives an entry another writer is claiming before it
// passes it by (a claim lasts a few stores; a stuck claimer is passed by).
constexpr int kClaimWaits = 256;
constexpr uint32_t kStrikeWindow = 600;  // seconds
constexpr uint32_t kMaxBan = 24 * 3600;  // seconds
constexpr uint32_t kRepairAfter = 60;    // seconds without a count change

void backOff(int round) {
  if (round < 64) {
    cpuRelax();
  } else {
    sched_yield();
  }
}

uint32_t windowOf(const Layout& layout) {
  const uint32_t size = layout.geometry.client_table_size;
  return size < kWindow ? size : kWindow;
}

bool keyed(ClientState state) {
  return state == ClientState::Live || state == ClientState::Updating;
}

// One entry as it was at one moment: its word, its count and, for a Live or
// Updating entry, whether it holds the key, its ban and last seen, read
// under that same word (the count is changed outside the lock: it is only
// a recent value).
struct Seen {
  uint64_t word = 0;
  ClientState state = ClientState::Empty;
  bool ours = false;
  uint64_t ban = 0;
  uint64_t live = 0;
  uint32_t last_seen = 0;
};

// False when the word kept changing for `tries` reads.
bool readEntry(const ClientEntry& entry, const IdKey& key, Seen& seen, int tries) {
  for (int i = 0; i < tries; ++i) {
    if (i > 0) cpuRelax();
    seen.word = entry.state.load(std::memory_order_seq_cst);
    seen.state = clientState(seen.word);
    seen.ours = false;
    seen.live = entry.live.load(std::memory_order_seq_cst);
    if (!keyed(seen.state)) return true;
    seen.ours =
        entry.key[0].load(std::memory_order_seq_cst) == key.a && entry.key[1].load(std::memory_order_seq_cst) == key.b;
    seen.ban = entry.ban.load(std::memory_order_seq_cst);
    seen.last_seen = entry.last_seen.load(std::memory_order_relaxed);
    if (entry.state.load(std::memory_order_seq_cst) == seen.word) return true;
  }
  return false;
}

// Every keyed entry's key and one of its words (`field`), each read under
// its state word; an entry that keeps changing for kReadTries reads is
// passed by: fn(key, value). Reads only.
template <typename Fn>
void scanKeyed(const Layout& layout, const std::atomic<uint64_t> ClientEntry::*field, Fn&& fn) {
  for (uint32_t i = 0; i < layout.geometry.client_table_size; ++i) {
    const ClientEntry& entry = layout.clients[i];
    for (int tries = 0; tries < kReadTries; ++tries) {
      const uint64_t word = entry.state.load(std::memory_order_seq_cst);
      if (!keyed(clientState(word))) break;
      const uint64_t a = entry.key[0].load(std::memory_order_seq_cst);
      const uint64_t b = entry.key[1].load(std::memory_order_seq_cst);
      const uint64_t value = (entry.*field).load(std::memory_order_seq_cst);
      if (entry.state.load(std::memory_order_seq_cst) != word) continue;
      std::array<uint8_t, 16> key{};
      std::memcpy(key.data(), &a, 8);
      std::memcpy(key.data() + 8, &b, 8);
      fn(key, value);
      break;
    }
  }
}

bool bannedAt(uint64_t ban, uint32_t now_s) {
  return now_s < highHalf(ban);
}

// Ban k (k >= 1) lasts ban << (k - 1), at most 24 h; in whole seconds.
uint32_t banSeconds(Millis ban, uint32_t bans) {
  uint64_t seconds = ban <= 0 ? 1 : static_cast<uint64_t>((ban + 999) / 1000);
  for (uint32_t k = 1; k < bans && seconds < kMaxBan; ++k) seconds *= 2;
  return static_cast<uint32_t>(seconds < kMaxBan ? seconds : kMaxBan);
}

void subtractOne(ClientEntry& entry) {
  uint64_t word = entry.live.load(std::memory_order_seq_cst);
  // A count already 0 is one a SIGKILL left low: the janitor mends it.
  while (lowHalf(word) > 0 && !entry.live.compare_exchange_weak(word, packHalves(highHalf(word) + 1, lowHalf(word) - 1),
                                                                std::memory_order_seq_cst)) {
  }
}

void raiseHorizon(Header& header, uint32_t until) {
  uint32_t seen = header.ban_horizon.load(std::memory_order_seq_cst);
  while (seen < until && !header.ban_horizon.compare_exchange_weak(seen, until, std::memory_order_seq_cst)) {
  }
}

// The entry holding `key`, read-only; kNone if it has none, or if an entry
// of its window kept changing under every look.
constexpr uint32_t kNone = 0xffffffffu;

uint32_t findEntry(const Layout& layout, const IdKey& key) {
  const uint32_t probes = windowOf(layout);
  for (int round = 0; round < kMaxRounds; ++round) {
    if (round > 0) backOff(round);
    bool unsure = false;
    for (uint32_t i = 0; i < probes; ++i) {
      const uint32_t index = (key.home + i) & layout.client_mask;
      Seen seen;
      if (!readEntry(layout.clients[index], key, seen, kReadTries)) {
        unsure = true;  // it may be ours: look again
        continue;
      }
      if (seen.state == ClientState::Empty) break;  // the key lies on an unbroken run from its home
      if (seen.ours) return index;
    }
    if (!unsure) return kNone;
  }
  return kNone;
}

}  // namespace

// ---------------------------------------------------------------- readers
bool Clients::banned(const uint8_t key[16], Millis now) const {
  const Layout& layout = *layout_;
  const uint32_t now_s = secondsOf(now);
  if (now_s >= layout.header->ban_horizon.load(std::memory_order_seq_cst)) return false;
  const IdKey k = makeIdKey(key, layout.client_mask);
  const uint32_t probes = windowOf(layout);
  for (uint32_t i = 0; i < probes; ++i) {
    Seen seen;
    if (!readEntry(layout.clients[(k.home + i) & layout.client_mask], k, seen, kReadTries)) return false;  // fail open
    if (seen.state == ClientState::Empty) return false;
    if (seen.ours) return bannedAt(seen.ban, now_s);
  }
  return false;
}

int64_t Clients::liveTickets(const uint8_t key[16]) const {
  const Layout& layout = *layout_;
  const uint32_t index = findEntry(layout, makeIdKey(key, layout.client_mask));
  if (index == kNone) return 0;
  return lowHalf(layout.clients[index].live.load(std::memory_order_seq_cst));
}

int64_t Clients::bannedCount(Millis now) const {
  const Layout& layout = *layout_;
  const uint32_t now_s = secondsOf(now);
  if (now_s >= layout.header->ban_horizon.load(std::memory_order_seq_cst)) return 0;
  int64_t n = 0;
  for (uint32_t i = 0; i < layout.geometry.client_table_size; ++i) {
    const ClientEntry& entry = layout.clients[i];
    if (keyed(clientState(entry.state.load(std::memory_order_relaxed))) &&
        bannedAt(entry.ban.load(std::memory_order_relaxed), now_s))
      ++n;
  }
  return n;
}

std::vector<ClientBan> Clients::bans(Millis now) const {
  std::vector<ClientBan> found;
  const uint32_t now_s = secondsOf(now);
  if (now_s >= layout_->header->ban_horizon.load(std::memory_order_seq_cst)) return found;
  scanKeyed(*layout_, &ClientEntry::ban, [&](const std::array<uint8_t, 16>& key, uint64_t ban) {
    if (bannedAt(ban, now_s)) found.push_back(ClientBan{key, static_cast<int64_t>(highHalf(ban)) - now_s});
  });
  return found;
}

int64_t Clients::tracked() const {
  const Layout& layout = *layout_;
  int64_t n = 0;
  for (uint32_t i = 0; i < layout.geometry.client_table_size; ++i)
    if (keyed(clientState(layout.clients[i].state.load(std::memory_order_relaxed)))) ++n;
  return n;
}

std::vector<ClientTickets> Clients::topByTickets(size_t limit) const {
  std::vector<ClientTickets> found;
  scanKeyed(*layout_, &ClientEntry::live, [&](const std::array<uint8_t, 16>& key, uint64_t live) {
    if (const int64_t tickets = lowHalf(live); tickets > 0) found.push_back(ClientTickets{key, tickets});
  });
  auto more = [](const ClientTickets& x, const ClientTickets& y) {
    return x.tickets != y.tickets ? x.tickets > y.tickets : x.key < y.key;
  };
  if (found.size() > limit) {
    std::partial_sort(found.begin(), found.begin() + static_cast<std::ptrdiff_t>(limit), found.end(), more);
    found.resize(limit);
  } else {
    std::sort(found.begin(), found.end(), more);
  }
  return found;
}

int64_t Clients::writing() const {
  const Layout& layout = *layout_;
  int64_t n = 0;
  for (uint32_t i = 0; i < layout.geometry.client_table_size; ++i) {
    const ClientEntry& entry = layout.clients[i];
    const ClientState state = clientState(entry.state.load(std::memory_order_relaxed));
    if (state == ClientState::Claiming || state == ClientState::Updating) ++n;
    if (entry.create_lock.load(std::memory_order_relaxed) != 0) ++n;
  }
  return n;
}

// ---------------------------------------------------------------- writers
bool Clients::holds(uint32_t index, const uint8_t key[16]) const {
  const Layout& layout = *layout_;
  Seen seen;
  return readEntry(layout.clients[index], makeIdKey(key, layout.client_mask), seen, kReadTries) && seen.ours;
}

uint32_t Clients::locate(const uint8_t key[16], Millis now, WorkerSlot slot, bool make) {
  const uint32_t index = findEntry(*layout_, makeIdKey(key, layout_->client_mask));
  if (index != kNone || !make) return index;
  return create(key, now, slot);
}

uint32_t Clients::create(const uint8_t key[16], Millis now, WorkerSlot slot) {
  Layout& layout = *layout_;
  const IdKey k = makeIdKey(key, layout.client_mask);
  const uint32_t now_s = secondsOf(now);
  const uint32_t probes = windowOf(layout);
  // Creators of one key share its home bucket, hence its lock: the one
  // that gets it second finds the entry the first made.
  std::atomic<uint32_t>& lock = layout.clients[k.home].create_lock;
  bool locked = false;
  for (int spin = 0; spin < kLockSpins && !locked; ++spin) {
    if (spin > 0) backOff(spin);
    uint32_t expected = 0;
    locked = lock.compare_exchange_strong(expected, slot + 1, std::memory_order_seq_cst);
  }
  if (!locked) return kNone;

  uint32_t result = kNone;
  for (int attempt = 0; attempt < kCreateTries; ++attempt) {
    // One pass: the key's own entry if it has one, else the first Vacant
    // entry or the Empty one ending the chain, else the oldest idle one.
    uint32_t found = kNone, free_index = kNone, victim = kNone;
    uint64_t free_word = 0, victim_word = 0;
    uint32_t victim_seen = 0;
    for (uint32_t i = 0; i < probes; ++i) {
      const uint32_t index = (k.home + i) & layout.client_mask;
      Seen seen;
      bool read = readEntry(layout.clients[index], k, seen, kReadTries);
      // An eviction that finds its victim busy after all gives the entry
      // back to its client, who may be ours: see how the claim ends.
      for (int wait = 0; read && seen.state == ClientState::Claiming && wait < kClaimWaits; ++wait) {
        backOff(wait);
        read = readEntry(layout.clients[index], k, seen, kReadTries);
      }
      if (!read) continue;  // busy: not a candidate
      if (seen.state == ClientState::Empty) {
        if (free_index == kNone) free_index = index, free_word = seen.word;
        break;
      }
      if (seen.state == ClientState::Vacant) {
        // A count left on it belongs to tickets of a client whose claim a
        // dead writer cut short: free once they have left.
        if (free_index == kNone && lowHalf(seen.live) == 0) free_index = index, free_word = seen.word;
        continue;
      }
      if (!keyed(seen.state)) continue;  // still being claimed: a stuck writer
      if (seen.ours) {
        found = index;
        break;
      }
      if (seen.state == ClientState::Live && lowHalf(seen.live) == 0 && !bannedAt(seen.ban, now_s) &&
          (victim == kNone || static_cast<int32_t>(seen.last_seen - victim_seen) < 0))
        victim = index, victim_word = seen.word, victim_seen = seen.last_seen;
    }
    if (found != kNone) {
      result = found;
      break;
    }
    const bool reuse = free_index != kNone;
    const uint32_t target = reuse ? free_index : victim;
    if (target == kNone) break;  // every entry of the window is busy, banned or being written: full
    ClientEntry& entry = layout.clients[target];
    uint64_t expected = reuse ? free_word : victim_word;
    const uint32_t version = clientVersion(expected);
    if (!entry.state.compare_exchange_strong(expected, packClient(version + 1, ClientState::Claiming, slot),
                                             std::memory_order_seq_cst))
      continue;  // another writer took it first: look again
    // Claimed. An issuer may have counted a ticket on it since the scan: it
    // adds before it checks the word, we claimed before we check the count.
    if (clientState(expected) != ClientState::Empty && lowHalf(entry.live.load(std::memory_order_seq_cst)) != 0) {
      entry.state.store(packClient(version + 2, clientState(expected), clientOwner(expected)),
                        std::memory_order_seq_cst);
      continue;
    }
    entry.key[0].store(k.a, std::memory_order_seq_cst);
    entry.key[1].store(k.b, std::memory_order_seq_cst);
    entry.strikes.store(0, std::memory_order_seq_cst);
    entry.ban.store(0, std::memory_order_seq_cst);
    entry.last_seen.store(now_s, std::memory_order_relaxed);
    entry.state.store(packClient(version + 2, ClientState::Live, slot), std::memory_order_seq_cst);
    result = target;
    break;
  }
  lock.store(0, std::memory_order_seq_cst);
  return result;
}

Clients::Enter Clients::enter(const ClientTicketing& client, Millis now, WorkerSlot slot, uint32_t* index) {
  Layout& layout = *layout_;
  for (int round = 0; round < kMaxRounds; ++round) {
    if (round > 0) backOff(round);
    const uint32_t at = locate(client.key, now, slot, true);
    if (at == kNone) break;
    ClientEntry& entry = layout.clients[at];
    uint64_t word = entry.live.load(std::memory_order_seq_cst);
    bool limited = false;
    for (;;) {
      const uint32_t count = lowHalf(word);
      if (client.max_per_client > 0 && count >= static_cast<uint32_t>(client.max_per_client)) {
        limited = true;
        break;
      }
      if (entry.live.compare_exchange_weak(word, packHalves(highHalf(word) + 1, count + 1), std::memory_order_seq_cst))
        break;
    }
    // Still the client's entry? (An evictor claims before it checks the
    // count; we added before we check the word.)
    const bool ours = holds(at, client.key);
    if (limited) {
      if (ours) return Enter::Limit;
      continue;
    }
    if (ours) {
      entry.last_seen.store(secondsOf(now), std::memory_order_relaxed);
      *index = at;
      return Enter::Tracked;
    }
    subtractOne(entry);
  }
  layout.counter(Counter::ClientTableFullTotal).fetch_add(1, std::memory_order_relaxed);
  return Enter::Untracked;
}

void Clients::giveBack(uint32_t index) {
  if (index < layout_->geometry.client_table_size) subtractOne(layout_->clients[index]);
}

void Clients::leave(uint32_t ring_index, uint64_t ticket) {
  Layout& layout = *layout_;
  std::atomic<uint32_t>& tag = layout.client_tags[ring_index];
  uint32_t seen = tag.load(std::memory_order_seq_cst);
  if (!tagNames(seen, ticket, layout.ring_bits)) return;
  if (!tag.compare_exchange_strong(seen, 0, std::memory_order_seq_cst)) return;  // another path left it
  const uint32_t client = tagClient(seen);
  if (client < layout.geometry.client_table_size) subtractOne(layout.clients[client]);
}

StrikeOutcome Clients::strike(const uint8_t key[16], int weight, const AbusePolicy& policy, Millis now, WorkerSlot slot,
                              uint32_t* index) {
  Layout& layout = *layout_;
  StrikeOutcome out;
  if (weight < 1) return out;
  layout.counter(Counter::AbuseStrikesTotal).fetch_add(static_cast<uint64_t>(weight), std::memory_order_relaxed);
  const uint32_t now_s = secondsOf(now);
  const IdKey k = makeIdKey(key, layout.client_mask);
  for (int round = 0; round < kMaxRounds; ++round) {
    if (round > 0) backOff(round);
    const uint32_t at = locate(key, now, slot, true);
    if (at == kNone) break;
    ClientEntry& entry = layout.clients[at];
    uint64_t word = entry.state.load(std::memory_order_seq_cst);
    if (clientState(word) != ClientState::Live) continue;  // another writer holds it, or it changed hands
    if (entry.key[0].load(std::memory_order_seq_cst) != k.a || entry.key[1].load(std::memory_order_seq_cst) != k.b)
      continue;
    const uint32_t version = clientVersion(word);
    // The CAS succeeds only on the word the key was read under.
    if (!entry.state.compare_exchange_strong(word, packClient(version + 1, ClientState::Updating, slot),
                                             std::memory_order_seq_cst))
      continue;
    const uint64_t ban = entry.ban.load(std::memory_order_seq_cst);
    const uint64_t strikes = entry.strikes.load(std::memory_order_seq_cst);
    out.recorded = true;
    if (bannedAt(ban, now_s)) {
      out.strikes = static_cast<int32_t>(lowHalf(strikes));  // counted above; the ban stays as it is
    } else {
      uint32_t count = lowHalf(strikes);
      uint32_t start = highHalf(strikes);
      if (count == 0 || static_cast<int32_t>(now_s - start) >= static_cast<int32_t>(kStrikeWindow)) {
        count = static_cast<uint32_t>(weight);
        start = now_s;
      } else {
        count = count + static_cast<uint32_t>(weight) < count ? 0xffffffffu : count + static_cast<uint32_t>(weight);
      }
      if (policy.threshold > 0 && count >= static_cast<uint32_t>(policy.threshold)) {
        const uint32_t bans = lowHalf(ban) + 1;
        const uint32_t seconds = banSeconds(policy.ban, bans);
        const uint32_t until = now_s + seconds;
        raiseHorizon(*layout.header, until);  // before the ban: a reader past the horizon skips the table
        entry.ban.store(packHalves(until, bans), std::memory_order_seq_cst);
        entry.strikes.store(0, std::memory_order_seq_cst);
        layout.counter(Counter::AbuseBansTotal).fetch_add(1, std::memory_order_relaxed);
        out.banned_now = true;
        out.ban_for = static_cast<Millis>(seconds) * 1000;
        out.strikes = 0;
      } else {
        entry.strikes.store(packHalves(start, count), std::memory_order_seq_cst);
        out.strikes = static_cast<int32_t>(count > 0x7fffffffu ? 0x7fffffffu : count);
      }
    }
    entry.last_seen.store(now_s, std::memory_order_relaxed);
    entry.state.store(packClient(version + 2, ClientState::Live, slot), std::memory_order_seq_cst);
    *index = at;
    return out;
  }
  layout.counter(Counter::ClientTableFullTotal).fetch_add(1, std::memory_order_relaxed);
  return out;
}

// ---------------------------------------------------------------- janitor
void Clients::auditBegin() {
  recount_.assign(layout_->geometry.client_table_size, 0);
}

void Clients::auditLive(uint32_t tag) {
  const uint32_t client = tagClient(tag);
  if (tag != 0 && client < recount_.size()) ++recount_[client];
}

int64_t Clients::auditEnd(Millis now) {
  Layout& layout = *layout_;
  const uint32_t now_s = secondsOf(now);
  int64_t repaired = 0;
  if (recount_.size() != layout.geometry.client_table_size) return 0;
  for (uint32_t i = 0; i < layout.geometry.client_table_size; ++i) {
    ClientEntry& entry = layout.clients[i];
    if (clientState(entry.state.load(std::memory_order_relaxed)) == ClientState::Empty) continue;
    uint64_t live = entry.live.load(std::memory_order_seq_cst);
    const uint32_t count = lowHalf(live);
    const uint32_t changes = highHalf(live);
    const uint64_t audit = entry.audit.load(std::memory_order_relaxed);
    if (count == recount_[i]) {
      if (audit != 0) entry.audit.store(0, std::memory_order_relaxed);
      continue;
    }
    if (audit == 0 || highHalf(audit) != changes) {  // first seen off, or off by another change
      entry.audit.store(packHalves(changes, now_s + 1), std::memory_order_relaxed);
      continue;
    }
    const uint32_t since = lowHalf(audit) - 1;
    if (static_cast<int32_t>(now_s - since) < static_cast<int32_t>(kRepairAfter)) continue;
    if (entry.live.compare_exchange_strong(live, packHalves(changes + 1, recount_[i]), std::memory_order_seq_cst))
      ++repaired;
    entry.audit.store(0, std::memory_order_relaxed);
  }
  return repaired;
}

int64_t Clients::reclaim(WorkerSlot slot) {
  Layout& layout = *layout_;
  int64_t n = 0;
  for (uint32_t i = 0; i < layout.geometry.client_table_size; ++i) {
    ClientEntry& entry = layout.clients[i];
    uint32_t lock = slot + 1;
    if (entry.create_lock.compare_exchange_strong(lock, 0, std::memory_order_seq_cst)) ++n;
    uint64_t word = entry.state.load(std::memory_order_seq_cst);
    if (clientOwner(word) != slot) continue;
    const ClientState state = clientState(word);
    ClientState next;
    if (state == ClientState::Claiming) {
      next = ClientState::Vacant;  // its key may be half written: no client's
    } else if (state == ClientState::Updating) {
      next = ClientState::Live;  // key whole; strikes and ban each one whole word
    } else {
      continue;
    }
    if (entry.state.compare_exchange_strong(word, packClient(clientVersion(word) + 1, next, kOwnerMaster),
                                            std::memory_order_seq_cst))
      ++n;
  }
  return n;
}

}  // namespace concert::shm
