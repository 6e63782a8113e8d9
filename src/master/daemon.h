// Process-level chores of the master: detaching from the terminal, the pid
// file, and the unprivileged user the workers run as. Master only, all of it
// before the first worker is forked (the pid file is also removed at exit).
#pragma once

#include <sys/types.h>

#include <string>

namespace concert::master {

// Classic double fork. The original process does not exit at once: it waits
// on a pipe until the daemon reports that it is serving (or failed), and
// exits 0 or 1 accordingly, so `concert -daemon && curl ...` and systemd's
// Type=forking see a ready service. The intermediate child exits 0; the
// grandchild (no controlling terminal, not a session leader) returns true
// with `ready_fd` set. It chdir("/")s, sets umask 022 and points stdin,
// stdout and stderr at /dev/null. The error log keeps working only when it is
// a file (-error-log FILE, opened before this call); with the default
// (stderr) a daemon's lifecycle log is discarded. Returns false with `error`
// set if a step fails before the first fork.
bool daemonize(int* ready_fd, std::string* error);

// Daemon side: tell the waiting original process how startup went (it prints
// `error` on its stderr when not ok); closes fd. No-op when ready_fd < 0.
void reportDaemonReady(int ready_fd, bool ok, const std::string& error);

// The pid file. check() refuses when the file names a live process that is
// not us; write() records getpid(); remove() deletes it only if it still
// names us (a second instance may have taken it over).
class PidFile {
 public:
  explicit PidFile(std::string path) : path_(std::move(path)) {}
  bool enabled() const { return !path_.empty(); }
  bool check(std::string* error) const;
  bool write(std::string* error);
  void remove();

 private:
  std::string path_;
  bool written_ = false;
};

// The user the workers drop to. Resolved in the master at startup (an unknown
// name is a startup error); applied in each worker child after fork.
struct RunAs {
  bool active = false;  // true only when started as root with -user
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Not root with -user set → `warning` filled and active = false.
bool resolveRunAs(const std::string& user, RunAs* out, std::string* error, std::string* warning);

// In the worker child: initgroups + setgid + setuid, and a check that root
// cannot be regained. False with `error` when any step fails (the worker then
// exits instead of serving as root).
bool dropPrivileges(const RunAs& run_as, std::string* error);

}  // namespace concert::master
