// The revocation table's implementation; its states, who writes which word
// and what a SIGKILL leaves behind are in revocations.h.
#include "shm/revocations.h"

#include <sched.h>

#include <cstring>
#include <limits>

#include "shm/layout.h"

namespace concert::shm {

namespace {

constexpr uint32_t kMaxProbe = 64;
constexpr uint32_t kNone = 0xffffffffu;
// A writer's whole claim lasts a few stores; a revoke that keeps finding its
// way blocked for this many rounds is facing a preempted or dead writer.
constexpr int kMaxRounds = 1 << 12;

uint32_t probeLength(const Layout& layout) {
  const uint32_t size = layout.geometry.revocation_table_size;
  return size < kMaxProbe ? size : kMaxProbe;
}

void backOff(int round) {
  if (round < 64) {
    cpuRelax();
  } else {
    sched_yield();
  }
}

// One entry as it was at one moment: its word, and for a Live or Raising
// entry whether it names the id and its until, read under that same word.
struct Seen {
  uint64_t word = 0;
  RevocationState state = RevocationState::Empty;
  bool ours = false;
  int64_t until = 0;
};

Seen readEntry(const RevocationEntry& entry, const IdKey& key) {
  for (;;) {
    Seen seen;
    seen.word = entry.state.load(std::memory_order_seq_cst);
    seen.state = revocationState(seen.word);
    if (seen.state == RevocationState::Empty || seen.state == RevocationState::Writing) return seen;
    seen.ours =
        entry.id[0].load(std::memory_order_seq_cst) == key.a && entry.id[1].load(std::memory_order_seq_cst) == key.b;
    seen.until = entry.until.load(std::memory_order_seq_cst);
    // A changed word means a writer moved on meanwhile: read it again.
    if (entry.state.load(std::memory_order_seq_cst) == seen.word) return seen;
  }
}

bool inForce(RevocationState state) {
  return state == RevocationState::Live || state == RevocationState::Raising;
}

}  // namespace

RevokeOutcome Revocations::revoke(const uint8_t id[16], int64_t until, int64_t now, WorkerSlot slot) {
  if (until <= now) return RevokeOutcome::Ignored;
  Layout& layout = *layout_;
  const IdKey key = makeIdKey(id, layout.revocation_mask);
  const uint32_t probes = probeLength(layout);
  for (int round = 0; round < kMaxRounds; ++round) {
    if (round > 0) backOff(round);
    // One pass over the window: the id's own entry if it has one, else the
    // first free entry, else the Live entry expiring soonest.
    uint32_t free_index = kNone, victim = kNone;
    uint64_t free_word = 0, victim_word = 0;
    int64_t victim_until = std::numeric_limits<int64_t>::max();
    bool again = false;
    for (uint32_t i = 0; i < probes && !again; ++i) {
      const uint32_t index = (key.home + i) & layout.revocation_mask;
      RevocationEntry& entry = layout.revocations[index];
      const Seen seen = readEntry(entry, key);
      if (seen.state == RevocationState::Empty) {
        if (free_index == kNone) free_index = index, free_word = seen.word;
        break;  // the id lies on an unbroken run from its home: not beyond
      }
      if (seen.state == RevocationState::Writing) continue;
      if (seen.ours && seen.until > now) {
        if (seen.until >= until) return RevokeOutcome::Extended;
        if (seen.state == RevocationState::Raising) {
          // Another writer is raising it: look again. One stuck for half
          // the rounds (preempted for long, or dead) is left alone, and the
          // id gets another entry.
          if (round < kMaxRounds / 2) again = true;
          continue;
        }
        uint64_t expected = seen.word;
        const uint32_t version = revocationVersion(seen.word);
        if (!entry.state.compare_exchange_strong(expected, packRevocation(version + 1, RevocationState::Raising, slot),
                                                 std::memory_order_seq_cst)) {
          again = true;
          continue;
        }
        entry.until.store(until, std::memory_order_seq_cst);
        entry.state.store(packRevocation(version + 2, RevocationState::Live, slot), std::memory_order_seq_cst);
        return RevokeOutcome::Extended;
      }
      if (seen.until <= now) {
        if (free_index == kNone) free_index = index, free_word = seen.word;
      } else if (seen.state == RevocationState::Live && seen.until < victim_until) {
        victim = index, victim_word = seen.word, victim_until = seen.until;
      }
    }
    if (again) continue;
    const bool reuse = free_index != kNone;
    const uint32_t target = reuse ? free_index : victim;
    if (target == kNone) continue;  // every entry in the window is being written
    RevocationEntry& entry = layout.revocations[target];
    uint64_t expected = reuse ? free_word : victim_word;
    const uint32_t version = revocationVersion(expected);
    if (!entry.state.compare_exchange_strong(expected, packRevocation(version + 1, RevocationState::Writing, slot),
                                             std::memory_order_seq_cst))
      continue;  // another writer took it first: look again
    entry.id[0].store(key.a, std::memory_order_seq_cst);
    entry.id[1].store(key.b, std::memory_order_seq_cst);
    entry.until.store(until, std::memory_order_seq_cst);
    entry.state.store(packRevocation(version + 2, RevocationState::Live, slot), std::memory_order_seq_cst);
    return reuse ? RevokeOutcome::Added : RevokeOutcome::Replaced;
  }
  return RevokeOutcome::Busy;
}

bool Revocations::revoked(const uint8_t id[16], int64_t now) const {
  const Layout& layout = *layout_;
  const IdKey key = makeIdKey(id, layout.revocation_mask);
  const uint32_t probes = probeLength(layout);
  for (uint32_t i = 0; i < probes; ++i) {
    const Seen seen = readEntry(layout.revocations[(key.home + i) & layout.revocation_mask], key);
    if (seen.state == RevocationState::Empty) return false;
    if (seen.ours && seen.until > now) return true;
  }
  return false;
}

int64_t Revocations::active(int64_t now) const {
  const Layout& layout = *layout_;
  int64_t n = 0;
  for (uint32_t i = 0; i < layout.geometry.revocation_table_size; ++i) {
    const RevocationEntry& entry = layout.revocations[i];
    if (inForce(revocationState(entry.state.load(std::memory_order_relaxed))) &&
        entry.until.load(std::memory_order_relaxed) > now)
      ++n;
  }
  return n;
}

int64_t Revocations::writing() const {
  const Layout& layout = *layout_;
  int64_t n = 0;
  for (uint32_t i = 0; i < layout.geometry.revocation_table_size; ++i) {
    const RevocationState state = revocationState(layout.revocations[i].state.load(std::memory_order_relaxed));
    if (state == RevocationState::Writing || state == RevocationState::Raising) ++n;
  }
  return n;
}

int64_t Revocations::reclaim(WorkerSlot slot) {
  Layout& layout = *layout_;
  int64_t entries = 0;
  for (uint32_t i = 0; i < layout.geometry.revocation_table_size; ++i) {
    RevocationEntry& entry = layout.revocations[i];
    uint64_t word = entry.state.load(std::memory_order_seq_cst);
    const RevocationState state = revocationState(word);
    if (revocationOwner(word) != slot || (state != RevocationState::Writing && state != RevocationState::Raising))
      continue;
    // A half-written id with an until that has passed: a free entry.
    if (state == RevocationState::Writing) entry.until.store(0, std::memory_order_seq_cst);
    if (entry.state.compare_exchange_strong(
            word, packRevocation(revocationVersion(word) + 1, RevocationState::Live, kOwnerMaster),
            std::memory_order_seq_cst))
      ++entries;
  }
  return entries;
}

}  // namespace concert::shm
