// What a worker process is given by the master at fork time. Everything here
// is inherited: the Config snapshot of the worker's generation, the shared
// segment mapping, the listening sockets and the slot's eventfd.
#pragma once

#include <cstdint>
#include <vector>

#include "config/config.h"
#include "shm/segment.h"

namespace concert::worker {

struct WorkerContext {
  config::ConfigPtr config;
  shm::Segment* segment = nullptr;
  shm::WorkerSlot slot = shm::kNoSlot;
  uint32_t generation = 1;
  int master_pid = 0;
  std::vector<int> listen_fds;  // bound and listening, owned by the master
};

// The worker process's main: builds its event_base, accepts on listen_fds,
// serves until told to stop, and returns the process exit status.
// Signals: SIGTERM / SIGINT / SIGQUIT = drain (stop accepting, finish in
// flight up to shutdown-grace, exit 0; 1 if the grace ran out);
// SIGUSR1 = reopen the access and error logs. The worker exits on its own
// when the master goes away (parent-death signal and a getppid() check).
int runWorker(const WorkerContext& context);

}  // namespace concert::worker
