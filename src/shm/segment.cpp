// Segment creation and carving, the subsystem handles, and dead-worker
// reclamation. Each subsystem's code is in its own file (tickets.cpp,
// semaphore.cpp, pass_table.cpp, revocations.cpp, clients.cpp,
// worker_slots.cpp, stats.cpp).
//
// States: the segment exists from create() (master, before any fork) until
// the last process that mapped it exits; it is anonymous, so nothing of it
// outlives Concert. create() writes the whole header and the slot table
// once; from then on every word is written only as its subsystem says.
//
// A SIGKILLed worker leaves its holds behind in the words that name its
// slot; reclaimDeadWorker() runs each subsystem's reclaim(slot), which
// returns exactly those. A SIGKILLed master leaves the workers running on
// the segment until they drain (PR_SET_PDEATHSIG); the mapping goes with
// the last process that has it.
#include "shm/segment.h"

#include <bit>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <cerrno>
#include <cstring>
#include <cinttypes>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>

#include "shm/layout.h"

namespace concert::shm {

namespace {

size_t alignUp(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

uint64_t nextPowerOfTwo(uint64_t n) {
  return n <= 1 ? 1 : std::bit_ceil(n);
}

bool validGeometry(const Geometry& g) {
  return g.ring_size >= 64 && std::has_single_bit(g.ring_size) && g.worker_slots >= 1 &&
         g.worker_slots <= kMaxWorkerSlots && g.pass_table_size >= 1 && std::has_single_bit(g.pass_table_size) &&
         g.revocation_table_size >= 1 && std::has_single_bit(g.revocation_table_size) && g.client_table_size >= 1 &&
         std::has_single_bit(g.client_table_size) && g.client_table_size <= kMaxClientTable;
}

struct Offsets {
  size_t slots, entries, cookie_sent, issued_at, waiting, returned, missed, out, pass_state, pass_id, pass_last_used, pass_cells,
      pass_locks, revocations, clients, client_tags, history, cluster, total;
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
  o.issued_at = take(sizeof(uint32_t) * g.ring_size);
  o.waiting = take(CountedBits::bytesFor(g.ring_size));
  o.returned = take(CountedBits::bytesFor(g.ring_size));
  o.missed = take(CountedBits::bytesFor(g.ring_size));
  o.out = take(CountedBits::bytesFor(g.ring_size));
  o.pass_state = take(sizeof(uint64_t) * g.pass_table_size);
  o.pass_id = take(sizeof(uint64_t) * 2 * g.pass_table_size);
  o.pass_last_used = take(sizeof(int64_t) * g.pass_table_size);
  o.pass_cells = take(sizeof(uint32_t) * 2 * size_t{g.worker_slots} * g.pass_table_size);
  o.pass_locks = take(sizeof(uint32_t) * g.pass_table_size);
  o.revocations = take(sizeof(RevocationEntry) * g.revocation_table_size);
  o.clients = take(sizeof(ClientEntry) * g.client_table_size);
  o.client_tags = take(sizeof(uint32_t) * g.ring_size);
  o.history = take(sizeof(HistoryRing));
  o.cluster = take(sizeof(ClusterArea));
  o.total = at;
  return o;
}

// An open descriptor as Boost.Interprocess maps it (its MemoryMappable:
// the handle and the mode).
struct DescriptorMapping {
  int fd;
  boost::interprocess::mapping_handle_t get_mapping_handle() const {
    return boost::interprocess::ipcdetail::mapping_handle_from_file_handle(fd);
  }
  boost::interprocess::mode_t get_mode() const { return boost::interprocess::read_write; }
};

// The geometry a header records.
Geometry geometryOf(const Header& h) {
  Geometry g;
  g.ring_size = h.ring_size;
  g.worker_slots = h.worker_slots;
  g.pass_table_size = h.pass_table_size;
  g.revocation_table_size = h.revocation_table_size;
  g.client_table_size = h.client_table_size;
  return g;
}

// This boot's id (/proc/sys/kernel/random/boot_id, a UUID) as two words;
// zeros when it cannot be read.
void readBootId(uint64_t out[2]) {
  out[0] = out[1] = 0;
  int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char text[64] = {};
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  int digits = 0;
  for (ssize_t i = 0; i < n && digits < 32; ++i) {
    const char c = text[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) continue;
    out[digits / 16] = out[digits / 16] << 4 | static_cast<uint64_t>(v);
    ++digits;
  }
}

}  // namespace

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
  constexpr uint32_t kMinRevocations = 1u << 12;
  g.revocation_table_size = g.pass_table_size > kMinRevocations ? g.pass_table_size : kMinRevocations;
  constexpr uint64_t kMinClients = uint64_t{1} << 12;
  uint64_t clients = nextPowerOfTwo(ring / 4);
  if (clients < kMinClients) clients = kMinClients;
  if (clients > kMaxClientTable) clients = kMaxClientTable;
  g.client_table_size = static_cast<uint32_t>(clients);
  return g;
}

// ---------------------------------------------------------------- lifecycle
struct Segment::Mapping {
  int fd = -1;
  boost::interprocess::mapped_region region;
  Layout layout;
  ~Mapping() {
    if (fd >= 0) ::close(fd);
  }
};

Segment::Segment(std::unique_ptr<Mapping> mapping, std::vector<int> eventfds)
    : mapping_(std::move(mapping)),
      slots_(mapping_->layout, std::move(eventfds)),
      pages_(mapping_->layout, slots_),
      assets_(mapping_->layout, slots_, &SlotRecord::asset, &Header::asset_cap, Resource::AssetSlot, nullptr, "asset"),
      long_lived_(mapping_->layout, slots_, &SlotRecord::long_lived, &Header::long_lived_cap, Resource::LongLivedSlot,
                  nullptr, "long-lived"),
      sessions_(mapping_->layout, slots_),
      clients_(mapping_->layout, slots_),
      line_rate_(mapping_->layout, slots_),
      modes_(mapping_->layout, slots_),
      sale_(mapping_->layout, slots_),
      admit_rate_(mapping_->layout, slots_),
      tickets_(mapping_->layout, slots_, pages_, clients_, line_rate_),
      cluster_(mapping_->layout, slots_, pages_, line_rate_),
      passes_(mapping_->layout, slots_),
      histograms_(mapping_->layout, slots_),
      history_(mapping_->layout, slots_),
      revocations_(mapping_->layout, slots_),
      once_(mapping_->layout, slots_),
      capacity_(mapping_->layout, slots_),
      stats_(mapping_->layout, tickets_, cluster_, pages_, assets_, long_lived_, passes_, clients_, slots_) {}

Segment::~Segment() = default;

// Maps `bytes` of `fd` shared and read-write and points a Layout at the
// carving of `geometry`. The mapping keeps fd. The descriptor itself is
// mapped, never its file opened again by name: a worker that dropped its
// privileges maps a segment handed to it that it could not open.
std::unique_ptr<Segment::Mapping> Segment::map(int fd, const Geometry& geometry, size_t bytes) {
  auto mapping = std::make_unique<Mapping>();
  mapping->fd = fd;
  mapping->region = boost::interprocess::mapped_region(DescriptorMapping{fd}, boost::interprocess::read_write, 0, bytes);
  const Offsets off = carve(geometry);
  Layout& l = mapping->layout;
  l.geometry = geometry;
  l.ring_mask = geometry.ring_size - 1;
  l.pass_mask = geometry.pass_table_size - 1;
  l.revocation_mask = geometry.revocation_table_size - 1;
  l.client_mask = geometry.client_table_size - 1;
  l.ring_bits = static_cast<uint32_t>(std::countr_zero(geometry.ring_size));
  auto* base = static_cast<unsigned char*>(mapping->region.get_address());
  l.header = reinterpret_cast<Header*>(base);
  l.slots = reinterpret_cast<SlotRecord*>(base + off.slots);
  l.entries = reinterpret_cast<TicketEntry*>(base + off.entries);
  l.cookie_sent = reinterpret_cast<std::atomic<uint32_t>*>(base + off.cookie_sent);
  l.issued_at = reinterpret_cast<std::atomic<uint32_t>*>(base + off.issued_at);
  l.waiting.attach(base + off.waiting, geometry.ring_size);
  l.returned.attach(base + off.returned, geometry.ring_size);
  l.missed.attach(base + off.missed, geometry.ring_size);
  l.out.attach(base + off.out, geometry.ring_size);
  l.pass_state = reinterpret_cast<std::atomic<uint64_t>*>(base + off.pass_state);
  l.pass_id = reinterpret_cast<std::atomic<uint64_t>*>(base + off.pass_id);
  l.pass_last_used = reinterpret_cast<std::atomic<int64_t>*>(base + off.pass_last_used);
  l.pass_cells = reinterpret_cast<std::atomic<uint32_t>*>(base + off.pass_cells);
  l.pass_locks = reinterpret_cast<std::atomic<uint32_t>*>(base + off.pass_locks);
  l.revocations = reinterpret_cast<RevocationEntry*>(base + off.revocations);
  l.clients = reinterpret_cast<ClientEntry*>(base + off.clients);
  l.client_tags = reinterpret_cast<std::atomic<uint32_t>*>(base + off.client_tags);
  l.history = reinterpret_cast<HistoryRing*>(base + off.history);
  l.cluster = reinterpret_cast<ClusterArea*>(base + off.cluster);
  return mapping;
}

std::unique_ptr<Segment> Segment::create(const Geometry& geometry, int32_t page_cap, int32_t asset_cap,
                                         int32_t long_lived_cap, int fd) {
  if (fd < 0) fd = memfd_create("concert-segment", MFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
  auto closeFd = [fd] { ::close(fd); };
  if (!validGeometry(geometry)) {
    closeFd();
    throw std::invalid_argument("shm: invalid segment geometry");
  }
  if (page_cap < 1 || asset_cap < 1 || long_lived_cap < 1) {
    closeFd();
    throw std::invalid_argument("shm: caps must be >= 1");
  }
  const Offsets off = carve(geometry);
  // Emptied first: a file that held an older segment must read as zeros.
  if (::ftruncate(fd, 0) != 0 || ::ftruncate(fd, static_cast<off_t>(off.total)) != 0) {
    const int error = errno;
    closeFd();
    throw std::runtime_error(std::string("sizing the segment: ") + std::strerror(error));
  }
  std::unique_ptr<Mapping> mapping = map(fd, geometry, off.total);
  Layout& l = mapping->layout;
  new (l.header) Header();
  for (uint32_t s = 0; s < geometry.worker_slots; ++s) new (&l.slots[s]) SlotRecord();

  Header& h = *l.header;
  h.magic = kMagic;
  h.layout_version = kLayoutVersion;
  h.ring_size = geometry.ring_size;
  h.total_bytes = off.total;
  h.worker_slots = geometry.worker_slots;
  h.pass_table_size = geometry.pass_table_size;
  h.revocation_table_size = geometry.revocation_table_size;
  h.client_table_size = geometry.client_table_size;
  readBootId(h.boot_id);
  h.asset_cap.store(asset_cap);
  h.long_lived_cap.store(long_lived_cap);
  h.page_cap.store(page_cap);
  h.configured_page_cap.store(page_cap);
  h.generation.store(0);
  h.next_ticket.store(1);
  h.low_water.store(1);
  h.utilization.store(std::bit_cast<uint64_t>(0.0));
  h.ban_horizon.store(0);
  h.line_admitted.store(0);
  h.pace.estimate.store(0);
  h.pace.bucket.store(0);
  h.pace.bucket_cap.store(page_cap);
  h.pace.last_pass.store(kNeverPassed);
  h.pace.last_admitted.store(0);
  h.pace.last_depth.store(0);
  h.room.mode.store(static_cast<uint32_t>(RoomMode::Open));
  h.room.configured_mode.store(static_cast<uint32_t>(RoomMode::Open));
  h.room.rate_interval.store(0);
  h.room.rate_burst.store(1);
  h.room.rate_tat.store(0);

  checkHeader(l.header, off.total);  // the header just written reads back as this binary's

  // The handles (WorkerSlots creates the eventfds) are made last, over the
  // finished layout.
  return std::unique_ptr<Segment>(new Segment(std::move(mapping), {}));
}

std::unique_ptr<Segment> Segment::attach(int fd, std::vector<int> eventfds) {
  auto refuse = [&](const std::string& why) {
    ::close(fd);
    for (int e : eventfds)
      if (e >= 0) ::close(e);
    throw std::runtime_error(why);
  };
  FileHeader file;
  try {
    file = checkFile(fd);
  } catch (const std::exception& e) {
    refuse(e.what());
  }
  std::unique_ptr<Mapping> mapping = map(fd, file.geometry, file.bytes);
  return std::unique_ptr<Segment>(new Segment(std::move(mapping), std::move(eventfds)));
}

Layout& Segment::view() {
  return mapping_->layout;
}

const Layout& Segment::view() const {
  return mapping_->layout;
}

void Segment::adopt(std::unique_ptr<Mapping> fresh) {
  if (fresh->layout.geometry.worker_slots != mapping_->layout.geometry.worker_slots)
    throw std::runtime_error("a segment grown in place keeps its worker slots");
  // Every handle points at mapping_->layout: the new view is copied into it,
  // and the old mapping goes with `fresh`.
  std::swap(mapping_->region, fresh->region);
  std::swap(mapping_->fd, fresh->fd);
  mapping_->layout = fresh->layout;
}

void Segment::moveTo(std::unique_ptr<Segment> grown) {
  adopt(std::move(grown->mapping_));
}

void Segment::moveTo(int fd) {
  FileHeader file;
  try {
    file = checkFile(fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
  adopt(map(fd, file.geometry, file.bytes));
}

Segment::FileHeader Segment::checkFile(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw std::runtime_error(std::string("fstat: ") + std::strerror(errno));
  FileHeader file;
  file.bytes = static_cast<size_t>(st.st_size);
  Header header;
  if (file.bytes < sizeof(Header) || ::pread(fd, &header, sizeof header, 0) != static_cast<ssize_t>(sizeof header))
    throw std::runtime_error("the segment is " + std::to_string(file.bytes) + " bytes, too small for its header (" +
                             std::to_string(sizeof(Header)) + " bytes)");
  checkHeader(&header, sizeof header, file.bytes);
  file.geometry = geometryOf(header);
  return file;
}

int Segment::fd() const {
  return mapping_->fd;
}

bool Segment::thisBoot() const {
  uint64_t now[2];
  readBootId(now);
  const Header& h = *mapping_->layout.header;
  return now[0] == h.boot_id[0] && now[1] == h.boot_id[1];
}

Segment::Recovered Segment::recover(bool (*alive)(int pid), Millis now, Millis silent_limit,
                                    Millis quarantine_until) {
  Recovered out;
  for (WorkerSlot slot = 0; slot < mapping_->layout.geometry.worker_slots; ++slot) {
    const int pid = slots_.pid(slot);
    if (pid == 0) continue;
    // A pid taken again by another process: a worker that fell silent.
    if (alive(pid) && now - slots_.lastHeartbeat(slot) <= silent_limit) {
      out.draining.push_back(slot);
      continue;
    }
    const ReclaimReport r = reclaimDeadWorker(slot, quarantine_until);
    out.reclaimed.quarantined += r.quarantined;
    out.reclaimed.page_slots += r.page_slots;
    out.reclaimed.asset_slots += r.asset_slots;
    out.reclaimed.long_lived_slots += r.long_lived_slots;
    out.reclaimed.tickets_finished += r.tickets_finished;
    out.reclaimed.pass_holds += r.pass_holds;
    out.reclaimed.revocation_writes += r.revocation_writes;
    out.reclaimed.client_writes += r.client_writes;
    ++out.slots_reclaimed;
  }
  // What the previous master's janitor left half done: a pass it was
  // evicting, a pre-queue block it was opening.
  static_cast<Handle&>(passes_).reclaim(kOwnerMaster);
  static_cast<Handle&>(tickets_).reclaim(kOwnerMaster);
  tickets_.resync();
  return out;
}

// ---------------------------------------------------------------- header check
void Segment::checkHeader(const void* address, size_t bytes) {
  checkHeader(address, bytes, bytes);
}

void Segment::checkHeader(const void* address, size_t readable, size_t bytes) {
  char where[64];
  std::snprintf(where, sizeof where, "shared segment at %p", address);
  auto refuse = [&where](const std::string& what) { throw std::runtime_error(where + (" " + what)); };
  if (address == nullptr || readable < sizeof(Header) || bytes < sizeof(Header))
    refuse("is " + std::to_string(bytes) + " bytes, too small for its header (" + std::to_string(sizeof(Header)) +
           " bytes)");
  const Header& h = *static_cast<const Header*>(address);
  if (h.magic != kMagic) {
    char magic[96];
    std::snprintf(magic, sizeof magic, "has magic 0x%016" PRIx64 ", this binary expects 0x%016" PRIx64, h.magic,
                  kMagic);
    refuse(std::string(magic) + ": not a Concert segment");
  }
  if (h.layout_version != kLayoutVersion)
    refuse("has layout version " + std::to_string(h.layout_version) + ", this binary expects " +
           std::to_string(kLayoutVersion));
  const Geometry g = geometryOf(h);
  if (!validGeometry(g))
    refuse("has an invalid geometry (ring " + std::to_string(g.ring_size) + ", worker slots " +
           std::to_string(g.worker_slots) + ", pass table " + std::to_string(g.pass_table_size) + ", revocations " +
           std::to_string(g.revocation_table_size) + ", clients " + std::to_string(g.client_table_size) + ")");
  const size_t carved = carve(g).total;
  if (h.total_bytes != carved)
    refuse("says it is " + std::to_string(h.total_bytes) + " bytes, this binary carves its geometry into " +
           std::to_string(carved));
  if (bytes != carved)
    refuse("is " + std::to_string(bytes) + " bytes mapped, its header says " + std::to_string(h.total_bytes));
}

void Segment::setLongLivedCap(int32_t cap) {
  if (cap >= 1) mapping_->layout.header->long_lived_cap.store(cap, std::memory_order_seq_cst);
}

const Geometry& Segment::geometry() const {
  return mapping_->layout.geometry;
}

size_t Segment::bytes() const {
  return mapping_->layout.header->total_bytes;
}

void* Segment::address() {
  return mapping_->region.get_address();
}

const void* Segment::address() const {
  return mapping_->region.get_address();
}

// ---------------------------------------------------------------- strikes
StrikeOutcome Segment::strike(const uint8_t key[16], int weight, const AbusePolicy& policy, Millis now,
                              WorkerSlot slot) {
  uint32_t index = Clients::kNone;
  StrikeOutcome out = clients_.strike(key, weight, policy, now, slot, &index);
  if (out.banned_now) out.tickets_retired = tickets_.retireClient(index);
  return out;
}

// ---------------------------------------------------------------- reclaim
ReclaimReport Segment::reclaimDeadWorker(WorkerSlot slot, Millis quarantine_until) {
  auto reclaim = [slot](Handle& part) { return part.reclaim(slot); };
  ReclaimReport report;
  if (quarantine_until > 0) {
    // Into quarantine before they leave the slot's counter: the occupancy
    // never dips in between.
    report.quarantined = pages_.held(slot);
    pages_.quarantine(report.quarantined, quarantine_until);
  }
  report.page_slots = reclaim(pages_);
  report.asset_slots = reclaim(assets_);
  report.long_lived_slots = reclaim(long_lived_);
  reclaim(sessions_);
  report.tickets_finished = reclaim(tickets_);
  report.pass_holds = reclaim(passes_);
  report.revocation_writes = reclaim(revocations_);
  report.client_writes = reclaim(clients_);
  slots_.reclaim(slot);  // last: the slot is free once everything it held is back
  const int64_t total = report.total();
  if (total > 0) stats_.count(Counter::SlotsReclaimedTotal, static_cast<uint64_t>(total));
  slots_.wake(Resource::PageSlot);
  slots_.wake(Resource::AssetSlot);
  slots_.wake(Resource::PassSlot);
  return report;
}

}  // namespace concert::shm
