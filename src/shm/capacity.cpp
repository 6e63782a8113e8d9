// The origin's capacity as the master learned it; see capacity.h.
#include "shm/capacity.h"

#include <cmath>

#include "shm/layout.h"

namespace concert::shm {

void Capacity::stopAdaptive() {
  layout_->header->capacity.adaptive_stopped.store(1, std::memory_order_seq_cst);
}

bool Capacity::adaptiveStopped() const {
  return layout_->header->capacity.adaptive_stopped.load(std::memory_order_seq_cst) != 0;
}

void Capacity::resumeAdaptive() {
  layout_->header->capacity.adaptive_stopped.store(0, std::memory_order_seq_cst);
}

void Capacity::publish(const CapacityReading& r) {
  CapacityCells& c = layout_->header->capacity;
  constexpr auto kOrder = std::memory_order_relaxed;
  c.adaptive_active.store(r.adaptive ? 1 : 0, kOrder);
  c.base_latency_us.store(r.base_latency_us, kOrder);
  c.origin_queue_milli.store(std::llround(r.origin_queue * 1000), kOrder);
  c.recommended_cap.store(r.recommended_cap, kOrder);
  c.knee_latency_us.store(r.knee_latency_us, kOrder);
  c.peak_throughput_milli.store(std::llround(r.peak_throughput * 1000), kOrder);
  // Stored as value + 1, so that a segment that never had a status page
  // (all zero) reads as unknown.
  c.origin_status_active.store(r.origin_active + 1, kOrder);
  c.origin_status_total.store(r.origin_total + 1, kOrder);
  c.origin_status_queue.store(r.origin_listen_queue + 1, kOrder);
  c.origin_status_max_reached.store(r.origin_max_children_reached + 1, kOrder);
}

CapacityReading Capacity::reading() const {
  const CapacityCells& c = layout_->header->capacity;
  constexpr auto kOrder = std::memory_order_relaxed;
  CapacityReading r;
  r.adaptive = c.adaptive_active.load(kOrder) != 0;
  r.base_latency_us = c.base_latency_us.load(kOrder);
  r.origin_queue = static_cast<double>(c.origin_queue_milli.load(kOrder)) / 1000;
  r.recommended_cap = c.recommended_cap.load(kOrder);
  r.knee_latency_us = c.knee_latency_us.load(kOrder);
  r.peak_throughput = static_cast<double>(c.peak_throughput_milli.load(kOrder)) / 1000;
  r.origin_active = c.origin_status_active.load(kOrder) - 1;
  r.origin_total = c.origin_status_total.load(kOrder) - 1;
  r.origin_listen_queue = c.origin_status_queue.load(kOrder) - 1;
  r.origin_max_children_reached = c.origin_status_max_reached.load(kOrder) - 1;
  return r;
}

}  // namespace concert::shm
