// Stats: the counters (counters.h), the generation and the read-only
// snapshot of every counter and gauge (gauges.h) behind /_room/stats and
// /_room/metrics.
//
// States and writers (Header, layout.h): each counter only grows, by anyone
// (fetch_add, relaxed); generation is written by the master (start-up and
// each reload); the smoothed utilization word is written by the page
// semaphore (semaphore.h) and only read here. snapshot() reads every other
// subsystem and writes nothing.
//
// A SIGKILL leaves every word valid: an increment or a store is one atomic
// instruction. A worker killed before it counted something simply never
// counted it; nothing here names a slot, so nothing needs reclaiming.
#pragma once

#include <cstdint>

#include "shm/types.h"

namespace concert::shm {

class Clients;
class ClusterLine;
class Layout;
class TicketRing;
class PageSemaphore;
class Semaphore;
class PassTable;
class WorkerSlots;

class Stats {
 public:
  Stats(const Stats&) = delete;
  Stats& operator=(const Stats&) = delete;

  void count(Counter c, uint64_t n = 1);
  // Every counter and every Room and Cluster gauge at once (scans the
  // ticket bitmaps' tops, the slot table, the pass table and, while any ban
  // may be in force, the client table); the Setting gauges are left 0 (the
  // segment does not hold the configuration). banned_clients is counted at
  // `now`.
  StatsSnapshot snapshot(Millis now) const;
  StatsSnapshot snapshot() const;  // at monotonicMs()
  // The smoothed page utilization alone (one load).
  double utilization() const;

  uint32_t generation() const;
  void setGeneration(uint32_t generation);  // master

 private:
  friend class Segment;
  Stats(Layout& layout, const TicketRing& tickets, const ClusterLine& cluster, const PageSemaphore& pages, const Semaphore& assets,
        const Semaphore& long_lived, const PassTable& passes, const Clients& clients, const WorkerSlots& slots);

  Layout* layout_;
  const TicketRing* tickets_;
  const ClusterLine* cluster_;
  const PageSemaphore* pages_;
  const Semaphore* assets_;
  const Semaphore* long_lived_;
  const PassTable* passes_;
  const Clients* clients_;
  const WorkerSlots* slots_;
};

}  // namespace concert::shm
