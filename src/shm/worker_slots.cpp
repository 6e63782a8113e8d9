// Worker slots and wake-ups; the rule and the words are in worker_slots.h.
#include "shm/worker_slots.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "shm/layout.h"

namespace concert::shm {

WorkerSlots::WorkerSlots(Layout& layout, std::vector<int> handed) : layout_(&layout) {
  if (handed.size() == layout.geometry.worker_slots) {
    eventfds_ = std::move(handed);
    return;
  }
  for (int fd : handed)
    if (fd >= 0) close(fd);
  eventfds_.assign(layout.geometry.worker_slots, -1);
  for (int& fd : eventfds_) {
    fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd >= 0) continue;
    const int error = errno;
    for (int open : eventfds_)
      if (open >= 0) close(open);
    throw std::system_error(error, std::generic_category(), "shm: eventfd");
  }
}

WorkerSlots::~WorkerSlots() {
  for (int fd : eventfds_)
    if (fd >= 0) close(fd);
}

void WorkerSlots::started(WorkerSlot slot, int pid, uint32_t generation, Millis now) {
  // The ledger (page / asset counters, waiting mask) is already zero: the
  // segment starts that way and reclaim zeroes it before a slot is reused.
  // It must not be reset here: the master calls this after fork(), when the
  // new worker may already hold a slot.
  SlotRecord& record = layout_->slots[slot];
  record.heartbeat.store(now, std::memory_order_seq_cst);
  record.generation.store(generation, std::memory_order_seq_cst);
  record.pid.store(pid, std::memory_order_seq_cst);
}

void WorkerSlots::heartbeat(WorkerSlot slot, Millis now) {
  layout_->slots[slot].heartbeat.store(now, std::memory_order_relaxed);
}

Millis WorkerSlots::lastHeartbeat(WorkerSlot slot) const {
  return layout_->slots[slot].heartbeat.load(std::memory_order_relaxed);
}

int WorkerSlots::pid(WorkerSlot slot) const {
  return static_cast<int>(layout_->slots[slot].pid.load(std::memory_order_seq_cst));
}

uint32_t WorkerSlots::generation(WorkerSlot slot) const {
  return layout_->slots[slot].generation.load(std::memory_order_seq_cst);
}

uint32_t WorkerSlots::running() const {
  uint32_t workers = 0;
  for (uint32_t slot = 0; slot < layout_->geometry.worker_slots; ++slot)
    if (layout_->slots[slot].pid.load(std::memory_order_relaxed) != 0) ++workers;
  return workers;
}

int WorkerSlots::eventFd(WorkerSlot slot) const {
  return eventfds_[slot];
}

void WorkerSlots::setWaiting(WorkerSlot slot, Resource r, bool waiting) {
  const uint32_t bit = 1u << static_cast<uint32_t>(r);
  std::atomic<uint32_t>& mask = layout_->slots[slot].waiting_mask;
  if (waiting) {
    mask.fetch_or(bit, std::memory_order_seq_cst);
  } else {
    mask.fetch_and(~bit, std::memory_order_seq_cst);
  }
}

void WorkerSlots::setLocalWake(WorkerSlot slot, void (*fn)(void*), void* arg) {
  local_slot_ = slot;
  local_wake_ = fn;
  local_wake_arg_ = arg;
}

bool WorkerSlots::consumeWake(WorkerSlot slot) {
  uint64_t count = 0;  // one read returns and resets the whole count
  ssize_t n;
  do {
    n = read(eventfds_[slot], &count, sizeof(count));
  } while (n < 0 && errno == EINTR);
  // Read first, then lower (worker_slots.h): lowered first, a wake-up in
  // between would leave the flag up over an eventfd this read emptied.
  wakeConsumed(slot);
  return n == static_cast<ssize_t>(sizeof(count));
}

void WorkerSlots::wakeConsumed(WorkerSlot slot) {
  layout_->slots[slot].wake_pending.store(0, std::memory_order_seq_cst);
}

void WorkerSlots::wake(Resource r) {
  const uint32_t bit = 1u << static_cast<uint32_t>(r);
  for (uint32_t s = 0; s < layout_->geometry.worker_slots; ++s) {
    SlotRecord& record = layout_->slots[s];
    if ((record.waiting_mask.load(std::memory_order_seq_cst) & bit) == 0) continue;
    if (s == local_slot_ && local_wake_) {
      local_wake_(local_wake_arg_);
      continue;
    }
    // One write until the worker reads (the rule in worker_slots.h).
    if (record.wake_pending.exchange(1, std::memory_order_seq_cst) != 0) continue;
    const uint64_t one = 1;
    // EAGAIN means the counter is already huge: the worker is woken anyway.
    ssize_t n;
    do {
      n = write(eventfds_[s], &one, sizeof(one));
    } while (n < 0 && errno == EINTR);
  }
}

void WorkerSlots::reclaim(WorkerSlot slot) {
  SlotRecord& record = layout_->slots[slot];
  record.waiting_mask.store(0, std::memory_order_seq_cst);
  // A wake-up meant for the dead worker must not reach the slot's next one.
  // Drained, then lowered, as consumeWake does: the flag is never left up
  // over an empty eventfd.
  uint64_t drained;
  while (read(eventfds_[slot], &drained, sizeof(drained)) > 0) {
  }
  record.wake_pending.store(0, std::memory_order_seq_cst);
  record.pid.store(0, std::memory_order_seq_cst);
}

}  // namespace concert::shm
