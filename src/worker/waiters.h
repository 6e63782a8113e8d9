// The worker's side of admission::Waiters (admission/context.h).
//
// The segment's waiting flag is one bit per (worker slot, resource): "wake
// me when one frees". A worker may park many requests on the same resource,
// so it counts them: the first park raises the flag, the last unpark lowers
// it. This object is the only writer of its slot's flags. Only the worker's
// own (single) event-loop thread calls it.
#pragma once

#include <array>
#include <cstdint>

#include "admission/context.h"

namespace concert::worker {

class SlotWaiters final : public admission::Waiters {
 public:
  // `draining` is read on every call to draining(); it must outlive this.
  SlotWaiters(shm::Segment* segment, shm::WorkerSlot slot, const bool* draining)
      : segment_(segment), slot_(slot), draining_(draining) {}

  void park(shm::Resource resource) override;
  void unpark(shm::Resource resource) override;  // without a matching park: ignored
  bool draining() const override { return *draining_; }

  int64_t count(shm::Resource resource) const { return counts_[index(resource)]; }

 private:
  static size_t index(shm::Resource r) { return static_cast<size_t>(r); }

  shm::Segment* segment_;
  shm::WorkerSlot slot_;
  const bool* draining_;
  std::array<int64_t, 3> counts_{};
};

}  // namespace concert::worker
