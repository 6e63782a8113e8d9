// Segment creation and carving, the page and asset semaphores, cross-process
// wake-ups, the worker-slot table, dead-worker reclamation and stats.
// The ticket ring lives in tickets.cpp, the pass table in pass_table.cpp.
//
// Semaphores (page and global asset) are per-slot counters: total = the sum
// over slots. tryAcquire increments its own slot's counter first, then sums
// every slot (sequentially consistent, Dekker-style): if the sum exceeds the
// cap it takes its increment back and fails. Two racing acquirers can both
// back off (each sees the other's reservation); that is a spurious failure,
// never an over-admission, so a failed acquirer re-sums without its own
// reservation and retries a few times while there is room, and on giving up
// with room left it wakes the parked waiters so nothing sleeps on a free
// slot. A worker SIGKILLed anywhere leaves exactly its holds (plus at most one
// half-made reservation) in its own counters; reclaimDeadWorker zeroes them.
// Shrinking the cap only lowers the bound new acquisitions are checked
// against: in-flight requests keep their slots, nobody new gets in until the
// sum is below the new cap.
#include "shm/segment.h"

#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <bit>
#include <boost/interprocess/anonymous_shared_memory.hpp>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <system_error>

#include "shm/segment_impl.h"

namespace concert::shm {

namespace {

constexpr int kAcquireTries = 8;

size_t alignUp(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

uint64_t nextPowerOfTwo(uint64_t n) {
  return n <= 1 ? 1 : std::bit_ceil(n);
}

bool validGeometry(const Geometry& g) {
  return g.ring_size >= 64 && std::has_single_bit(g.ring_size) && g.worker_slots >= 1 &&
         g.worker_slots <= kMaxWorkerSlots && g.pass_table_size >= 1 && std::has_single_bit(g.pass_table_size);
}

struct Offsets {
  size_t slots, entries, cookie_sent, waiting, finished, pass_state, pass_id, pass_last_used, pass_cells, pass_locks,
      total;
};

Offsets carve(const Geometry& g) {
  Offsets o{};
  size_t at = alignUp(sizeof(Header), 64);
  auto take = [&at](size_t bytes) {
    const size_t here = at;
    at = alignUp(at + bytes, 64);
    return here;
  };
  o.slots = take(sizeof(SlotRecord) * g.worker_slots);
  o.entries = take(sizeof(TicketEntry) * g.ring_size);
  o.cookie_sent = take(sizeof(uint32_t) * g.ring_size);
  o.waiting = take(CountedBits::bytesFor(g.ring_size));
  o.finished = take(CountedBits::bytesFor(g.ring_size));
  o.pass_state = take(sizeof(uint64_t) * g.pass_table_size);
  o.pass_id = take(sizeof(uint64_t) * 2 * g.pass_table_size);
  o.pass_last_used = take(sizeof(int64_t) * g.pass_table_size);
  o.pass_cells = take(sizeof(uint32_t) * 2 * size_t{g.worker_slots} * g.pass_table_size);
  o.pass_locks = take(sizeof(uint32_t) * g.pass_table_size);
  o.total = at;
  return o;
}

double loadDouble(const std::atomic<uint64_t>& bits) {
  return std::bit_cast<double>(bits.load(std::memory_order_relaxed));
}

}  // namespace

void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  sched_yield();
#endif
}

// ---------------------------------------------------------------- geometry
Geometry computeGeometry(int64_t max_queue, int32_t cap, int workers, int32_t asset_users_max) {
  Geometry g;
  constexpr uint64_t kMinRing = uint64_t{1} << 12;
  constexpr uint64_t kUnlimitedRing = uint64_t{1} << 20;
  constexpr uint64_t kMaxRing = uint64_t{1} << 31;
  uint64_t ring = kUnlimitedRing;
  if (max_queue > 0) {
    const uint64_t live = static_cast<uint64_t>(max_queue) + static_cast<uint64_t>(cap > 0 ? cap : 1);
    ring = live >= kMaxRing ? kMaxRing : nextPowerOfTwo(2 * live);
    if (ring < kMinRing) ring = kMinRing;
    if (ring > kMaxRing) ring = kMaxRing;
  }
  g.ring_size = static_cast<uint32_t>(ring);
  const int slots = 2 * (workers > 0 ? workers : 1);
  g.worker_slots = static_cast<uint32_t>(slots < 2 ? 2 : slots);
  const uint64_t users = asset_users_max > 0 ? static_cast<uint64_t>(asset_users_max) : 1;
  uint64_t table = nextPowerOfTwo(users);
  if (table > kMaxRing) table = kMaxRing;
  g.pass_table_size = static_cast<uint32_t>(table);
  return g;
}

// ---------------------------------------------------------------- lifecycle
Segment::Segment() : impl_(std::make_unique<Impl>()) {}

Segment::~Segment() {
  for (int fd : impl_->eventfds)
    if (fd >= 0) close(fd);
}

std::unique_ptr<Segment> Segment::create(const Geometry& geometry, int32_t page_cap, int32_t asset_cap) {
  if (!validGeometry(geometry)) throw std::invalid_argument("shm: invalid segment geometry");
  if (page_cap < 1 || asset_cap < 1) throw std::invalid_argument("shm: caps must be >= 1");
  const Offsets off = carve(geometry);

  std::unique_ptr<Segment> segment(new Segment());
  Impl& impl = *segment->impl_;
  impl.region = boost::interprocess::anonymous_shared_memory(off.total);
  impl.geometry = geometry;
  impl.ring_mask = geometry.ring_size - 1;
  impl.pass_mask = geometry.pass_table_size - 1;

  auto* base = static_cast<unsigned char*>(impl.region.get_address());
  Layout& l = impl.layout;
  l.header = new (base) Header();
  l.slots = reinterpret_cast<SlotRecord*>(base + off.slots);
  l.entries = reinterpret_cast<TicketEntry*>(base + off.entries);
  l.cookie_sent = reinterpret_cast<std::atomic<uint32_t>*>(base + off.cookie_sent);
  l.waiting.attach(base + off.waiting, geometry.ring_size);
  l.finished.attach(base + off.finished, geometry.ring_size);
  l.pass_state = reinterpret_cast<std::atomic<uint64_t>*>(base + off.pass_state);
  l.pass_id = reinterpret_cast<std::atomic<uint64_t>*>(base + off.pass_id);
  l.pass_last_used = reinterpret_cast<std::atomic<int64_t>*>(base + off.pass_last_used);
  l.pass_cells = reinterpret_cast<std::atomic<uint32_t>*>(base + off.pass_cells);
  l.pass_locks = reinterpret_cast<std::atomic<uint32_t>*>(base + off.pass_locks);
  for (uint32_t s = 0; s < geometry.worker_slots; ++s) new (&l.slots[s]) SlotRecord();

  Header& h = *l.header;
  h.magic = kMagic;
  h.layout_version = kLayoutVersion;
  h.ring_size = geometry.ring_size;
  h.total_bytes = off.total;
  h.worker_slots = geometry.worker_slots;
  h.pass_table_size = geometry.pass_table_size;
  h.asset_cap = asset_cap;
  h.page_cap.store(page_cap);
  h.configured_page_cap.store(page_cap);
  h.generation.store(0);
  h.next_ticket.store(1);
  h.low_water.store(1);
  h.utilization.store(std::bit_cast<uint64_t>(0.0));

  impl.eventfds.assign(geometry.worker_slots, -1);
  for (uint32_t s = 0; s < geometry.worker_slots; ++s) {
    const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "shm: eventfd");
    impl.eventfds[s] = fd;
  }
  return segment;
}

const Geometry& Segment::geometry() const {
  return impl_->geometry;
}
size_t Segment::bytes() const {
  return impl_->region.get_size();
}

// ---------------------------------------------------------------- semaphores
namespace {

template <typename Sum>
bool acquireCounted(std::atomic<int64_t>& own, Sum&& sum, const std::atomic<int64_t>* cap, int64_t fixed_cap,
                    bool& room_left) {
  room_left = false;
  for (int attempt = 0; attempt < kAcquireTries; ++attempt) {
    own.fetch_add(1, std::memory_order_seq_cst);
    const int64_t total = sum();
    const int64_t limit = cap ? cap->load(std::memory_order_seq_cst) : fixed_cap;
    if (total <= limit) return true;
    own.fetch_sub(1, std::memory_order_seq_cst);
    // Without our reservation: if the others alone fill the cap, it is full.
    const int64_t others = sum();
    if (others >= limit) return false;
    room_left = true;
    for (int i = 0; i <= attempt; ++i) cpuRelax();
  }
  return false;
}

}  // namespace

int64_t SegmentCore::sumPage() const {
  int64_t total = 0;
  for (uint32_t s = 0; s < geometry.worker_slots; ++s) total += layout.slots[s].page.load(std::memory_order_seq_cst);
  return total;
}

int64_t SegmentCore::sumAsset() const {
  int64_t total = 0;
  for (uint32_t s = 0; s < geometry.worker_slots; ++s) total += layout.slots[s].asset.load(std::memory_order_seq_cst);
  return total;
}

void SegmentCore::updateUtilization() {
  const int64_t cap = layout.header->page_cap.load(std::memory_order_relaxed);
  int64_t occupancy = sumPage();
  if (occupancy < 0) occupancy = 0;
  double sample = cap > 0 ? static_cast<double>(occupancy) / static_cast<double>(cap) : 0.0;
  if (sample > 1.0) sample = 1.0;
  std::atomic<uint64_t>& bits = layout.header->utilization;
  uint64_t old = bits.load(std::memory_order_relaxed);
  for (;;) {
    const double current = std::bit_cast<double>(old);
    const double next = current + 0.1 * (sample - current);
    if (bits.compare_exchange_weak(old, std::bit_cast<uint64_t>(next), std::memory_order_relaxed)) return;
  }
}

bool Segment::tryAcquirePage(WorkerSlot slot) {
  Impl& impl = *impl_;
  bool room_left = false;
  const bool ok = acquireCounted(
      impl.layout.slots[slot].page, [&impl] { return impl.sumPage(); }, &impl.layout.header->page_cap, 0, room_left);
  if (ok) {
    impl.updateUtilization();
  } else if (room_left) {
    wake(Resource::PageSlot);
  }
  return ok;
}

void Segment::releasePage(WorkerSlot slot) {
  impl_->layout.slots[slot].page.fetch_sub(1, std::memory_order_seq_cst);
  impl_->updateUtilization();
  wake(Resource::PageSlot);
}

int32_t Segment::pageCap() const {
  return static_cast<int32_t>(impl_->layout.header->page_cap.load(std::memory_order_seq_cst));
}

void Segment::setPageCap(int32_t cap) {
  if (cap < 1) cap = 1;
  const int64_t old = impl_->layout.header->page_cap.exchange(cap, std::memory_order_seq_cst);
  // A wider window also makes waiting tickets ready; they learn it on their
  // next poll. Parked requests retry at once.
  if (cap > old) wake(Resource::PageSlot);
}

int64_t Segment::pageOccupancy() const {
  const int64_t total = impl_->sumPage();
  return total < 0 ? 0 : total;
}

int32_t Segment::configuredPageCap() const {
  return static_cast<int32_t>(impl_->layout.header->configured_page_cap.load(std::memory_order_seq_cst));
}

void Segment::setConfiguredPageCap(int32_t cap) {
  impl_->layout.header->configured_page_cap.store(cap, std::memory_order_seq_cst);
}

bool Segment::tryAcquireAsset(WorkerSlot slot) {
  Impl& impl = *impl_;
  bool room_left = false;
  const bool ok = acquireCounted(
      impl.layout.slots[slot].asset, [&impl] { return impl.sumAsset(); }, nullptr, impl.layout.header->asset_cap,
      room_left);
  if (!ok && room_left) wake(Resource::AssetSlot);
  return ok;
}

void Segment::releaseAsset(WorkerSlot slot) {
  impl_->layout.slots[slot].asset.fetch_sub(1, std::memory_order_seq_cst);
  wake(Resource::AssetSlot);
}

int32_t Segment::assetCap() const {
  return static_cast<int32_t>(impl_->layout.header->asset_cap);
}

int64_t Segment::assetInFlight() const {
  const int64_t total = impl_->sumAsset();
  return total < 0 ? 0 : total;
}

// ---------------------------------------------------------------- wake-ups
int Segment::eventFd(WorkerSlot slot) const {
  return impl_->eventfds[slot];
}

void Segment::setWaiting(WorkerSlot slot, Resource r, bool waiting) {
  const uint32_t bit = 1u << static_cast<uint32_t>(r);
  std::atomic<uint32_t>& mask = impl_->layout.slots[slot].waiting_mask;
  if (waiting) {
    mask.fetch_or(bit, std::memory_order_seq_cst);
  } else {
    mask.fetch_and(~bit, std::memory_order_seq_cst);
  }
}

void Segment::setLocalWake(WorkerSlot slot, void (*fn)(void*), void* arg) {
  impl_->local_slot = slot;
  impl_->local_wake = fn;
  impl_->local_wake_arg = arg;
}

void Segment::wakeConsumed(WorkerSlot slot) {
  impl_->layout.slots[slot].wake_pending.store(0, std::memory_order_seq_cst);
}

void Segment::wake(Resource r) {
  const uint32_t bit = 1u << static_cast<uint32_t>(r);
  const Impl& impl = *impl_;
  for (uint32_t s = 0; s < impl.geometry.worker_slots; ++s) {
    if ((impl.layout.slots[s].waiting_mask.load(std::memory_order_seq_cst) & bit) == 0) continue;
    if (s == impl.local_slot && impl.local_wake) {
      impl.local_wake(impl.local_wake_arg);
      continue;
    }
    // One write until the worker reads: it clears the flag before reading
    // the eventfd, so a wake-up after that read writes again.
    if (impl.layout.slots[s].wake_pending.exchange(1, std::memory_order_seq_cst) != 0) continue;
    const uint64_t one = 1;
    // EAGAIN means the counter is already huge: the worker is woken anyway.
    ssize_t n;
    do {
      n = write(impl.eventfds[s], &one, sizeof(one));
    } while (n < 0 && errno == EINTR);
  }
}

// ---------------------------------------------------------------- worker slots
void Segment::slotStarted(WorkerSlot slot, int pid, uint32_t generation, Millis now) {
  // The ledger (page / asset counters, waiting mask) is already zero: the
  // segment starts that way and reclaimDeadWorker zeroes it before a slot is
  // reused. It must not be reset here: the master calls this after fork(),
  // when the new worker may already hold a slot.
  SlotRecord& record = impl_->layout.slots[slot];
  record.heartbeat.store(now, std::memory_order_seq_cst);
  record.generation.store(generation, std::memory_order_seq_cst);
  record.pid.store(pid, std::memory_order_seq_cst);
}

void Segment::heartbeat(WorkerSlot slot, Millis now) {
  impl_->layout.slots[slot].heartbeat.store(now, std::memory_order_relaxed);
}

Millis Segment::lastHeartbeat(WorkerSlot slot) const {
  return impl_->layout.slots[slot].heartbeat.load(std::memory_order_relaxed);
}

int Segment::slotPid(WorkerSlot slot) const {
  return static_cast<int>(impl_->layout.slots[slot].pid.load(std::memory_order_seq_cst));
}

uint32_t Segment::slotGeneration(WorkerSlot slot) const {
  return impl_->layout.slots[slot].generation.load(std::memory_order_seq_cst);
}

ReclaimReport Segment::reclaimDeadWorker(WorkerSlot slot) {
  Impl& impl = *impl_;
  SlotRecord& record = impl.layout.slots[slot];
  ReclaimReport report;
  report.page_slots = record.page.exchange(0, std::memory_order_seq_cst);
  report.asset_slots = record.asset.exchange(0, std::memory_order_seq_cst);
  report.tickets_finished = impl.reclaimTickets(slot);
  report.pass_holds = impl.reclaimPasses(slot);
  record.waiting_mask.store(0, std::memory_order_seq_cst);
  record.wake_pending.store(0, std::memory_order_seq_cst);
  // A wake-up meant for the dead worker must not reach the slot's next one.
  uint64_t drained;
  while (read(impl.eventfds[slot], &drained, sizeof(drained)) > 0) {
  }
  record.pid.store(0, std::memory_order_seq_cst);
  const int64_t total = report.total();
  if (total > 0) impl.counter(Counter::SlotsReclaimedTotal).fetch_add(static_cast<uint64_t>(total));
  impl.updateUtilization();
  wake(Resource::PageSlot);
  wake(Resource::AssetSlot);
  wake(Resource::PassSlot);
  return report;
}

// ---------------------------------------------------------------- stats
uint32_t Segment::generation() const {
  return impl_->layout.header->generation.load(std::memory_order_seq_cst);
}

void Segment::setGeneration(uint32_t generation) {
  impl_->layout.header->generation.store(generation, std::memory_order_seq_cst);
}

void Segment::count(Counter c, uint64_t n) {
  impl_->counter(c).fetch_add(n, std::memory_order_relaxed);
}

double Segment::utilization() const {
  return loadDouble(impl_->layout.header->utilization);
}

StatsSnapshot Segment::snapshot() const {
  const Impl& impl = *impl_;
  StatsSnapshot s;
  s.cap = pageCap();
  s.occupancy = pageOccupancy();
  s.queue_depth = queueDepth();
  s.live_queue_depth = liveQueueDepth();
  s.utilization = loadDouble(impl.layout.header->utilization);
  auto get = [&impl](Counter c) { return impl.counter(c).load(std::memory_order_relaxed); };
  s.queued_total = get(Counter::QueuedTotal);
  s.evicted_total = get(Counter::EvictedTotal);
  s.timeouts_total = get(Counter::TimeoutsTotal);
  s.promoted_total = get(Counter::PromotedTotal);
  s.asset_cap = assetCap();
  s.asset_in_flight = assetInFlight();
  s.asset_users = passUsers();
  s.asset_served_total = get(Counter::AssetServedTotal);
  s.asset_denied_total = get(Counter::AssetDeniedTotal);
  s.asset_user_throttled_total = get(Counter::AssetUserThrottledTotal);
  s.asset_global_throttled_total = get(Counter::AssetGlobalThrottledTotal);
  s.ring_full_total = get(Counter::RingFullTotal);
  s.pass_table_full_total = get(Counter::PassTableFullTotal);
  uint32_t workers = 0;
  for (uint32_t slot = 0; slot < impl.geometry.worker_slots; ++slot)
    if (impl.layout.slots[slot].pid.load(std::memory_order_relaxed) != 0) ++workers;
  s.workers = workers;
  s.generation = generation();
  s.reloads_total = get(Counter::ReloadsTotal);
  s.worker_restarts_total = get(Counter::WorkerRestartsTotal);
  s.slots_reclaimed_total = get(Counter::SlotsReclaimedTotal);
  return s;
}

}  // namespace concert::shm
