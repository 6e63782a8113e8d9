// The forked child's first steps; see child_process.h.
#include "common/child_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common/log.h"

namespace concert::common {

bool enterChildProcess(const std::vector<int>& close_fds,
                       const std::function<bool(std::string* error)>& drop_privileges, int master_pid) {
  for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGALRM, SIGCHLD}) signal(sig, SIG_DFL);
  signal(SIGHUP, SIG_IGN);
  signal(SIGUSR2, SIG_IGN);  // the master's: a binary upgrade
  signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGTERM, SIGINT, SIGQUIT, SIGUSR1, SIGHUP, SIGCHLD, SIGALRM}) sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  for (int fd : close_fds) close(fd);
  std::string error;
  if (drop_privileges && !drop_privileges(&error)) {
    LOG_ERROR("%s", error.c_str());
    return false;
  }
  // The getppid() check closes the window between fork and prctl.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  return getppid() == master_pid;
}

}  // namespace concert::common
