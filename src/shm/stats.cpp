// Counters, generation and the stats snapshot; see stats.h.
#include "shm/stats.h"

#include <bit>

#include "shm/clients.h"
#include "shm/cluster.h"
#include "shm/layout.h"
#include "shm/pass_table.h"
#include "shm/semaphore.h"
#include "shm/tickets.h"
#include "shm/worker_slots.h"

namespace concert::shm {

Stats::Stats(Layout& layout, const TicketRing& tickets, const ClusterLine& cluster, const PageSemaphore& pages, const Semaphore& assets,
             const Semaphore& long_lived, const PassTable& passes, const Clients& clients, const WorkerSlots& slots)
    : layout_(&layout),
      tickets_(&tickets),
      cluster_(&cluster),
      pages_(&pages),
      assets_(&assets),
      long_lived_(&long_lived),
      passes_(&passes),
      clients_(&clients),
      slots_(&slots) {}

void Stats::count(Counter c, uint64_t n) {
  layout_->counter(c).fetch_add(n, std::memory_order_relaxed);
}

double Stats::utilization() const {
  return std::bit_cast<double>(layout_->header->utilization.load(std::memory_order_relaxed));
}

uint32_t Stats::generation() const {
  return layout_->header->generation.load(std::memory_order_seq_cst);
}

void Stats::setGeneration(uint32_t generation) {
  layout_->header->generation.store(generation, std::memory_order_seq_cst);
}

StatsSnapshot Stats::snapshot() const {
  return snapshot(monotonicMs());
}

// Every Room and Cluster gauge of gauges.h; the Setting ones stay 0.
StatsSnapshot Stats::snapshot(Millis now) const {
  StatsSnapshot s;
  const bool cluster = cluster_->enabled();
  const Line& line = cluster ? static_cast<const Line&>(*cluster_) : *tickets_;
  s.cap = cluster ? cluster_->cap() : pages_->cap();
  s.occupancy = pages_->occupancy();
  s.queue_depth = line.queueDepth();
  s.live_queue_depth = line.liveQueueDepth();
  if (cluster) {
    s.cluster = true;
    s.cluster_engine_up = cluster_->state() == ClusterState::Up;
    s.cluster_hosts = cluster_->hosts();
    s.cluster_slots_reserved = pages_->cap();
  }
  s.utilization = utilization();
  s.asset_cap = assets_->cap();
  s.asset_in_flight = assets_->occupancy();
  s.asset_users = passes_->users();
  s.long_lived_cap = long_lived_->cap();
  s.long_lived_in_use = long_lived_->occupancy();
  s.workers = slots_->running();
  s.generation = generation();
  s.banned_clients = clients_->bannedCount(now);
  const CapacityCells& capacity = layout_->header->capacity;
  s.adaptive_active = capacity.adaptive_active.load(std::memory_order_relaxed) != 0;
  s.adaptive_base_latency = capacity.base_latency_us.load(std::memory_order_relaxed) / 1000;
  s.adaptive_origin_queue = static_cast<double>(capacity.origin_queue_milli.load(std::memory_order_relaxed)) / 1000;
  s.adaptive_recommended_cap = capacity.recommended_cap.load(std::memory_order_relaxed);
  for (Counter c : kAllCounters) s.counter(c) = layout_->counter(c).load(std::memory_order_relaxed);
  return s;
}

}  // namespace concert::shm
