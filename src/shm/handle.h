// Handle: what a subsystem of the segment holds in each process (the carved
// layout it reads and writes, layout.h, and the worker-slot table it wakes
// waiters through, worker_slots.h) and the one duty every such subsystem
// has towards a dead worker: reclaim(). Process-local pointers only, set
// once by Segment::create; nothing of a Handle is in shared memory, so a
// SIGKILL leaves nothing of it behind.
#pragma once

#include <cstdint>

#include "shm/types.h"

namespace concert::shm {

class Layout;
class WorkerSlots;

class Handle {
 public:
  // Made by Segment::create (Layout is private to src/shm).
  Handle(Layout& layout, WorkerSlots& slots) : layout_(&layout), slots_(&slots) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

 protected:
  ~Handle() = default;

  // Master only, from Segment::reclaimDeadWorker, after waitpid() reaped the
  // slot's process: give back what the slot still held in this subsystem's
  // words (exactly what its header says a SIGKILL leaves there) and return
  // how much that was. Wakes nobody: reclaimDeadWorker wakes every resource
  // once, after every subsystem is done.
  virtual int64_t reclaim(WorkerSlot slot) = 0;

  Layout* layout_;
  WorkerSlots* slots_;

 private:
  friend class Segment;
};

}  // namespace concert::shm
