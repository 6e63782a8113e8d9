// What admission needs from the process it runs in, and nothing more.
//
// The guards and handlers of src/admission/ decide; the worker's event loop
// (src/worker/) moves bytes and keeps the parked requests. They meet here:
//
//   AdmissionContext  the configuration of this generation, the shared
//                     segment, this worker's slot in it, and the worker's
//                     Waiters and SaturationLog. A guard keeps a reference to
//                     the context; it holds no process-wide state of its own.
//   Waiters           implemented by the worker. A guard that is about to wait
//                     for a resource calls park(resource) before it checks the
//                     shared state once more (so a release between the check
//                     and the park cannot be missed), and unpark(resource)
//                     exactly once when it stops waiting. The worker counts
//                     parked requests per resource and alone raises and lowers
//                     its slot's shared waiting flag: raised by the first park,
//                     lowered by the last unpark.
#pragma once

#include "config/config.h"
#include "shm/segment.h"

namespace concert::admission {

class SaturationLog;

class Waiters {
 public:
  virtual ~Waiters() = default;
  virtual void park(shm::Resource resource) = 0;
  virtual void unpark(shm::Resource resource) = 0;
  // The worker is draining: no request is held any more; a page request that
  // would be held gets its waiting-room answer at once.
  virtual bool draining() const = 0;
};

struct AdmissionContext {
  config::ConfigPtr config;
  shm::Segment* segment = nullptr;
  shm::WorkerSlot slot = shm::kNoSlot;
  Waiters* waiters = nullptr;
  SaturationLog* saturation = nullptr;
};

}  // namespace concert::admission
