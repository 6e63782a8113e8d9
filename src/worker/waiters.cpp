// Parked-request counts and the slot's waiting flags; see waiters.h.
#include "worker/waiters.h"

namespace concert::worker {

void SlotWaiters::park(shm::Resource resource) {
  if (counts_[index(resource)]++ == 0 && segment_) segment_->slots().setWaiting(slot_, resource, true);
}

void SlotWaiters::unpark(shm::Resource resource) {
  int64_t& n = counts_[index(resource)];
  if (n <= 0) return;
  if (--n == 0 && segment_) segment_->slots().setWaiting(slot_, resource, false);
}

}  // namespace concert::worker
