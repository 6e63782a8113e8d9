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
constexpr int kLockSpins = 1 << 14;  // a few ms of yields: a preempted holder, not a dead one
constexpr int kAcquireTries = 8;

struct PassKey {
  uint64_t a, b;
  uint32_t home;
};

PassKey makeKey(const uint8_t id[16], uint32_t mask) {
  PassKey key;
  std::memcpy(&key.a, id, 8);
  std::memcpy(&key.b, id + 8, 8);
  key.home = static_cast<uint32_t>(hashId(key.a, key.b)) & mask;
  return key;
}

uint32_t probeLength(const Layout& layout) {
  return layout.geometry.pass_table_size < kMaxProbe ? layout.geometry.pass_table_size : kMaxProbe;
}

bool idMatches(const Layout& layout, uint32_t index, const PassKey& key) {
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

// A Live entry for the id (its state word in *word), or kNotFound.
uint32_t findPass(const Layout& layout, const PassKey& key, uint64_t* word) {
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
      backOff(spin);  // the master is deciding whether to remove it
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

// Creates the id's entry (or finds the one a racing creator made).
uint32_t createPass(Layout& layout, const PassKey& key, WorkerSlot slot, Millis now) {
  if (!lockHome(layout, key.home, slot)) return kNotFound;
  uint64_t word = 0;
  uint32_t index = findPass(layout, key, &word);
  if (index == kNotFound) {
    const uint32_t probes = probeLength(layout);
    for (uint32_t i = 0; i < probes && index == kNotFound; ++i) {
      const uint32_t candidate = (key.home + i) & layout.pass_mask;
      uint64_t w = layout.pass_state[candidate].load(std::memory_order_seq_cst);
      const PassState state = passState(w);
      if (state != PassState::Empty && state != PassState::Tombstone) continue;
      const uint32_t version = passVersion(w) + 1;
      if (!layout.pass_state[candidate].compare_exchange_strong(w, packPass(version, PassState::Creating, slot),
                                                                std::memory_order_seq_cst))
        continue;
      layout.pass_id[2 * size_t{candidate}].store(key.a, std::memory_order_relaxed);
      layout.pass_id[2 * size_t{candidate} + 1].store(key.b, std::memory_order_relaxed);
      layout.pass_last_used[candidate].store(now, std::memory_order_relaxed);
      layout.pass_state[candidate].store(packPass(version + 1, PassState::Live, slot), std::memory_order_seq_cst);
      index = candidate;
    }
  }
  layout.pass_locks[key.home].store(0, std::memory_order_seq_cst);
  return index;
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

}  // namespace

PassAcquire PassTable::tryAcquire(const uint8_t id[16], PassProto proto, int32_t cap, WorkerSlot slot, Millis now,
                                  PassHold* hold) {
  Layout& layout = *layout_;
  const PassKey key = makeKey(id, layout.pass_mask);
  int tries = 0;
  bool room_left = false;
  for (;;) {
    uint64_t word = 0;
    uint32_t index = findPass(layout, key, &word);
    if (index == kNotFound) {
      if (createPass(layout, key, slot, now) == kNotFound) {
        layout.counter(Counter::PassTableFullTotal).fetch_add(1, std::memory_order_relaxed);
        return PassAcquire::TableFull;
      }
      continue;  // look it up again through the normal path
    }
    std::atomic<uint32_t>& cell = layout.passCell(index, slot, proto);
    cell.fetch_add(1, std::memory_order_seq_cst);
    if (layout.pass_state[index].load(std::memory_order_seq_cst) != word) {
      cell.fetch_sub(1, std::memory_order_seq_cst);  // being removed or reused: start over
      continue;
    }
    const uint32_t total = sumCells(layout, index, proto);
    if (cap > 0 && total <= static_cast<uint32_t>(cap)) {
      layout.pass_last_used[index].store(now, std::memory_order_relaxed);
      if (hold) *hold = PassHold{index, proto};
      return PassAcquire::Acquired;
    }
    cell.fetch_sub(1, std::memory_order_seq_cst);
    // As with the semaphores: only a transient reservation of another request
    // of this pass may have pushed us over; retry a few times if so.
    if (cap <= 0 || static_cast<int64_t>(sumCells(layout, index, proto)) >= cap || ++tries >= kAcquireTries) break;
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
      std::atomic<uint32_t>& cell = layout.passCell(i, slot, proto);
      if (cell.load(std::memory_order_relaxed) != 0) holds += cell.exchange(0, std::memory_order_seq_cst);
    }
    std::atomic<uint64_t>& state = layout.pass_state[i];
    uint64_t word = state.load(std::memory_order_seq_cst);
    if (passState(word) == PassState::Creating && passOwner(word) == slot)
      state.compare_exchange_strong(word, packPass(passVersion(word) + 1, PassState::Tombstone, kOwnerMaster),
                                    std::memory_order_seq_cst);
    uint32_t owner = slot + 1;
    layout.pass_locks[i].compare_exchange_strong(owner, 0, std::memory_order_seq_cst);
  }
  return holds;
}

}  // namespace concert::shm
