// SegmentCore (Segment::Impl): the process-local view of the carved segment (raw pointers
// into the mapping, identical in every forked process) plus the helpers the
// ticket ring, semaphores and pass table share. Private to src/shm.
#pragma once

#include <boost/interprocess/mapped_region.hpp>
#include <vector>

#include "shm/counted_bits.h"
#include "shm/layout.h"
#include "shm/segment.h"

namespace concert::shm {

class Layout {
 public:
  Header* header = nullptr;
  SlotRecord* slots = nullptr;
  TicketEntry* entries = nullptr;
  std::atomic<uint32_t>* cookie_sent = nullptr;  // per ring entry, ms (32-bit)
  CountedBits waiting;                           // bit i: entry i is Waiting
  CountedBits finished;                          // bit i: entry i is Finished
  std::atomic<uint64_t>* pass_state = nullptr;   // PassState word per entry
  std::atomic<uint64_t>* pass_id = nullptr;      // two words per entry
  std::atomic<int64_t>* pass_last_used = nullptr;
  std::atomic<uint32_t>* pass_cells = nullptr;  // [entry][slot][proto]
  std::atomic<uint32_t>* pass_locks = nullptr;  // home-bucket creation locks: owner slot + 1, 0 = free
};

// Everything but the name of Segment::Impl, so that file-local helpers can
// take it (Segment::Impl itself is private to Segment).
struct SegmentCore {
  boost::interprocess::mapped_region region;
  Geometry geometry;
  Layout layout;
  uint64_t ring_mask = 0;
  uint32_t pass_mask = 0;
  std::vector<int> eventfds;
  // This process's own worker slot: a wake-up for it runs `local_wake`
  // instead of writing its eventfd (no system call to wake oneself).
  uint32_t local_slot = UINT32_MAX;
  void (*local_wake)(void*) = nullptr;
  void* local_wake_arg = nullptr;

  TicketEntry& entry(uint64_t ticket) const { return layout.entries[ticket & ring_mask]; }
  uint32_t index(uint64_t ticket) const { return static_cast<uint32_t>(ticket & ring_mask); }
  std::atomic<uint64_t>& counter(Counter c) const { return layout.header->counters[static_cast<size_t>(c)].value; }

  // Tickets.
  void syncBits(uint32_t index);
  void advanceLowWater();
  void helpNextTicket();
  uint64_t unfinishedBefore(uint64_t ticket) const;  // unfinished tickets in [low_water, ticket)
  bool casEntry(uint64_t ticket, uint64_t& expected, uint64_t desired);
  int64_t reclaimTickets(WorkerSlot slot);  // master, slot's process is dead

  // Semaphores.
  int64_t sumPage() const;
  int64_t sumAsset() const;
  void updateUtilization();

  // Pass table.
  int64_t reclaimPasses(WorkerSlot slot);  // master, slot's process is dead
  std::atomic<uint32_t>& passCell(uint32_t index, WorkerSlot slot, PassProto proto) const {
    return layout
        .pass_cells[(static_cast<size_t>(index) * geometry.worker_slots + slot) * 2 + static_cast<size_t>(proto)];
  }
};

// Small helpers shared by the .cpp files of src/shm.
inline uint32_t low32(Millis ms) {
  return static_cast<uint32_t>(static_cast<uint64_t>(ms));
}
inline int64_t elapsed32(Millis now, uint32_t then) {
  return static_cast<int32_t>(low32(now) - then);
}
void cpuRelax();

struct Segment::Impl : SegmentCore {};

}  // namespace concert::shm
