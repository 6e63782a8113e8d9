// What every process the master forks does first (workers, the cluster
// agent): take back the signal dispositions and mask the master set up,
// close what it must not hold, drop privileges, and die with the master.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace concert::common {

// In the child, right after fork(): SIGTERM, SIGINT, SIGUSR1, SIGALRM and
// SIGCHLD back to their defaults (the child handles the ones it wants in its
// own loop), SIGHUP and SIGPIPE ignored (reload is the master's; a write to a
// vanished peer must be an EPIPE), the master's blocked signals unblocked;
// `close_fds` closed; `drop_privileges` run (when set); SIGTERM on the
// master's death (PR_SET_PDEATHSIG, after the credential change, which
// clears it). False (and logged) when privileges could not be dropped, or
// the master is gone already: the child exits then.
bool enterChildProcess(const std::vector<int>& close_fds,
                       const std::function<bool(std::string* error)>& drop_privileges, int master_pid);

}  // namespace concert::common
