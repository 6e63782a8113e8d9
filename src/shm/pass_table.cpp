// The pass table: per-pass (concert_admit id) in-flight asset counts, one
// pool per protocol, shared by every worker.
//
// Open addressing with linear probing over at most kMaxProbe entries from
// the id's home bucket. Entry state word = version | state | owner:
//   Empty --creator--> Creating(owner) --creator--> Live
//   Live --master sweep--> Removing --> Tombstone (or back to Live if a
//   request arrived meanwhile); Tombstone --creator--> Creating (reused).
// Empty ends a probe chain, Tombstone does not.
//
// Holds are per (entry, worker slot, protocol) u32 cells written only by
// their own worker, so a dead worker's holds are exactly its cells. An
// acquirer increments its cell, then re-reads the state word; the sweeper
// moves Live to Removing, then re-reads the cells (both sequentially
// consistent): either the acquirer sees Removing and undoes, or the sweeper
// sees the hold and puts the entry back. The per-pass cap check is the same
// increment-then-sum as the semaphores, so a pass never exceeds its cap.
//
// Creation of an id is serialised by a lock on the id's home bucket (owner
// slot + 1 in the lock word), so concurrent first requests of one pass (a
// browser opening six asset connections at once) end with one entry. Only a
// creator holds it, for a few hundred nanoseconds; a creator killed while
// holding it is released by reclaimDeadWorker, which also turns its Creating
// entry into a Tombstone. A waiter gives up after kLockSpins and reports the
// table full rather than block the worker's event loop.
//
// A full table (no Empty or Tombstone entry within the probe window) answers
// TableFull: the request gets 503 and pass_table_full_total counts it;
// failing open would let one pass bypass its per-pass cap.
#include <sched.h>

#include <cstring>

#include "shm/segment_impl.h"

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
  uint64_t x = key.a ^ (key.b * 0x9e3779b97f4a7c15ull);
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  key.home = static_cast<uint32_t>(x) & mask;
  return key;
}

uint32_t probeLength(const SegmentCore& impl) {
  return impl.geometry.pass_table_size < kMaxProbe ? impl.geometry.pass_table_size : kMaxProbe;
}

bool idMatches(const SegmentCore& impl, uint32_t index, const PassKey& key) {
  return impl.layout.pass_id[2 * size_t{index}].load(std::memory_order_acquire) == key.a &&
         impl.layout.pass_id[2 * size_t{index} + 1].load(std::memory_order_acquire) == key.b;
}

void backOff(int spin) {
  if (spin < 64) {
    cpuRelax();
  } else {
    sched_yield();
  }
}

// A Live entry for the id (its state word in *word), or kNotFound.
uint32_t findPass(const SegmentCore& impl, const PassKey& key, uint64_t* word) {
  const uint32_t probes = probeLength(impl);
  for (uint32_t i = 0; i < probes; ++i) {
    const uint32_t index = (key.home + i) & impl.pass_mask;
    for (int spin = 0;; ++spin) {
      const uint64_t w = impl.layout.pass_state[index].load(std::memory_order_seq_cst);
      const PassState state = passState(w);
      if (state == PassState::Empty) return kNotFound;
      if (state != PassState::Live && state != PassState::Removing) break;
      if (!idMatches(impl, index, key)) break;
      // The id must be read under an unchanged word to be this entry's id.
      if (impl.layout.pass_state[index].load(std::memory_order_seq_cst) != w) continue;
      if (state == PassState::Live) {
        *word = w;
        return index;
      }
      backOff(spin);  // the master is deciding whether to remove it
    }
  }
  return kNotFound;
}

bool lockHome(const SegmentCore& impl, uint32_t home, WorkerSlot slot) {
  std::atomic<uint32_t>& lock = impl.layout.pass_locks[home];
  for (int spin = 0; spin < kLockSpins; ++spin) {
    uint32_t expected = 0;
    if (lock.compare_exchange_weak(expected, slot + 1, std::memory_order_seq_cst)) return true;
    backOff(spin);
  }
  return false;
}

// Creates the id's entry (or finds the one a racing creator made).
uint32_t createPass(SegmentCore& impl, const PassKey& key, WorkerSlot slot, Millis now) {
  if (!lockHome(impl, key.home, slot)) return kNotFound;
  uint64_t word = 0;
  uint32_t index = findPass(impl, key, &word);
  if (index == kNotFound) {
    const uint32_t probes = probeLength(impl);
    for (uint32_t i = 0; i < probes && index == kNotFound; ++i) {
      const uint32_t candidate = (key.home + i) & impl.pass_mask;
      uint64_t w = impl.layout.pass_state[candidate].load(std::memory_order_seq_cst);
      const PassState state = passState(w);
      if (state != PassState::Empty && state != PassState::Tombstone) continue;
      const uint32_t version = passVersion(w) + 1;
      if (!impl.layout.pass_state[candidate].compare_exchange_strong(w, packPass(version, PassState::Creating, slot),
                                                                     std::memory_order_seq_cst))
        continue;
      impl.layout.pass_id[2 * size_t{candidate}].store(key.a, std::memory_order_relaxed);
      impl.layout.pass_id[2 * size_t{candidate} + 1].store(key.b, std::memory_order_relaxed);
      impl.layout.pass_last_used[candidate].store(now, std::memory_order_relaxed);
      impl.layout.pass_state[candidate].store(packPass(version + 1, PassState::Live, slot), std::memory_order_seq_cst);
      index = candidate;
    }
  }
  impl.layout.pass_locks[key.home].store(0, std::memory_order_seq_cst);
  return index;
}

uint32_t sumCells(const SegmentCore& impl, uint32_t index, PassProto proto) {
  uint32_t sum = 0;
  for (uint32_t s = 0; s < impl.geometry.worker_slots; ++s)
    sum += impl.passCell(index, s, proto).load(std::memory_order_seq_cst);
  return sum;
}

bool cellsEmpty(const SegmentCore& impl, uint32_t index) {
  return sumCells(impl, index, PassProto::H1) == 0 && sumCells(impl, index, PassProto::H2) == 0;
}

}  // namespace

PassAcquire Segment::tryAcquirePass(const uint8_t id[16], PassProto proto, int32_t cap, WorkerSlot slot, Millis now,
                                    PassHold* hold) {
  Impl& impl = *impl_;
  const PassKey key = makeKey(id, impl.pass_mask);
  int tries = 0;
  bool room_left = false;
  for (;;) {
    uint64_t word = 0;
    uint32_t index = findPass(impl, key, &word);
    if (index == kNotFound) {
      if (createPass(impl, key, slot, now) == kNotFound) {
        impl.counter(Counter::PassTableFullTotal).fetch_add(1, std::memory_order_relaxed);
        return PassAcquire::TableFull;
      }
      continue;  // look it up again through the normal path
    }
    std::atomic<uint32_t>& cell = impl.passCell(index, slot, proto);
    cell.fetch_add(1, std::memory_order_seq_cst);
    if (impl.layout.pass_state[index].load(std::memory_order_seq_cst) != word) {
      cell.fetch_sub(1, std::memory_order_seq_cst);  // being removed or reused: start over
      continue;
    }
    const uint32_t total = sumCells(impl, index, proto);
    if (cap > 0 && total <= static_cast<uint32_t>(cap)) {
      impl.layout.pass_last_used[index].store(now, std::memory_order_relaxed);
      if (hold) *hold = PassHold{index, proto};
      return PassAcquire::Acquired;
    }
    cell.fetch_sub(1, std::memory_order_seq_cst);
    // As with the semaphores: only a transient reservation of another request
    // of this pass may have pushed us over; retry a few times if so.
    if (cap <= 0 || static_cast<int64_t>(sumCells(impl, index, proto)) >= cap || ++tries >= kAcquireTries) break;
    room_left = true;
    for (int i = 0; i < tries; ++i) cpuRelax();
  }
  if (room_left) wake(Resource::PassSlot);
  return PassAcquire::AtCap;
}

void Segment::releasePass(const PassHold& hold, WorkerSlot slot, Millis now) {
  if (!hold.valid()) return;
  Impl& impl = *impl_;
  impl.passCell(hold.index, slot, hold.proto).fetch_sub(1, std::memory_order_seq_cst);
  impl.layout.pass_last_used[hold.index].store(now, std::memory_order_relaxed);
  wake(Resource::PassSlot);
}

int64_t Segment::passUsers() const {
  const Impl& impl = *impl_;
  int64_t users = 0;
  for (uint32_t i = 0; i < impl.geometry.pass_table_size; ++i) {
    const PassState state = passState(impl.layout.pass_state[i].load(std::memory_order_relaxed));
    if (state == PassState::Live || state == PassState::Removing) ++users;
  }
  return users;
}

int64_t Segment::sweepPasses(Millis now, Millis idle) {
  Impl& impl = *impl_;
  int64_t removed = 0;
  for (uint32_t i = 0; i < impl.geometry.pass_table_size; ++i) {
    std::atomic<uint64_t>& state = impl.layout.pass_state[i];
    uint64_t word = state.load(std::memory_order_seq_cst);
    if (passState(word) != PassState::Live) continue;
    if (now - impl.layout.pass_last_used[i].load(std::memory_order_relaxed) <= idle) continue;
    if (!cellsEmpty(impl, i)) continue;
    const uint32_t version = passVersion(word);
    if (!state.compare_exchange_strong(word, packPass(version + 1, PassState::Removing, kOwnerMaster),
                                       std::memory_order_seq_cst))
      continue;
    if (cellsEmpty(impl, i)) {
      state.store(packPass(version + 2, PassState::Tombstone, kOwnerMaster), std::memory_order_seq_cst);
      ++removed;
    } else {
      state.store(packPass(version + 2, PassState::Live, kOwnerMaster), std::memory_order_seq_cst);
    }
  }
  return removed;
}

int64_t SegmentCore::reclaimPasses(WorkerSlot slot) {
  int64_t holds = 0;
  for (uint32_t i = 0; i < geometry.pass_table_size; ++i) {
    for (PassProto proto : {PassProto::H1, PassProto::H2}) {
      std::atomic<uint32_t>& cell = passCell(i, slot, proto);
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
