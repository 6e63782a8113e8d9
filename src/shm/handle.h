// Handle: what a subsystem of the segment holds in each process: the carved
// layout it reads and writes (layout.h) and the worker-slot table it wakes
// waiters through (worker_slots.h). Process-local pointers only, set once by
// Segment::create; nothing of a Handle is in shared memory, so a SIGKILL
// leaves nothing of it behind.
#pragma once

namespace concert::shm {

class Layout;
class WorkerSlots;

class Handle {
 public:
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

 protected:
  Handle(Layout& layout, WorkerSlots& slots) : layout_(&layout), slots_(&slots) {}
  ~Handle() = default;

  Layout* layout_;
  WorkerSlots* slots_;
};

}  // namespace concert::shm
