// What a worker process is given by the master at fork time. Everything here
// is inherited: the Config snapshot of the worker's generation, the shared
// segment mapping, the listening sockets and the slot's eventfd.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
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
  std::vector<int> listen_fds;        // bound and listening, owned by the master
  std::vector<int> admin_listen_fds;  // -admin-listen's, likewise
  std::vector<int> close_fds;   // the master's, closed at once by the worker
  int control_fd = -1;          // the worker's end of the master's control channel (common/control.h)
  // Switches to -user; false with `error` when that failed (the worker then
  // exits instead of serving with the master's credentials).
  std::function<bool(std::string* error)> drop_privileges;
};

// The worker process's main, called in the child right after fork(); never
// returns. It sets the worker up (log role and generation, signals, the
// descriptors it must not keep, credentials, parent-death signal, its slot
// in the segment), builds its event_base, accepts on listen_fds and serves
// until told to stop, then exits with the status.
// Signals: SIGTERM / SIGINT / SIGQUIT = drain (stop accepting, finish in
// flight up to shutdown-grace, exit 0; 1 if the grace ran out);
// SIGUSR1 = reopen the access and error logs. On the control channel the
// master parks it (a reload that grows the segment: it waits between two
// events until told to go on, on the same segment or on the grown copy).
// The worker exits on its own
// when the master goes away (parent-death signal and a getppid() check).
[[noreturn]] void runWorkerProcess(const WorkerContext& context);

}  // namespace concert::worker
