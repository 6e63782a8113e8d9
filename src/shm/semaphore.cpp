// The page and asset semaphores; the design is in semaphore.h.
#include "shm/semaphore.h"

#include <bit>
#include <cstdlib>

#include "common/clock.h"
#include "common/log.h"
#include "shm/cluster.h"
#include "shm/layout.h"
#include "shm/worker_slots.h"

namespace concert::shm {

namespace {

constexpr int kAcquireTries = 8;

// A slot's counter only goes below 0 after a release without its acquire
// (semaphore.h): the ledger is wrong, and nothing after that can be trusted.
[[noreturn]] __attribute__((cold)) void negativeCount(const char* name, WorkerSlot slot, int64_t held) {
  LOG_ERROR("shm: broken invariant: %s semaphore count of slot %u is %lld < 0 (a release without its acquire)", name,
            slot, static_cast<long long>(held));
  std::abort();
}

}  // namespace

std::atomic<int64_t>& Semaphore::capWord() const {
  return layout_->header->*cap_;
}

Semaphore::Semaphore(Layout& layout, WorkerSlots& slots, std::atomic<int64_t> SlotRecord::*counter,
                     std::atomic<int64_t> Header::*cap, Resource resource, std::atomic<uint64_t> Header::*utilization,
                     const char* name)
    : Handle(layout, slots),
      cap_(cap),
      resource_(resource),
      counter_(counter),
      utilization_(utilization),
      name_(name) {}

int64_t Semaphore::occupancy() const {
  int64_t total = 0;
  for (uint32_t s = 0; s < layout_->geometry.worker_slots; ++s) {
    const int64_t held = (layout_->slots[s].*counter_).load(std::memory_order_seq_cst);
    if (held < 0) negativeCount(name_, s, held);
    total += held;
  }
  if (outside_) total += (layout_->header->*outside_).load(std::memory_order_seq_cst);
  return total;
}

bool Semaphore::tryAcquire(WorkerSlot slot) {
  std::atomic<int64_t>& own = layout_->slots[slot].*counter_;
  bool room_left = false;
  for (int attempt = 0; attempt < kAcquireTries; ++attempt) {
    own.fetch_add(1, std::memory_order_seq_cst);
    const int64_t total = occupancy();
    const int64_t limit = this->limit();
    if (total <= limit) {
      updateUtilization();
      return true;
    }
    own.fetch_sub(1, std::memory_order_seq_cst);
    // Without our reservation: if the others alone fill the cap, it is full.
    if (occupancy() >= limit) break;
    room_left = true;
    for (int i = 0; i <= attempt; ++i) cpuRelax();
  }
  if (room_left) slots_->wake(resource_);
  return false;
}

void Semaphore::release(WorkerSlot slot) {
  (layout_->slots[slot].*counter_).fetch_sub(1, std::memory_order_seq_cst);
  updateUtilization();
  slots_->wake(resource_);
}

int32_t Semaphore::cap() const {
  return static_cast<int32_t>(limit());
}

int64_t Semaphore::limit() const {
  return capWord().load(std::memory_order_seq_cst);
}

int64_t Semaphore::reclaim(WorkerSlot slot) {
  const int64_t held = (layout_->slots[slot].*counter_).exchange(0, std::memory_order_seq_cst);
  updateUtilization();
  return held;
}

void Semaphore::updateUtilization() {
  if (!utilization_) return;
  const int64_t cap = capWord().load(std::memory_order_relaxed);
  const int64_t held = occupancy();
  double sample = cap > 0 ? static_cast<double>(held) / static_cast<double>(cap) : 0.0;
  if (sample > 1.0) sample = 1.0;
  std::atomic<uint64_t>& utilization = layout_->header->*utilization_;
  uint64_t old = utilization.load(std::memory_order_relaxed);
  for (;;) {
    const double current = std::bit_cast<double>(old);
    const double next = current + 0.1 * (sample - current);
    if (utilization.compare_exchange_weak(old, std::bit_cast<uint64_t>(next), std::memory_order_relaxed)) return;
  }
}

PageSemaphore::PageSemaphore(Layout& layout, WorkerSlots& slots)
    : Semaphore(layout, slots, &SlotRecord::page, &Header::page_cap, Resource::PageSlot, &Header::utilization,
                "page") {
  outside_ = &Header::quarantined;
}

void PageSemaphore::quarantine(int64_t slots, Millis until) {
  if (slots <= 0) return;
  Header& h = *layout_->header;
  int64_t later = h.quarantine_until.load(std::memory_order_seq_cst);
  while (later < until && !h.quarantine_until.compare_exchange_weak(later, until, std::memory_order_seq_cst)) {
  }
  h.quarantined.fetch_add(slots, std::memory_order_seq_cst);
}

int64_t PageSemaphore::quarantined() const {
  return layout_->header->quarantined.load(std::memory_order_seq_cst);
}

int64_t PageSemaphore::endQuarantine(Millis now) {
  Header& h = *layout_->header;
  if (h.quarantined.load(std::memory_order_seq_cst) == 0 || now < h.quarantine_until.load(std::memory_order_seq_cst))
    return 0;
  const int64_t freed = h.quarantined.exchange(0, std::memory_order_seq_cst);
  // Slots put in quarantine meanwhile, with a later end: back they go, with
  // the ones freed here (kept a little longer, never less).
  if (now < h.quarantine_until.load(std::memory_order_seq_cst)) {
    h.quarantined.fetch_add(freed, std::memory_order_seq_cst);
    return 0;
  }
  if (freed > 0) slots_->wake(Resource::PageSlot);
  return freed;
}

int64_t PageSemaphore::held(WorkerSlot slot) const {
  return layout_->slots[slot].page.load(std::memory_order_seq_cst);
}

int64_t PageSemaphore::limit() const {
  const int64_t share = capWord().load(std::memory_order_seq_cst);
  // One host alone reads no clock here: only a cluster host's share can lapse.
  if (layout_->cluster->enabled.load(std::memory_order_relaxed) == 0) return share;
  return sharedCapNow(*layout_->cluster, share, monotonicMs());
}

void PageSemaphore::setCap(int32_t cap) {
  if (cap < 1) cap = 1;  // the API's floor (POST /_room/cap refuses < 1 before this)
  const int64_t old = capWord().exchange(cap, std::memory_order_seq_cst);
  // A wider window also makes waiting tickets ready; they learn it on their
  // next poll. Parked requests retry at once.
  if (cap > old) slots_->wake(resource_);
}

bool PageSemaphore::replaceCap(int32_t expected, int32_t cap) {
  if (cap < 1) cap = 1;
  int64_t old = expected;
  if (!capWord().compare_exchange_strong(old, cap, std::memory_order_seq_cst)) return false;
  if (cap > expected) slots_->wake(resource_);
  return true;
}

void PageSemaphore::setShare(int32_t share) {
  if (share < 0) share = 0;
  const int64_t old = capWord().exchange(share, std::memory_order_seq_cst);
  if (share > old) slots_->wake(resource_);
}

int32_t PageSemaphore::configuredCap() const {
  return static_cast<int32_t>(layout_->header->configured_page_cap.load(std::memory_order_seq_cst));
}

void PageSemaphore::setConfiguredCap(int32_t cap) {
  layout_->header->configured_page_cap.store(cap, std::memory_order_seq_cst);
}

}  // namespace concert::shm
