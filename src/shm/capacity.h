// What the master learned about the origin's capacity, for every worker to
// report: -adaptive's state (GET /_room/metrics, /_room/report) and the
// capacity advisor's recommended cap (the latency knee, master/adaptive.h),
// plus the origin's own status page when -origin-status names one.
//
// Words (CapacityCells in layout.h): every value is the master's, written
// once per janitor tick (one store each; a reader may see one tick's value
// beside the previous tick's, never a torn one), except `adaptive_stopped`:
// POST /_room/cap in any worker sets it (the operator took the cap over),
// and the master clears it on a reload whose configuration says -adaptive.
// Nothing names a slot, so nothing is reclaimed; a SIGKILL leaves every word
// valid.
#pragma once

#include <cstdint>

#include "shm/handle.h"
#include "shm/types.h"

namespace concert::shm {

struct CapacityReading {
  bool adaptive = false;            // -adaptive moves the cap now
  int64_t base_latency_us = 0;      // its unqueued time to first byte (0: not known yet)
  double origin_queue = 0;          // its estimate of requests waiting inside the origin
  int64_t recommended_cap = 0;      // the advisor's cap (0: not enough seen yet)
  int64_t knee_latency_us = 0;      // the advisor's unqueued time to first byte
  double peak_throughput = 0;       // the advisor's most pages per second
  // The origin's status page (-origin-status); -1 where unknown.
  int64_t origin_active = -1;
  int64_t origin_total = -1;
  int64_t origin_listen_queue = -1;
  int64_t origin_max_children_reached = -1;
};

class Capacity final : public Handle {
 public:
  using Handle::Handle;

  // A runtime cap (POST /_room/cap): -adaptive stops until a reload says
  // -adaptive again.
  void stopAdaptive();
  bool adaptiveStopped() const;
  void resumeAdaptive();  // master, on such a reload

  void publish(const CapacityReading& reading);  // master
  CapacityReading reading() const;

 private:
  friend class Segment;
  int64_t reclaim(WorkerSlot) override { return 0; }
};

}  // namespace concert::shm
