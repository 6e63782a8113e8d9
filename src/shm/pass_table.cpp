// The pass table's implementation; its states, who writes which word and
// what a SIGKILL leaves behind are in pass_table.h.
#include "shm/pass_table.h"

#include <sched.h>

#include <cstring>

#include "shm/layout.h"
#include "shm/worker_slots.h"

namespace concert::shm {

namespace {

constexpr uint32_t kMaxProbe = 128;
constexpr uint32_t kNotFound = 0xffffffffu;
constexpr uint32_t kBusy = 0xfffffffeu;   // findPass: gave up waiting on a Removing entry of the id
constexpr uint32_t kRetry = 0xfffffffdu;  // evictIdle: lost a race for the victim, scan again
constexpr int kLockSpins = 1 << 14;       // a few ms of yields: a preempted holder, not a dead one
constexpr int kAcquireTries = 8;
constexpr int kEvictTries = 16;  // scans of the window before a creator that keeps losing races gives up

uint32_t probeLength(const Layout& layout) {
  return layout.geometry.pass_table_size < kMaxProbe ? layout.geometry.pass_table_size : kMaxProbe;
}

bool idMatches(const Layout& layout, uint32_t index, const IdKey& key) {
  return layout.pass_id[2 * size_t{index}].load(std::memory_order_acquire) == key.a &&
         layout.pass_id[2 * size_t{index} + 1].load(std::memory_order_acquire) == key.b;
}

void backOff(int spin) {
  if (spin < 64) {
    cpuRelax();
  } else {
    sched_yield();
  }
}

// A Live entry for the id (its state word in *word), kNotFound, or kBusy
// when an entry of the id stayed Removing for kLockSpins (a sweeper or an
// evictor takes a few hundred nanoseconds; one that died there waits for
// reclaim, and the worker's event loop must not).
uint32_t findPass(const Layout& layout, const IdKey& key, uint64_t* word) {
  const uint32_t probes = probeLength(layout);
  for (uint32_t i = 0; i < probes; ++i) {
    const uint32_t index = (key.home + i) & layout.pass_mask;
    for (int spin = 0;; ++spin) {
      const uint64_t w = layout.pass_state[index].load(std::memory_order_seq_cst);
      const PassState state = passState(w);
      if (state == PassState::Empty) return kNotFound;
      if (state != PassState::Live && state != PassState::Removing) break;
      if (!idMatches(layout, index, key)) break;
      // The id must be read under an unchanged word to be this entry's id.
      if (layout.pass_state[index].load(std::memory_order_seq_cst) != w) continue;
      if (state == PassState::Live) {
        *word = w;
        return index;
      }
      if (spin >= kLockSpins) return kBusy;
      backOff(spin);  // a sweeper or an evictor is deciding whether to remove it
    }
  }
  return kNotFound;
}

bool lockHome(const Layout& layout, uint32_t home, WorkerSlot slot) {
  std::atomic<uint32_t>& lock = layout.pass_locks[home];
  for (int spin = 0; spin < kLockSpins; ++spin) {
    uint32_t expected = 0;
    if (lock.compare_exchange_weak(expected, slot + 1, std::memory_order_seq_cst)) return true;
    backOff(spin);
  }
  return false;
}

uint32_t sumCells(const Layout& layout, uint32_t index, PassProto proto) {
  uint32_t sum = 0;
  for (uint32_t s = 0; s < layout.geometry.worker_slots; ++s)
    sum += layout.passCell(index, s, proto).load(std::memory_order_seq_cst);
  return sum;
}

bool cellsEmpty(const Layout& layout, uint32_t index) {
  return sumCells(layout, index, PassProto::H1) == 0 && sumCells(layout, index, PassProto::H2) == 0;
}

// A free (Empty or Tombstone) entry of the id's window, claimed: Creating
// owned by `slot`, its version in *version. kNotFound if there is none.
uint32_t claimFree(Layout& layout, const IdKey& key, WorkerSlot slot, uint32_t* version) {
  const uint32_t probes = probeLength(layout);
  for (uint32_t i = 0; i < probes; ++i) {
    const uint32_t candidate = (key.home + i) & layout.pass_mask;
    uint64_t w = layout.pass_state[candidate].load(std::memory_order_seq_cst);
    const PassState state = passState(w);
    if (state != PassState::Empty && state != PassState::Tombstone) continue;
    const uint32_t next = passVersion(w) + 1;
    if (!layout.pass_state[candidate].compare_exchange_strong(w, packPass(next, PassState::Creating, slot),
                                                              std::memory_order_seq_cst))
      continue;
    *version = next;
    return candidate;
  }
  return kNotFound;
}

// The eviction rule (pass_table.h): among the window's Live entries with
// every cell zero, the one with the oldest last_used (the nearest the home
// bucket on a tie), taken over the way the sweep removes one: Live ->
// Removing(slot), cells read again; still idle -> Creating(slot), its
// version in *version. kNotFound: every Live entry of the window has
// something in flight. kRetry: another process moved the victim first, or
// a request of the victim's pass arrived (the entry went back to Live).
uint32_t evictIdle(Layout& layout, const IdKey& key, WorkerSlot slot, Millis now, uint32_t* version) {
  const uint32_t probes = probeLength(layout);
  uint32_t victim = kNotFound;
  uint64_t victim_word = 0;
  Millis victim_used = 0;
  for (uint32_t i = 0; i < probes; ++i) {
    const uint32_t candidate = (key.home + i) & layout.pass_mask;
    const uint64_t w = layout.pass_state[candidate].load(std::memory_order_seq_cst);
    if (passState(w) != PassState::Live) continue;
    const Millis used = layout.pass_last_used[candidate].load(std::memory_order_relaxed);
    if (victim != kNotFound && used >= victim_used) continue;
    if (!cellsEmpty(layout, candidate)) continue;
    victim = candidate;
    victim_word = w;
    victim_used = used;
  }
  if (victim == kNotFound) return kNotFound;
  std::atomic<uint64_t>& state = layout.pass_state[victim];
  const uint32_t v = passVersion(victim_word);
  if (!state.compare_exchange_strong(victim_word, packPass(v + 1, PassState::Removing, slot),
                                     std::memory_order_seq_cst))
    return kRetry;
  // Either an acquirer of the victim's pass sees Removing and undoes, or
  // this re-read sees its cell and the entry goes back to Live.
  if (!cellsEmpty(layout, victim)) {
    // In use after all: stamped as used now, so the next scan looks elsewhere.
    layout.pass_last_used[victim].store(now, std::memory_order_relaxed);
    state.store(packPass(v + 2, PassState::Live, slot), std::memory_order_seq_cst);
    return kRetry;
  }
  state.store(packPass(v + 2, PassState::Creating, slot), std::memory_order_seq_cst);
  *version = v + 2;
  return victim;
}

enum class Created { Yes, Exists, Full };

// Under the id's home-bucket lock: if no racing creator made the id's entry,
// claim a free entry of the window or evict one, write the id and publish it
// Live with the creator's hold already in its cell (so a new entry is busy
// from birth: no other creator can evict it before its first request).
Created createPass(Layout& layout, const IdKey& key, PassProto proto, WorkerSlot slot, Millis now,
                   uint32_t* created) {
  if (!lockHome(layout, key.home, slot)) return Created::Full;
  Created result = Created::Full;
  uint64_t word = 0;
  const uint32_t found = findPass(layout, key, &word);
  if (found != kNotFound) {
    if (found != kBusy) result = Created::Exists;
  } else {
    for (int attempt = 0; attempt < kEvictTries; ++attempt) {
      uint32_t version = 0;
      uint32_t index = claimFree(layout, key, slot, &version);
      if (index == kNotFound) {
        index = evictIdle(layout, key, slot, now, &version);
        if (index == kNotFound) break;  // every entry of the window is busy
        if (index == kRetry) continue;
        layout.counter(Counter::PassEvictedTotal).fetch_add(1, std::memory_order_relaxed);
      }
      layout.pass_id[2 * size_t{index}].store(key.a, std::memory_order_relaxed);
      layout.pass_id[2 * size_t{index} + 1].store(key.b, std::memory_order_relaxed);
      layout.pass_last_used[index].store(now, std::memory_order_relaxed);
      layout.passCell(index, slot, proto).fetch_add(1, std::memory_order_seq_cst);
      layout.pass_state[index].store(packPass(version + 1, PassState::Live, slot), std::memory_order_seq_cst);
      *created = index;
      result = Created::Yes;
      break;
    }
  }
  layout.pass_locks[key.home].store(0, std::memory_order_seq_cst);
  return result;
}

PassAcquire tableFull(Layout& layout) {
  layout.counter(Counter::PassTableFullTotal).fetch_add(1, std::memory_order_relaxed);
  return PassAcquire::TableFull;
}

}  // namespace

PassAcquire PassTable::tryAcquire(const uint8_t id[16], PassProto proto, int32_t cap, WorkerSlot slot, Millis now,
                                  PassHold* hold) {
  Layout& layout = *layout_;
  const IdKey key = makeIdKey(id, layout.pass_mask);
  if (cap <= 0) return PassAcquire::AtCap;
  int tries = 0;
  bool room_left = false;
  for (;;) {
    uint64_t word = 0;
    const uint32_t index = findPass(layout, key, &word);
    if (index == kBusy) return tableFull(layout);
    if (index == kNotFound) {
      uint32_t created = kNotFound;
      switch (createPass(layout, key, proto, slot, now, &created)) {
        case Created::Yes:
          if (hold) *hold = PassHold{created, proto};
          return PassAcquire::Acquired;
        case Created::Exists: continue;  // a racing creator made it: acquire through the normal path
        case Created::Full: return tableFull(layout);
      }
    }
    std::atomic<uint32_t>& cell = layout.passCell(index, slot, proto);
    cell.fetch_add(1, std::memory_order_seq_cst);
    if (layout.pass_state[index].load(std::memory_order_seq_cst) != word) {
      cell.fetch_sub(1, std::memory_order_seq_cst);  // being removed or reused: start over
      continue;
    }
    const uint32_t total = sumCells(layout, index, proto);
    if (total <= static_cast<uint32_t>(cap)) {
      layout.pass_last_used[index].store(now, std::memory_order_relaxed);
      if (hold) *hold = PassHold{index, proto};
      return PassAcquire::Acquired;
    }
    cell.fetch_sub(1, std::memory_order_seq_cst);
    // As with the semaphores: only a transient reservation of another request
    // of this pass may have pushed us over; retry a few times if so.
    if (static_cast<int64_t>(sumCells(layout, index, proto)) >= cap || ++tries >= kAcquireTries) break;
    room_left = true;
    for (int i = 0; i < tries; ++i) cpuRelax();
  }
  if (room_left) slots_->wake(Resource::PassSlot);
  return PassAcquire::AtCap;
}

void PassTable::release(const PassHold& hold, WorkerSlot slot, Millis now) {
  if (!hold.valid()) return;
  Layout& layout = *layout_;
  layout.passCell(hold.index, slot, hold.proto).fetch_sub(1, std::memory_order_seq_cst);
  layout.pass_last_used[hold.index].store(now, std::memory_order_relaxed);
  slots_->wake(Resource::PassSlot);
}

int64_t PassTable::users() const {
  const Layout& layout = *layout_;
  int64_t users = 0;
  for (uint32_t i = 0; i < layout.geometry.pass_table_size; ++i) {
    const PassState state = passState(layout.pass_state[i].load(std::memory_order_relaxed));
    if (state == PassState::Live || state == PassState::Removing) ++users;
  }
  return users;
}

int64_t PassTable::sweep(Millis now, Millis idle) {
  Layout& layout = *layout_;
  int64_t removed = 0;
  for (uint32_t i = 0; i < layout.geometry.pass_table_size; ++i) {
    std::atomic<uint64_t>& state = layout.pass_state[i];
    uint64_t word = state.load(std::memory_order_seq_cst);
    if (passState(word) != PassState::Live) continue;
    if (now - layout.pass_last_used[i].load(std::memory_order_relaxed) <= idle) continue;
    if (!cellsEmpty(layout, i)) continue;
    const uint32_t version = passVersion(word);
    if (!state.compare_exchange_strong(word, packPass(version + 1, PassState::Removing, kOwnerMaster),
                                       std::memory_order_seq_cst))
      continue;
    if (cellsEmpty(layout, i)) {
      state.store(packPass(version + 2, PassState::Tombstone, kOwnerMaster), std::memory_order_seq_cst);
      ++removed;
    } else {
      state.store(packPass(version + 2, PassState::Live, kOwnerMaster), std::memory_order_seq_cst);
    }
  }
  return removed;
}

int64_t PassTable::reclaim(WorkerSlot slot) {
  Layout& layout = *layout_;
  int64_t holds = 0;
  for (uint32_t i = 0; i < layout.geometry.pass_table_size; ++i) {
    for (PassProto proto : {PassProto::H1, PassProto::H2}) {
      if (slot >= layout.geometry.worker_slots) break;  // the master's janitor holds no cells
      std::atomic<uint32_t>& cell = layout.passCell(i, slot, proto);
      if (cell.load(std::memory_order_relaxed) != 0) holds += cell.exchange(0, std::memory_order_seq_cst);
    }
    std::atomic<uint64_t>& state = layout.pass_state[i];
    uint64_t word = state.load(std::memory_order_seq_cst);
    if (passOwner(word) == slot) {
      // Its Creating entry was never published (its hold there is zeroed
      // above); its Removing entry (an eviction cut short) ends as the sweep
      // would end it: gone if idle, else Live.
      PassState next = PassState::Live;
      if (passState(word) == PassState::Creating) next = PassState::Tombstone;
      if (passState(word) == PassState::Removing && cellsEmpty(layout, i)) next = PassState::Tombstone;
      if (passState(word) == PassState::Creating || passState(word) == PassState::Removing)
        state.compare_exchange_strong(word, packPass(passVersion(word) + 1, next, kOwnerMaster),
                                      std::memory_order_seq_cst);
    }
    uint32_t owner = slot + 1;
    layout.pass_locks[i].compare_exchange_strong(owner, 0, std::memory_order_seq_cst);
  }
  return holds;
}

}  // namespace concert::shm
